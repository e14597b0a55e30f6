"""The source layer: one way to invoke any response source, traced durably (SPEC §5, §7).

Every call starts by writing its SourceInvocation row (and, for LLM generations, its LlmCall
row) with status ``running`` in a transaction of its own, before any byte is sent; streamed
chunks are appended in small batches; the rows are finished as ``succeeded`` or ``failed``.
URLs and keys come only from ``CHUKWA_*`` environment variables named by the source.
Interfaces are looked up in :data:`INTERFACES`; ``mcp_tool`` is reserved and not executable.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from uuid import UUID

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from jsonschema import Draft202012Validator

from chukwa_core.component_validation import schema_validator_for
from chukwa_core.ids import bound_key_env_name, is_key_env_name, is_url_env_name
from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict, storable_text
from cognition_app.models import (
    InvocationKind,
    InvocationStatus,
    LlmCall,
    LlmChunk,
    SourceInvocation,
    SourceProbe,
)
from scenarios_app.models import JsonSchema, ResponseSource

logger = logging.getLogger(__name__)

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
    return schema_validator_for(schema_content(schema_hash))


def schema_errors(validator: Draft202012Validator, value: Any) -> list[dict[str, str]]:
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    return [
        {"pointer": "".join(f"/{p}" for p in e.absolute_path), "message": e.message} for e in errors
    ]


def _env_value(name: str, field_name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise SourceFailure(
            "config", f"environment variable {name} (named by the source's {field_name}) is not set"
        )
    return value


def url_from_env(name: str, field_name: str) -> str:
    """The base URL a source's URL variable holds, checked to be an absolute http(s) URL with
    no credentials, query or fragment. Failures name the variable, never its value (a
    misconfigured variable may hold a secret)."""
    # Validated at put; re-checked because these names guard secrets.
    if not is_url_env_name(name):
        raise SourceFailure("config", f"{field_name} {name!r} is not an allowed URL variable name")
    value = _env_value(name, field_name).strip()
    problem = "is not an absolute http(s) URL"
    try:
        url = httpx.URL(value)
        if any(ch.isspace() or ord(ch) < 32 for ch in value):
            problem = "contains whitespace or control characters"
        elif url.scheme in ("http", "https") and url.host:
            if url.userinfo:
                problem = "carries credentials (put keys in the bound *_API_KEY variable)"
            elif url.query or url.fragment:
                problem = "carries a query or fragment"
            else:
                return value.rstrip("/")
    except (httpx.InvalidURL, ValueError, TypeError):
        pass
    raise SourceFailure(
        "config", f"environment variable {name} (named by the source's {field_name}) {problem}"
    )


def key_from_env(name: str, field_name: str, url_env: str) -> str:
    """The key a source's key variable holds; only the key bound to its URL variable."""
    if not is_key_env_name(name) or bound_key_env_name(url_env) != name:
        raise SourceFailure(
            "config", f"{field_name} {name!r} is not the key variable bound to {url_env}"
        )
    return _env_value(name, field_name)


def secret_values() -> list[str]:
    """The values of every key variable set in this process (``CHUKWA_*_API_KEY``), longest
    first, for :func:`scrub`."""
    values = {
        value for name, value in os.environ.items() if is_key_env_name(name) and len(value) >= 4
    }
    return sorted(values, key=len, reverse=True)


def scrub(text: str) -> str:
    """Text with every key value replaced by ``[redacted]``: a hostile or careless endpoint
    may echo the Authorization header back into a body, an error or a reply."""
    for secret in secret_values():
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return text


def scrub_json(value: Any) -> Any:
    """:func:`scrub` for every string (keys too) of a JSON value."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k): scrub_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_json(v) for v in value]
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
        base = url_from_env(iface["url_env"], "url_env")
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
    with finished_on_error(inv):
        return _post_json(inv, iface, base, body, ctx, result_schema_hash)


@contextmanager
def finished_on_error(inv: SourceInvocation, call: LlmCall | None = None) -> Iterator[None]:
    """Whatever escapes between opening a row and finishing it (a bug, a stopped thread, a
    database error) still finishes the row as ``failed`` before it propagates (SPEC §7)."""
    try:
        yield
    except SourceFailure:
        raise  # raised by a path that finished its rows
    except BaseException as exc:
        message = scrub(f"internal error: {type(exc).__name__}: {exc}")[:2000]
        now = timezone.now()
        try:
            with trace_write():
                SourceInvocation.objects.filter(pk=inv.pk, status=InvocationStatus.RUNNING).update(
                    status=InvocationStatus.FAILED,
                    failure_class="internal_error",
                    failure_message=storable_text(message),
                    ended_at=now,
                    duration_ms=_ms_since(inv.started_at, now),
                )
                if call is not None:
                    LlmCall.objects.filter(pk=call.pk, status=InvocationStatus.RUNNING).update(
                        status=InvocationStatus.FAILED, ended_at=now, error=storable_text(message)
                    )
        except Exception:  # noqa: BLE001 - the database itself failed; the reaper finishes it
            logger.warning("could not finish invocation %s after %s", inv.pk, type(exc).__name__)
        raise


def _post_json(
    inv: SourceInvocation,
    iface: Mapping[str, Any],
    base: str,
    body: Any,
    ctx: CallContext,
    result_schema_hash: str,
) -> HttpResult:
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
    text = storable_text(scrub(response.text[:200_000]))
    recorded: dict[str, Any] = {
        "http_status": response.status_code,
        "response_headers": redact_headers(response.headers),
        "response_text": text,
    }
    if response.status_code >= 400:
        return _http_fail(
            inv,
            "transport"
            if response.status_code >= 500 or response.status_code == 429
            else "http_status",
            f"HTTP {response.status_code} from {inv.source_label}: {text[:500]}",
            **recorded,
        )
    try:
        value = loads_strict(response.text)
        check_storable(value)
    except UnstorableValue as exc:
        return _http_fail(inv, "non_json", f"response JSON cannot be stored: {exc}", **recorded)
    except ValueError as exc:
        return _http_fail(
            inv, "non_json", f"response is not JSON ({exc}): {text[:200]!r}", **recorded
        )
    value = scrub_json(value)
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
    message = storable_text(scrub(message))
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
            event = loads_strict(data)
        except ValueError:
            raise SourceFailure("transport", f"malformed stream event: {data[:200]!r}") from None
        if not _event_shape_ok(event):
            raise SourceFailure("transport", f"stream event of an unexpected shape: {data[:200]!r}")
        yield event


def _event_shape_ok(event: Any) -> bool:
    """A chat.completion.chunk as far as Chukwa reads it; anything else is a broken stream,
    not a reason for an exception between opening and finishing the rows."""
    if not isinstance(event, dict):
        return False
    usage = event.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return False
    if isinstance(usage, dict) and not isinstance(usage.get("prompt_tokens_details") or {}, dict):
        return False
    choices = event.get("choices") or []
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict) or not isinstance(delta.get("content") or "", str):
            return False
    return True


# Positive verdicts held by this process until they expire (monotonic deadline).
_probe_cache: dict[tuple[str, str], float] = {}
_probe_lock = threading.Lock()


def _probe_ttl(enforces: bool) -> float:
    """How long a verdict stands: a backend found enforcing is trusted for hours; one found
    not enforcing (or misconfigured at the time) is checked again soon (SPEC §5)."""
    name = "CHUKWA_PROBE_TTL_SECONDS" if enforces else "CHUKWA_PROBE_RETRY_SECONDS"
    return float(getattr(settings, name, 6 * 3600 if enforces else 60))


def ensure_schema_enforced(
    *,
    ctx: CallContext,
    source_hash: str,
    source: Mapping[str, Any],
    base_url: str,
    model: str,
    headers: dict[str, str],
    timeout: float,
) -> None:
    """The conformance check of a (base URL, model): the backend must enforce a response_format
    JSON schema. Run as a traced invocation of the attempt that needed it; its verdict expires.
    A stored negative verdict still in force is recorded as a failed check of this attempt."""
    key = (base_url, model)
    with _probe_lock:
        deadline = _probe_cache.get(key)
        if deadline is not None and time.monotonic() < deadline:
            return
        now = timezone.now()
        stored = SourceProbe.objects.filter(base_url=base_url, model=model).first()
        fresh = stored is not None and (now - stored.checked_at).total_seconds() < _probe_ttl(
            stored.enforces_schema
        )
        if fresh and stored is not None and stored.enforces_schema:
            age = (now - stored.checked_at).total_seconds()
            _probe_cache[key] = time.monotonic() + _probe_ttl(True) - age
            return
        inv = _new_invocation(
            ctx,
            kind=InvocationKind.CONFORMANCE_CHECK,
            source_hash=source_hash,
            source=source,
            request={},
        )
        if fresh and stored is not None:  # a negative verdict, not yet expired
            retry_at = stored.checked_at + timedelta(seconds=_probe_ttl(False))
            message = (
                f"the LLM backend behind {ctx_url_env(source)} (model {model}) does not enforce "
                f"response_format JSON schemas (checked {stored.checked_at.isoformat()}, checked "
                f"again after {retry_at.isoformat()}): {stored.detail}"
            )
            inv.request = {"verdict_from": stored.checked_at.isoformat()}
            inv.status = InvocationStatus.FAILED
            inv.failure_class, inv.failure_message = "backend_not_enforcing", message
            inv.ended_at, inv.duration_ms = inv.started_at, 0
            with trace_write():
                inv.save(force_insert=True)
            raise SourceFailure("backend_not_enforcing", message, invocation_id=inv.pk)
        payload = _probe_payload(model)
        inv.request = {**payload, "url_env": ctx_url_env(source), "path": "/chat/completions"}
        with trace_write():  # the row exists before any byte is sent
            inv.save(force_insert=True)
        with finished_on_error(inv):
            enforces, detail = _run_probe(inv, base_url, payload, headers, timeout)
            SourceProbe.objects.update_or_create(
                base_url=base_url,
                model=model,
                defaults={"enforces_schema": enforces, "detail": detail},
            )
            if not enforces:
                message = (
                    f"the LLM backend behind {ctx_url_env(source)} (model {model}) does not "
                    f"enforce response_format JSON schemas: {detail}"
                )
                _finish_invocation(
                    inv,
                    InvocationStatus.FAILED,
                    failure_class="backend_not_enforcing",
                    failure_message=message,
                )
                raise SourceFailure("backend_not_enforcing", message, invocation_id=inv.pk)
            _finish_invocation(inv, InvocationStatus.SUCCEEDED, validation_status="valid")
            _probe_cache[key] = time.monotonic() + _probe_ttl(True)


def ctx_url_env(source: Mapping[str, Any]) -> str:
    return str(source["interface"].get("base_url_env", ""))


def _probe_payload(model: str) -> dict[str, Any]:
    return {
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


def _run_probe(
    inv: SourceInvocation,
    base_url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    timeout: float,
) -> tuple[bool, str]:
    """Send the check; a transport failure finishes the row and raises (no verdict is kept, so
    the next attempt checks again); otherwise returns the verdict with the response recorded."""
    try:
        response = http_client().post(
            f"{base_url}/chat/completions", json=payload, headers=headers, timeout=timeout
        )
    except httpx.HTTPError as exc:
        _http_fail(inv, "transport", f"conformance check could not reach the backend: {exc}")
        raise AssertionError("unreachable") from None  # _http_fail always raises
    text = storable_text(scrub(response.text[:20_000]))
    recorded = {
        "http_status": response.status_code,
        "response_headers": redact_headers(response.headers),
        "response_text": text,
    }
    if response.status_code >= 500 or response.status_code == 429:
        _http_fail(
            inv,
            "transport",
            f"conformance check: HTTP {response.status_code}: {text[:300]}",
            **recorded,
        )
    SourceInvocation.objects.filter(pk=inv.pk).update(**recorded)
    if response.status_code >= 400:
        return (
            False,
            f"rejected response_format (HTTP {response.status_code}): {text[:300]}",
        )
    try:
        reply = loads_strict(response.text)["choices"][0]["message"]["content"]
        answer = loads_strict(reply)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return False, storable_text(scrub(f"probe reply is not the schema's JSON: {exc}"))
    if answer != {"probe": PROBE_ANSWER}:
        return (
            False,
            storable_text(
                scrub(
                    f"probe reply {answer!r} does not follow the schema (expected {PROBE_ANSWER!r})"
                )
            ),
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
        **params,
        # after the params, so that nothing authored can replace what Chukwa sets
        "model": iface["model"],
        "messages": list(messages),
        "stream": True,
        "stream_options": {"include_usage": True},
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
    try:
        base_url = url_from_env(iface["base_url_env"], "base_url_env")
        headers = {"Content-Type": "application/json"}
        if "api_key_env" in iface:
            key = key_from_env(iface["api_key_env"], "api_key_env", iface["base_url_env"])
            headers["Authorization"] = "Bearer " + key
        config_failure = None
    except SourceFailure as exc:
        config_failure = exc
        base_url = ""
    timeout = iface["timeout_ms"] / 1000
    if response_format is not None and config_failure is None:
        ensure_schema_enforced(
            ctx=ctx,
            source_hash=source_hash,
            source=source,
            base_url=base_url,
            model=iface["model"],
            headers=headers,
            timeout=timeout,
        )
    inv = _new_invocation(
        ctx,
        kind=InvocationKind.LLM_GENERATION,
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
        base_url=base_url,
        requested_model=iface["model"],
        messages=payload["messages"],
        params=params,
        response_format=response_format,
        started_at=inv.started_at,
    )
    if config_failure is not None:
        exc = config_failure
        with trace_write():
            inv.status = call.status = InvocationStatus.FAILED
            inv.failure_class, inv.failure_message = exc.failure_class, exc.message
            inv.ended_at = call.ended_at = inv.started_at
            inv.duration_ms = 0
            call.error = exc.message
            inv.save(force_insert=True)
            call.save(force_insert=True)
        exc.invocation_id = inv.pk
        raise exc
    with trace_write():  # both rows exist before any byte is sent
        inv.save(force_insert=True)
        call.save(force_insert=True)
    with finished_on_error(inv, call):
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
        text = storable_text(scrub("".join(parts)))
        message = storable_text(scrub(message))
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
                body = storable_text(scrub(response.read().decode("utf-8", "replace")[:20_000]))
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
                if isinstance(event.get("model"), str) and event["model"]:
                    response_model = storable_text(event["model"])[:200]
                if event.get("usage"):
                    usage = {
                        k: v
                        for k, v in event["usage"].items()
                        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
                    }
                    details = event["usage"].get("prompt_tokens_details") or {}
                    if (
                        isinstance(details.get("cached_tokens"), int)
                        and 0 <= details["cached_tokens"] < 2**31
                    ):
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
                            LlmChunk(
                                call_id=call.pk,
                                seq=seq,
                                offset_ms=offset,
                                text=storable_text(scrub(delta)),
                            )
                        )
                        seq += 1
                        if len(pending) >= CHUNK_BATCH or now - last_flush >= CHUNK_FLUSH_SECONDS:
                            flush()
                    if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
                        finish_reason = storable_text(choice["finish_reason"])[:40]
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
    original = "".join(parts)
    # What is stored, shown and sent back to the model on a retry: storable, no key in it. The
    # judge reads the original, so NUL or a lone surrogate in the reply is a model-content
    # failure for the retry lane, not a database error.
    text = storable_text(scrub(original))
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
        # The judge reads the reply without any key in it (an echoed key must not reach a
        # parsed artifact or the world), but with everything else as the model sent it.
        gen.judgement = judge(scrub(original)) if judge is not None else None
    finally:
        # One transaction: the last chunks, the finished rows and the verdict.
        now = timezone.now()
        with trace_write():
            if pending:
                LlmChunk.objects.bulk_create(pending)
                pending.clear()
            if scrub(original) != original:
                # A key was echoed into the reply, possibly split across chunks: keep the
                # chunk record but never the key.
                LlmChunk.objects.filter(call_id=call.pk).delete()
                LlmChunk.objects.create(call_id=call.pk, seq=0, offset_ms=ttft_ms or 0, text=text)
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


def _close_running(attempt_id: UUID | str, status: str, failure_class: str, reason: str) -> int:
    now = timezone.now()
    ids = list(
        SourceInvocation.objects.filter(
            attempt_id=attempt_id, status=InvocationStatus.RUNNING
        ).values_list("pk", flat=True)
    )
    if not ids:
        return 0
    SourceInvocation.objects.filter(pk__in=ids).update(
        status=status, ended_at=now, failure_class=failure_class, failure_message=reason
    )
    LlmCall.objects.filter(invocation_id__in=ids, status=InvocationStatus.RUNNING).update(
        status=status, ended_at=now, error=reason
    )
    return len(ids)


def interrupt_running(*, attempt_id: UUID | str, reason: str) -> int:
    """The reaper's part: running rows of a dead attempt become ``interrupted``."""
    return _close_running(attempt_id, InvocationStatus.INTERRUPTED, "interrupted", reason)


def finish_running(*, attempt_id: UUID | str, reason: str) -> int:
    """When an attempt fails, rows it left open become ``failed`` (SPEC §7: every row opened is
    finished); normally there are none, since each call finishes its own rows."""
    return _close_running(attempt_id, InvocationStatus.FAILED, "attempt_ended", reason)
