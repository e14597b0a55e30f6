"""The conformance check (docs/workflows.md, "The conformance check"): whether an LLM backend
enforces a ``response_format`` JSON schema, with verdicts that expire.

Only an answer about schemas is a verdict: a reply that does not follow the probe's schema, or a
request refused for its ``response_format`` (HTTP 400/422). Everything else is a failed call of
the check, named for what it is and never kept, so the next call checks again: no connection or
no complete answer in time (``transport``), the credentials refused (HTTP 401/403,
``authentication``), the server failing (HTTP 5xx, ``server_error``), rate limited (HTTP 429,
``transport``), any other status (``http_status``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, NoReturn

import httpx
from django.conf import settings
from django.utils import timezone

from chukwa_core.json_values import loads_strict, storable_text
from cognition_app.budgets import Reservation, prompt_estimate
from cognition_app.costs import price_at
from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationKind, SourceProbe
from cognition_app.recording import CheckRecord
from cognition_app.redaction import redact_headers, scrub
from cognition_app.sources.context import CallContext
from cognition_app.sources.deadline import TooLarge, TooSlow, post_json
from cognition_app.sources.replay import request_key

PROBE_SCHEMA_NAME = "chukwa_conformance_probe"
PROBE_MAX_BYTES = 1024 * 1024  # the answer is a few dozen bytes; a bigger one is not read
PROBE_ANSWER = "chukwa-conformance-ok"
PROBE_MAX_TOKENS = 40
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": [PROBE_ANSWER]}},
    "required": ["probe"],
    "additionalProperties": False,
}

_probe_cache: dict[tuple[str, str], float] = {}
_probe_lock = threading.Lock()


def _probe_ttl(enforces: bool) -> float:
    """How long a verdict stands: a backend found enforcing is trusted for hours; one found
    not enforcing (or misconfigured at the time) is checked again soon."""
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
        payload = _probe_payload(model)
        # An LLM call like any other: what it spends counts in every total and budget.
        check = CheckRecord.new_generation(
            ctx,
            kind=InvocationKind.CONFORMANCE_CHECK,
            source_hash=source_hash,
            source=source,
            request={},
            # a check is never served from a recording, but it is keyed like every invocation
            request_key=request_key(source_hash, payload),
            output_schema_hash="",
            base_url=base_url,
            model=model,
            messages=payload["messages"],
            params={k: payload[k] for k in ("max_tokens", "temperature", "stream")},
            response_format=payload["response_format"],
            base_url_env=ctx_url_env(source),
            price=price_at(url_env=ctx_url_env(source), model=model, at=timezone.now()),
        )
        if fresh and stored is not None:  # a negative verdict, not yet expired
            retry_at = stored.checked_at + timedelta(seconds=_probe_ttl(False))
            message = (
                f"the LLM backend behind {ctx_url_env(source)} (model {model}) does not enforce "
                f"response_format JSON schemas (checked {stored.checked_at.isoformat()}, checked "
                f"again after {retry_at.isoformat()}): {stored.detail}"
            )
            check.invocation.request = {"verdict_from": stored.checked_at.isoformat()}
            raise check.refused(SourceFailure("backend_not_enforcing", message))
        check.invocation.request = {
            **payload,
            "url_env": ctx_url_env(source),
            "path": "/chat/completions",
        }
        reservation = _reserve(ctx, check, model)
        try:
            _check(check, key, source, base_url, model, payload, headers, timeout)
        finally:
            if ctx.budget is not None:
                call = check.call
                ctx.budget.release(
                    reservation,
                    tokens=(call.prompt_tokens or 0) + (call.completion_tokens or 0),
                    cost=call.cost,
                )


def _reserve(ctx: CallContext, check: CheckRecord, model: str) -> Reservation:
    """The check's reservation under the world's (and its experiment's) budgets, like any LLM
    call's: what it could spend; a check that does not fit is refused, its rows written."""
    if ctx.budget is None:
        return Reservation(in_ledger=False)
    call = check.call
    outcome = ctx.budget.reserve(
        world_id=ctx.world_id,
        attempt_id=ctx.attempt_id,
        prompt_tokens=prompt_estimate(call.messages, call.response_format),
        max_completion=PROBE_MAX_TOKENS,
        price=call.price,
        price_key=f"({call.base_url_env}, {model})",
        call_id=call.pk,  # the settle and the reaper find the call by its reservation
    )
    if isinstance(outcome, str):
        raise check.refused(
            SourceFailure("budget_exhausted", f"conformance check refused: {outcome}")
        )
    return outcome


def _check(
    check: CheckRecord,
    key: tuple[str, str],
    source: Mapping[str, Any],
    base_url: str,
    model: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    timeout: float,
) -> None:
    """Send the check and keep its verdict (the caller holds ``_probe_lock``)."""
    check.open()  # the row exists before any byte is sent
    with check.guard():
        enforces, detail, recorded = _run_probe(check, source, base_url, payload, headers, timeout)
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
            check.fail("backend_not_enforcing", message, **recorded)
        check.succeed_now(validation_status="valid", **recorded)
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
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": PROBE_SCHEMA_NAME, "schema": PROBE_SCHEMA, "strict": True},
        },
    }


def _unreached(check: CheckRecord, why: str) -> NoReturn:
    check.fail(
        "transport",
        f"conformance check could not reach the backend: {why}; nothing was concluded about "
        f"JSON schemas and the check runs again on the next call",
    )


def _failure_of_status(status: int, source: Mapping[str, Any]) -> tuple[str, str] | None:
    """The failure class of a status that says nothing about schemas, or None when the answer
    is one (200, or the request refused for its response_format: 400, 422)."""
    iface = source["interface"]
    url_env = str(iface.get("base_url_env", ""))
    if status in (401, 403):
        key_env = iface.get("api_key_env")
        fix = f"check {key_env}" if key_env else "the source names no api_key_env"
        return "authentication", f"the endpoint behind {url_env} refused the credentials ({fix})"
    if status >= 500:
        return "server_error", f"the endpoint behind {url_env} failed"
    if status in (408, 429):
        return "transport", f"the endpoint behind {url_env} did not serve the request now"
    if status >= 400 and status not in (400, 422):
        return "http_status", f"the endpoint behind {url_env} refused the request"
    return None


def _run_probe(
    check: CheckRecord,
    source: Mapping[str, Any],
    base_url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    timeout: float,
) -> tuple[bool, str, dict[str, Any]]:
    """Send the check; a failure that says nothing about schemas finishes the row and raises
    (no verdict is kept, so the next attempt checks again); otherwise returns the verdict, its
    detail and the response's fields to record with it."""
    try:
        # timeout_ms bounds the whole exchange; the probe's reply is a few dozen bytes
        response, response_text = post_json(
            f"{base_url}/chat/completions",
            body=payload,
            headers=headers,
            timeout=timeout,
            max_bytes=PROBE_MAX_BYTES,
        )
    except TooSlow:
        _unreached(check, f"no complete answer within {round(timeout * 1000)} ms")
    except TooLarge:
        _unreached(check, f"its answer is larger than {PROBE_MAX_BYTES:,} bytes")
    except httpx.HTTPError as exc:
        _unreached(check, str(exc))
    text = storable_text(scrub(response_text[:20_000]))
    recorded: dict[str, Any] = {
        "http_status": response.status_code,
        "response_headers": redact_headers(response.headers),
        "response_text": text,
    }
    status = response.status_code
    if status < 400:
        _answered(check, payload, response_text)
    failure = _failure_of_status(status, source)
    if failure is not None:
        failure_class, why = failure
        check.fail(
            failure_class,
            f"conformance check: HTTP {status}: {why}; nothing was concluded about JSON schemas "
            f"and the check runs again on the next call: {text[:300]}",
            **recorded,
        )
    if status >= 400:
        return (
            False,
            f"rejected response_format (HTTP {response.status_code}): {text[:300]}",
            recorded,
        )
    try:
        reply = loads_strict(response_text)["choices"][0]["message"]["content"]
        answer = loads_strict(reply)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return (
            False,
            storable_text(scrub(f"probe reply is not the schema's JSON: {exc}")),
            recorded,
        )
    if answer != {"probe": PROBE_ANSWER}:
        return (
            False,
            storable_text(
                scrub(
                    f"probe reply {answer!r} does not follow the schema (expected {PROBE_ANSWER!r})"
                )
            ),
            recorded,
        )
    return True, "schema enforced", recorded


def _answered(check: CheckRecord, payload: dict[str, Any], response_text: str) -> None:
    """What an answer spent: the provider's usage, else estimated as a generation's is
    (characters / 4)."""
    try:
        parsed = loads_strict(response_text)
    except ValueError:
        parsed = None
    body: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    usage = _object(body.get("usage"))
    choices = body.get("choices")
    first = _object(choices[0] if isinstance(choices, list) and choices else None)
    content = _object(first.get("message")).get("content")
    reply = content if isinstance(content, str) else ""
    counts: dict[str, int] = {}
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            counts[name] = value
    source = "provider"
    if len(counts) < 2:
        chars = sum(len(str(m.get("content", ""))) for m in payload["messages"])
        counts = {"prompt_tokens": max(1, chars // 4), "completion_tokens": max(1, len(reply) // 4)}
        source = "estimated"
    check.answered(
        usage=counts,
        usage_source=source,
        response_model=str(body.get("model") or ""),
        reply=reply,
        finish_reason=str(first.get("finish_reason") or ""),
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
