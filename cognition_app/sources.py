"""The source layer: one way to invoke any response source, traced durably (SPEC §5, §7).

Every call starts by writing its SourceInvocation row (and, for LLM generations, its LlmCall
row) with status ``running`` in a transaction of its own, before any byte is sent; streamed
chunks are appended in small batches; the rows are finished as ``succeeded`` or ``failed``.
URLs and keys come only from ``CHUKWA_*`` environment variables named by the source.
Interfaces are looked up in :data:`INTERFACES`; ``mcp_tool`` is reserved and not executable.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any
from uuid import UUID

import httpx
from django.db import connection, transaction
from django.utils import timezone
from jsonschema import Draft202012Validator

from cognition_app.models import (
    InvocationStatus,
    LlmCall,
    LlmChunk,
    SourceInvocation,
    SourceProbe,
)
from scenarios_app.identifiers import is_env_var_name
from scenarios_app.models import JsonSchema, ResponseSource

# Streamed chunks are flushed by time, so a generation's query count does not grow with the
# length of its reply; CHUNK_BATCH only bounds the rows held in memory between flushes.
CHUNK_BATCH = 512
CHUNK_FLUSH_SECONDS = 0.25
REDACTED_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
PROBE_SCHEMA_NAME = "chukwa_conformance_probe"
PROBE_ANSWER = "chukwa-conformance-ok"
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": [PROBE_ANSWER]}},
    "required": ["probe"],
    "additionalProperties": False,
}


class SourceFailure(Exception):
    """A source call that failed for a reason other than the model's content: configuration,
    transport, HTTP status, a non-JSON or schema-invalid body. Fails the attempt (no retry)."""

    def __init__(
        self, failure_class: str, message: str, *, invocation_id: UUID | None = None
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.invocation_id = invocation_id


# --- components (immutable, so a process-wide cache is safe) --------------------------------


@lru_cache(maxsize=4096)
def source_content(source_hash: str) -> dict[str, Any]:
    return ResponseSource.objects.values_list("content", flat=True).get(pk=source_hash)


@lru_cache(maxsize=4096)
def schema_content(schema_hash: str) -> dict[str, Any]:
    return JsonSchema.objects.values_list("content", flat=True).get(pk=schema_hash)


@lru_cache(maxsize=4096)
def schema_validator(schema_hash: str) -> Draft202012Validator:
    return Draft202012Validator(schema_content(schema_hash))


def schema_errors(validator: Draft202012Validator, value: Any) -> list[dict[str, str]]:
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    return [
        {"pointer": "".join(f"/{p}" for p in e.absolute_path), "message": e.message} for e in errors
    ]


def env_value(name: str, field_name: str) -> str:
    """The value of a ``CHUKWA_*`` variable a source names; missing → a failure naming it."""
    if not is_env_var_name(name):  # validated at put; re-checked because it guards secrets
        raise SourceFailure("config", f"{field_name} {name!r} is not an allowed variable name")
    value = os.environ.get(name, "")
    if not value:
        raise SourceFailure(
            "config", f"environment variable {name} (named by the source's {field_name}) is not set"
        )
    return value


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        k.lower(): ("[redacted]" if k.lower() in REDACTED_HEADERS else v)
        for k, v in headers.items()
    }


_client_lock = threading.Lock()
_client: httpx.Client | None = None


def http_client() -> httpx.Client:
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(follow_redirects=False)
        return _client


# --- invocation context and rows ------------------------------------------------------------


@dataclass
class CallContext:
    attempt_id: UUID
    world_id: int
    world_slug: str
    attempted_turn: int
    next_seq: Callable[[], int]
    workflow_hash: str = ""
    node_id: str = ""
    subject_id: str = ""
    ambient_source_id: str = ""
    tool_name: str = ""
    parent_id: UUID | None = None
    generation_attempt: int | None = None
    tool_loop_round: int | None = None

    def headers(self, invocation_id: UUID) -> dict[str, str]:
        return {
            "X-Chukwa-World": self.world_slug,
            "X-Chukwa-Attempt": str(self.attempt_id),
            "X-Chukwa-Turn": str(self.attempted_turn),
            "X-Chukwa-Subject": self.subject_id,
            "X-Chukwa-Invocation": str(invocation_id),
        }


def _new_invocation(
    ctx: CallContext,
    *,
    kind: str,
    source_hash: str,
    source: Mapping[str, Any],
    request: Any,
    input_schema_hash: str = "",
    output_schema_hash: str = "",
) -> SourceInvocation:
    return SourceInvocation(
        attempt_id=ctx.attempt_id,
        world_id=ctx.world_id,
        attempted_turn=ctx.attempted_turn,
        seq=ctx.next_seq(),
        workflow_hash=ctx.workflow_hash,
        node_id=ctx.node_id,
        subject_id=ctx.subject_id,
        source_hash=source_hash,
        source_label=source.get("label", ""),
        kind=kind,
        ambient_source_id=ctx.ambient_source_id,
        tool_name=ctx.tool_name,
        parent_id=ctx.parent_id,
        started_at=timezone.now(),
        request=request,
        input_schema_hash=input_schema_hash,
        output_schema_hash=output_schema_hash,
        generation_attempt=ctx.generation_attempt,
        tool_loop_round=ctx.tool_loop_round,
    )


@contextmanager
def trace_write() -> Iterator[None]:
    """One transaction for trace rows, committed without waiting for the WAL flush.

    Committed rows are visible to every other session at once (the reviewer's timeline, the
    reaper); only a crash of the PostgreSQL server itself could lose the last few hundred
    milliseconds of trace writes — a worker crash loses nothing. Each generation writes its
    rows in a handful of such transactions instead of one synchronous commit per statement.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def _finish_invocation(inv: SourceInvocation, status: str, **fields: Any) -> None:
    now = timezone.now()
    fields.update(status=status, ended_at=now, duration_ms=_ms_since(inv.started_at, now))
    if connection.in_atomic_block:  # part of the caller's trace transaction
        SourceInvocation.objects.filter(pk=inv.pk).update(**fields)
    else:
        with trace_write():
            SourceInvocation.objects.filter(pk=inv.pk).update(**fields)
    for key, value in fields.items():
        setattr(inv, key, value)


def _ms_since(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds() * 1000)


# --- http_json --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpResult:
    value: Any
    invocation_id: UUID


def invoke_http_json(
    *,
    source_hash: str,
    body: Any,
    ctx: CallContext,
    kind: str,
    result_schema_hash: str = "",
    input_schema_hash: str = "",
) -> HttpResult:
    source = source_content(source_hash)
    iface = source["interface"]
    if iface["name"] != "http_json":
        raise SourceFailure(
            "not_executable", f"source {source_hash[:12]} is not an http_json source"
        )
    inv = _new_invocation(
        ctx,
        kind=kind,
        source_hash=source_hash,
        source=source,
        request={
            "method": "POST",
            "url_env": iface["url_env"],
            "path": iface.get("path", ""),
            "body": body,
        },
        input_schema_hash=input_schema_hash,
        output_schema_hash=result_schema_hash,
    )
    try:
        base = env_value(iface["url_env"], "url_env").rstrip("/")
    except SourceFailure as exc:
        inv.status = InvocationStatus.FAILED
        inv.failure_class, inv.failure_message = exc.failure_class, exc.message
        inv.ended_at = inv.started_at
        inv.duration_ms = 0
        inv.save(force_insert=True)
        exc.invocation_id = inv.pk
        raise
    inv.request["url"] = base + iface.get("path", "")
    with trace_write():  # the row exists before any byte is sent
        inv.save(force_insert=True)
    headers = ctx.headers(inv.pk)
    try:
        response = http_client().post(
            base + iface.get("path", ""),
            json=body,
            headers=headers,
            timeout=iface["timeout_ms"] / 1000,
        )
    except httpx.TimeoutException as exc:
        return _http_fail(inv, "transport", f"timed out after {iface['timeout_ms']} ms: {exc}")
    except httpx.HTTPError as exc:
        return _http_fail(inv, "transport", f"{type(exc).__name__}: {exc}")
    recorded = {
        "http_status": response.status_code,
        "response_headers": redact_headers(response.headers),
        "response_text": response.text[:200_000],
    }
    if response.status_code >= 400:
        return _http_fail(
            inv,
            "transport"
            if response.status_code >= 500 or response.status_code == 429
            else "http_status",
            f"HTTP {response.status_code} from {inv.source_label}: {response.text[:500]}",
            **recorded,
        )
    try:
        value = response.json()
    except ValueError as exc:
        return _http_fail(
            inv, "non_json", f"response is not JSON ({exc}): {response.text[:200]!r}", **recorded
        )
    recorded["response_json"] = value
    if result_schema_hash:
        errors = schema_errors(schema_validator(result_schema_hash), value)
        if errors:
            return _http_fail(
                inv,
                "schema_invalid",
                f"response does not match its result schema: {errors[0]['pointer'] or '(root)'}: "
                f"{errors[0]['message']}",
                validation_status="invalid",
                validation_errors=errors,
                **recorded,
            )
        recorded["validation_status"] = "valid"
    _finish_invocation(inv, InvocationStatus.SUCCEEDED, **recorded)
    return HttpResult(value, inv.pk)


def _http_fail(
    inv: SourceInvocation, failure_class: str, message: str, **fields: Any
) -> HttpResult:
    _finish_invocation(
        inv, InvocationStatus.FAILED, failure_class=failure_class, failure_message=message, **fields
    )
    raise SourceFailure(failure_class, message, invocation_id=inv.pk)


# --- llm_chat_completions -------------------------------------------------------------------


@dataclass
class Judgement:
    """What Chukwa made of a generation's text (computed before the rows are finished, so the
    finish and the judgement are written together)."""

    output_kind: str
    parse_error: str = ""
    validation_errors: list[Any] = field(default_factory=list)
    artifacts: dict[str, Any] = field(default_factory=dict)
    rejection: Any = None  # the node's rejection (a ModelContentRejected), if any
    output: Any = None


Judge = Callable[[str], Judgement]


@dataclass
class Generation:
    text: str
    invocation: SourceInvocation
    call: LlmCall
    finish_reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    judgement: Judgement | None = None


def _sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            # Read the body to its end (the chunked encoding's last, empty chunk): a response
            # closed before that is not returned to httpx's pool, and the next call would open
            # a new connection (a new TLS handshake against a remote endpoint).
            for _rest in lines:
                pass
            return
        try:
            yield json.loads(data)
        except ValueError:
            raise SourceFailure("transport", f"malformed stream event: {data[:200]!r}") from None


_probe_cache: dict[tuple[str, str], bool] = {}
_probe_lock = threading.Lock()


def ensure_schema_enforced(
    *, base_url: str, model: str, headers: dict[str, str], timeout: float
) -> None:
    """Conformance probe, once per (base URL, model): the backend must enforce a
    response_format JSON schema; one that does not fails every schema-bound call loudly."""
    key = (base_url, model)
    with _probe_lock:
        if key not in _probe_cache:
            stored = SourceProbe.objects.filter(base_url=base_url, model=model).first()
            if stored is None:
                enforces, detail = _run_probe(base_url, model, headers, timeout)
                SourceProbe.objects.update_or_create(
                    base_url=base_url,
                    model=model,
                    defaults={"enforces_schema": enforces, "detail": detail},
                )
            else:
                enforces, detail = stored.enforces_schema, stored.detail
            if not enforces:
                raise SourceFailure(
                    "backend_not_enforcing",
                    f"the LLM backend at {base_url} (model {model}) does not enforce response_format "
                    f"JSON schemas: {detail}",
                )
            _probe_cache[key] = True


def _run_probe(
    base_url: str, model: str, headers: dict[str, str], timeout: float
) -> tuple[bool, str]:
    payload = {
        "model": model,
        "messages": [
            {"role": "system", "content": "Reply with a JSON object."},
            {"role": "user", "content": 'Say hello as {"probe": "..."} with any text you like.'},
        ],
        "stream": False,
        "max_tokens": 40,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": PROBE_SCHEMA_NAME, "schema": PROBE_SCHEMA, "strict": True},
        },
    }
    try:
        response = http_client().post(
            f"{base_url}/chat/completions", json=payload, headers=headers, timeout=timeout
        )
    except httpx.HTTPError as exc:
        raise SourceFailure(
            "transport", f"conformance probe could not reach {base_url}: {exc}"
        ) from None
    if response.status_code >= 500 or response.status_code == 429:
        raise SourceFailure(
            "transport", f"conformance probe: HTTP {response.status_code}: {response.text[:300]}"
        )
    if response.status_code >= 400:
        return (
            False,
            f"rejected response_format (HTTP {response.status_code}): {response.text[:300]}",
        )
    try:
        text = response.json()["choices"][0]["message"]["content"]
        answer = json.loads(text)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return False, f"probe reply is not the schema's JSON: {exc}"
    if answer != {"probe": PROBE_ANSWER}:
        return (
            False,
            f"probe reply {answer!r} does not follow the schema (expected {PROBE_ANSWER!r})",
        )
    return True, "schema enforced"


def invoke_llm(
    *,
    source_hash: str,
    messages: list[dict[str, str]],
    ctx: CallContext,
    response_schema: dict[str, Any] | None,
    schema_name: str = "output",
    output_schema_hash: str = "",
    judge: Judge | None = None,
) -> Generation:
    """One streamed generation. Transport errors and HTTP failures raise SourceFailure (they are
    not model-content failures); ``judge`` (pure, no I/O) says what the text is, and its verdict
    is written with the finished rows."""
    source = source_content(source_hash)
    iface = source["interface"]
    if iface["name"] != "llm_chat_completions":
        raise SourceFailure("not_executable", f"source {source_hash[:12]} is not an LLM source")
    params = dict(iface.get("params", {}))
    payload: dict[str, Any] = {
        "model": iface["model"],
        "messages": list(messages),
        "stream": True,
        "stream_options": {"include_usage": True},
        **params,
    }
    response_format = None
    if response_schema is not None:
        if iface["schema_delivery"] == "response_format":
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": response_schema, "strict": True},
            }
            payload["response_format"] = response_format
        else:  # prompt_only, only because the source says so
            payload["messages"] = [
                *messages,
                {
                    "role": "system",
                    "content": "Reply with one JSON object that validates against this JSON "
                    f"Schema, and nothing else:\n{json.dumps(response_schema)}",
                },
            ]
    inv = _new_invocation(
        ctx,
        kind="llm_generation",
        source_hash=source_hash,
        source=source,
        # The messages and the response format live on the LLM call row (not stored twice).
        request={
            **{k: v for k, v in payload.items() if k not in ("messages", "response_format")},
            "messages": f"{len(payload['messages'])} messages, on the LLM call",
            "response_format": (
                {"type": "json_schema", "name": schema_name} if response_format else None
            ),
        },
        output_schema_hash=output_schema_hash,
    )
    call = LlmCall(
        invocation=inv,
        base_url="",
        requested_model=iface["model"],
        messages=payload["messages"],
        params=params,
        response_format=response_format,
        started_at=inv.started_at,
    )
    try:
        base_url = env_value(iface["base_url_env"], "base_url_env").rstrip("/")
        headers = {"Content-Type": "application/json"}
        if "api_key_env" in iface:
            headers["Authorization"] = "Bearer " + env_value(iface["api_key_env"], "api_key_env")
    except SourceFailure as exc:
        with transaction.atomic():
            inv.status = call.status = InvocationStatus.FAILED
            inv.failure_class, inv.failure_message = exc.failure_class, exc.message
            inv.ended_at = call.ended_at = inv.started_at
            inv.duration_ms = 0
            call.error = exc.message
            inv.save(force_insert=True)
            call.save(force_insert=True)
        exc.invocation_id = inv.pk
        raise
    call.base_url = base_url
    timeout = iface["timeout_ms"] / 1000
    if response_format is not None:
        ensure_schema_enforced(
            base_url=base_url, model=iface["model"], headers=headers, timeout=timeout
        )
    with trace_write():  # both rows exist before any byte is sent
        inv.save(force_insert=True)
        call.save(force_insert=True)
    return _stream(inv, call, base_url, headers, payload, timeout, judge)


def _stream(
    inv: SourceInvocation,
    call: LlmCall,
    base_url: str,
    headers: dict[str, str],
    payload: dict[str, Any],
    timeout: float,
    judge: Judge | None = None,
) -> Generation:
    started = time.monotonic()
    pending: list[LlmChunk] = []
    seq = 0
    last_flush = started
    parts: list[str] = []
    usage: dict[str, int] = {}
    finish_reason = ""
    response_model = ""
    ttft_ms: int | None = None
    http_meta: dict[str, Any] = {}  # status and redacted headers, once the response starts

    def flush() -> None:
        nonlocal last_flush
        if pending:
            with trace_write():
                LlmChunk.objects.bulk_create(pending)
            pending.clear()
        last_flush = time.monotonic()

    def fail(
        failure_class: str, message: str, http_status: int | None = None, body: str = ""
    ) -> SourceFailure:
        flush()
        text = "".join(parts)
        now = timezone.now()
        LlmCall.objects.filter(pk=call.pk).update(
            status=InvocationStatus.FAILED,
            ended_at=now,
            error=message,
            raw_text=text,
            ttft_ms=ttft_ms,
        )
        _finish_invocation(
            inv,
            InvocationStatus.FAILED,
            failure_class=failure_class,
            failure_message=message,
            http_status=http_status or http_meta.get("http_status"),
            response_headers=http_meta.get("response_headers", {}),
            response_text=body or text,
        )
        return SourceFailure(failure_class, message, invocation_id=inv.pk)

    try:
        with http_client().stream(
            "POST", f"{base_url}/chat/completions", json=payload, headers=headers, timeout=timeout
        ) as response:
            http_meta["http_status"] = response.status_code
            http_meta["response_headers"] = redact_headers(response.headers)
            if response.status_code != 200:
                body = response.read().decode("utf-8", "replace")[:20_000]
                status = response.status_code
                if status >= 500 or status == 429:
                    raise fail(
                        "transport",
                        f"HTTP {status} from the LLM endpoint: {body[:500]}",
                        status,
                        body,
                    )
                if "response_format" in payload:
                    raise fail(
                        "response_format_rejected",
                        f"the LLM endpoint rejected the request with response_format json_schema "
                        f"(HTTP {status}); Chukwa does not retry without it: {body[:500]}",
                        status,
                        body,
                    )
                raise fail(
                    "http_status",
                    f"HTTP {status} from the LLM endpoint: {body[:500]}",
                    status,
                    body,
                )
            for event in _sse_events(response.iter_lines()):
                response_model = event.get("model") or response_model
                if event.get("usage"):
                    usage = {k: v for k, v in event["usage"].items() if isinstance(v, int)}
                    details = event["usage"].get("prompt_tokens_details") or {}
                    if isinstance(details.get("cached_tokens"), int):
                        usage["cached_tokens"] = details["cached_tokens"]
                for choice in event.get("choices") or []:
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        now = time.monotonic()
                        offset = int((now - started) * 1000)
                        if ttft_ms is None:
                            ttft_ms = offset  # stored at the end; live, it is chunk 0's offset
                        parts.append(delta)
                        pending.append(
                            LlmChunk(call_id=call.pk, seq=seq, offset_ms=offset, text=delta)
                        )
                        seq += 1
                        if len(pending) >= CHUNK_BATCH or now - last_flush >= CHUNK_FLUSH_SECONDS:
                            flush()
                    if choice.get("finish_reason"):
                        finish_reason = choice["finish_reason"]
    except SourceFailure as exc:
        if exc.invocation_id is None:  # from _sse_events: finish the rows like any failure
            raise fail(exc.failure_class, exc.message) from None
        raise
    except httpx.TimeoutException as exc:
        raise fail(
            "transport", f"the LLM endpoint timed out after {timeout:.0f} s: {exc}"
        ) from None
    except httpx.HTTPError as exc:
        raise fail("transport", f"{type(exc).__name__}: {exc}") from None
    text = "".join(parts)
    if not finish_reason:
        raise fail("transport", "the stream ended without a finish_reason (connection dropped?)")
    if usage.get("completion_tokens") is not None:
        usage_source = "provider"
    else:
        prompt_chars = sum(len(m.get("content", "")) for m in payload["messages"])
        usage = {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, len(text) // 4),
        }
        usage_source = "estimated"
    gen = Generation(text=text, invocation=inv, call=call, finish_reason=finish_reason, usage=usage)
    try:
        gen.judgement = judge(text) if judge is not None else None
    finally:
        # One transaction: the last chunks, the finished rows and the verdict.
        now = timezone.now()
        with trace_write():
            if pending:
                LlmChunk.objects.bulk_create(pending)
                pending.clear()
            _finish_generation(
                inv,
                call,
                text,
                now,
                ttft_ms,
                finish_reason,
                response_model,
                usage,
                usage_source,
                http_meta,
                gen.judgement,
            )
    call.raw_text, call.finish_reason = text, finish_reason
    return gen


def _finish_generation(
    inv: SourceInvocation,
    call: LlmCall,
    text: str,
    now: datetime,
    ttft_ms: int | None,
    finish_reason: str,
    response_model: str,
    usage: dict[str, int],
    usage_source: str,
    http_meta: dict[str, Any],
    judgement: Judgement | None,
) -> None:
    """Finish both rows with one UPDATE each, the verdict included."""
    call_verdict: dict[str, Any] = {}
    inv_verdict: dict[str, Any] = {}
    if judgement is not None:
        errors = judgement.validation_errors
        call_verdict = {
            "parse_error": judgement.parse_error,
            "validation_errors": errors,
            "artifacts": judgement.artifacts,
        }
        inv_verdict = {
            "model_output_kind": judgement.output_kind,
            "validation_status": "invalid" if (judgement.parse_error or errors) else "valid",
            "validation_errors": errors,
        }
    LlmCall.objects.filter(pk=call.pk).update(
        **call_verdict,
        status=InvocationStatus.SUCCEEDED,
        ended_at=now,
        ttft_ms=ttft_ms,
        raw_text=text,
        normalized_text=text.strip(),
        finish_reason=finish_reason,
        response_model=response_model,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        cached_tokens=usage.get("cached_tokens"),
        usage_source=usage_source,
    )
    _finish_invocation(
        inv, InvocationStatus.SUCCEEDED, response_text=text, **http_meta, **inv_verdict
    )


def interrupt_running(*, attempt_id: UUID | str, reason: str) -> int:
    """The reaper's part: running rows of a dead attempt become ``interrupted``."""
    now = timezone.now()
    ids = list(
        SourceInvocation.objects.filter(
            attempt_id=attempt_id, status=InvocationStatus.RUNNING
        ).values_list("pk", flat=True)
    )
    SourceInvocation.objects.filter(pk__in=ids).update(
        status=InvocationStatus.INTERRUPTED,
        ended_at=now,
        failure_class="interrupted",
        failure_message=reason,
    )
    LlmCall.objects.filter(invocation_id__in=ids, status=InvocationStatus.RUNNING).update(
        status=InvocationStatus.INTERRUPTED, ended_at=now, error=reason
    )
    return len(ids)
