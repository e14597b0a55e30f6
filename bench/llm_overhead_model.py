"""Part 2 of the LLM overhead bench: the embedded model's tokens per second on streamed
``json_schema`` requests."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devservices.embedded_llm import EmbeddedLLMServer

MODEL_REQUESTS = 3
MODEL_MAX_TOKENS = 256
MODEL_TIMEOUT_S = 300.0
MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["narration", "effects"],
    "properties": {
        "narration": {"type": "string", "maxLength": 160},
        "effects": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["op", "entity_id", "state"],
                "properties": {
                    "op": {"type": "string", "enum": ["set_entity_state"]},
                    "entity_id": {"type": "string", "enum": ["keeper", "p00", "p01", "p02"]},
                    "state": {"type": "string", "maxLength": 80},
                },
            },
        },
    },
}
MODEL_MESSAGES = [
    {
        "role": "system",
        "content": "You are the simulation director. Reply with one JSON object: a past-tense "
        "narration and the state changes of the entities involved.",
    },
    {
        "role": "user",
        "content": "Storeroom: a narrow room with four shelves and a tin roof. Entities: keeper "
        "(the acting subject, standing at the door with a lantern), p00 (a wooden crate on "
        "shelf 0), p01 (a crate on shelf 1), p02 (a crate on shelf 2). The keeper wants to check "
        "the crates. Decide what happens this turn.",
    },
]


@dataclass
class ModelRun:
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    total_s: float
    decode_s: float
    valid: bool
    finish_reason: str

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.total_s

    @property
    def decode_tokens_per_s(self) -> float:
        return (self.completion_tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


def _model_request(base_url: str, seed: int) -> ModelRun:
    import httpx
    from httpx_sse import EventSource
    from jsonschema import Draft202012Validator

    payload = {
        "model": "SmolLM2-135M-Instruct",
        "messages": MODEL_MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": MODEL_MAX_TOKENS,
        "temperature": 0.7,
        "seed": seed,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "world_patch", "schema": MODEL_SCHEMA, "strict": True},
        },
    }
    parts: list[str] = []
    usage: dict[str, Any] = {}
    finish_reason = ""
    first: float | None = None
    last = 0.0
    with httpx.Client() as client:
        t0 = time.perf_counter()
        with client.stream(
            "POST", f"{base_url}/chat/completions", json=payload, timeout=MODEL_TIMEOUT_S
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(
                    f"embedded model: HTTP {response.status_code}: {response.read()[:300]!r}"
                )
            for sse in EventSource(response).iter_sse():
                data = sse.data.strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(f"embedded model: {event['error']}")
                usage = event.get("usage") or usage
                for choice in event.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        last = time.perf_counter()
                        first = first if first is not None else last
                        parts.append(content)
                    finish_reason = choice.get("finish_reason") or finish_reason
        done = time.perf_counter()
    if first is None or not usage:
        raise RuntimeError("embedded model: no content or no usage in the stream")
    text = "".join(parts)
    try:
        valid = not list(Draft202012Validator(MODEL_SCHEMA).iter_errors(json.loads(text)))
    except ValueError:
        valid = False
    return ModelRun(
        prompt_tokens=int(usage["prompt_tokens"]),
        completion_tokens=int(usage["completion_tokens"]),
        ttft_s=first - t0,
        total_s=done - t0,
        decode_s=last - first,
        valid=valid,
        finish_reason=finish_reason,
    )


def part_two() -> list[ModelRun]:
    from devservices import embedded_llm

    print("\n== 2. Embedded model: tokens per second ==")
    t0 = time.perf_counter()
    server: EmbeddedLLMServer = embedded_llm.serve("127.0.0.1", 0, threads=2, ctx=4096)
    try:
        host, port = server.server_address[:2]
        base_url = f"http://{host}:{port}/v1"
        print(
            f"{embedded_llm.MODEL_NAME} ({server.engine.path.name}) loaded and serving at "
            f"{base_url} in {time.perf_counter() - t0:.1f} s (threads 2, ctx 4096)"
        )
        print(
            f"{MODEL_REQUESTS} streamed requests, response_format json_schema (narration ≤160 "
            f"chars, ≤2 effects with state ≤80 chars), max_tokens {MODEL_MAX_TOKENS}, "
            f"temperature 0.7"
        )
        runs: list[ModelRun] = []
        for i in range(MODEL_REQUESTS):
            run = _model_request(base_url, seed=1000 + i)
            runs.append(run)
            print(
                f"  request {i + 1}: prompt {run.prompt_tokens} tok, completion "
                f"{run.completion_tokens} tok ({run.finish_reason}), TTFT "
                f"{run.ttft_s * 1000:.0f} ms, total {run.total_s:.2f} s → "
                f"{run.tokens_per_s:.1f} tok/s (decode only {run.decode_tokens_per_s:.1f} tok/s), "
                f"schema-valid JSON: {'yes' if run.valid else 'NO'}"
            )
        print("  (request 1 also pays first-use costs: the weights are paged in from the file)")
        print(
            f"  median: {statistics.median(r.tokens_per_s for r in runs):.1f} tok/s "
            f"(completion tokens / request-to-last-byte time), decode only "
            f"{statistics.median(r.decode_tokens_per_s for r in runs):.1f} tok/s, TTFT "
            f"{statistics.median(r.ttft_s for r in runs) * 1000:.0f} ms"
        )
        return runs
    finally:
        server.shutdown()
        server.server_close()
