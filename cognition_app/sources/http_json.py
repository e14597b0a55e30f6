"""Calling an ``http_json`` source: one traced POST whose JSON reply is checked against its result
schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict, storable_text
from cognition_app.failures import SourceFailure
from cognition_app.recording import CallRecord
from cognition_app.redaction import redact_headers, scrub, scrub_json
from cognition_app.sources.components import source_content
from cognition_app.sources.context import CallContext
from cognition_app.sources.deadline import TooLarge, TooSlow, post_json
from cognition_app.sources.replay import request_key
from cognition_app.sources.results import JsonResult, replayed_or_new, result_schema_problem
from cognition_app.sources.retry import try_record, with_retries
from cognition_app.sources.variables import url_from_env


def invoke_http_json(
    *,
    source_hash: str,
    body: Any,
    ctx: CallContext,
    kind: str,
    result_schema_hash: str = "",
    input_schema_hash: str = "",
) -> JsonResult:
    source = source_content(source_hash)
    iface = source["interface"]
    if iface["name"] != "http_json":
        raise SourceFailure(
            "not_executable", f"source {source_hash[:12]} is not an http_json source"
        )
    # A call already under way is not cut (it is short and bounded by its timeout); one not
    # yet started is not started once the attempt is being stopped.
    ctx.check_cancelled(f"{kind} {ctx.ambient_source_id or ctx.tool_name}")
    request = {
        "method": "POST",
        "url_env": iface["url_env"],
        "path": iface.get("path", ""),
        "body": body,
    }
    # The X-Chukwa-* headers carry per-call ids (and the turn, which the k-th-use rule covers):
    # not part of the key, nor is the URL the variable points at.
    key = request_key(source_hash, {"method": "POST", "path": request["path"], "body": body})
    what = f"{kind} {ctx.ambient_source_id or ctx.tool_name} of {ctx.subject_id or 'the turn'}"
    call = replayed_or_new(
        ctx,
        kind=kind,
        source_hash=source_hash,
        source=source,
        request=request,
        key=key,
        input_schema_hash=input_schema_hash,
        result_schema_hash=result_schema_hash,
        what=what,
    )
    if isinstance(call, JsonResult):  # served from the recording
        return call
    try:
        base = url_from_env(iface["url_env"], "url_env")
    except SourceFailure as exc:
        raise call.refused(exc) from None
    call.invocation.request["url"] = base + iface.get("path", "")

    def one_try(try_ctx: CallContext) -> JsonResult:
        this_try = try_record(call, try_ctx)
        this_try.open()  # the row exists before any byte is sent
        with this_try.guard():
            return _post_json(this_try, iface, base, body, try_ctx, result_schema_hash)

    return with_retries(interface=iface, ctx=ctx, what=what, call=one_try)


def _post_json(
    call: CallRecord,
    iface: Mapping[str, Any],
    base: str,
    body: Any,
    ctx: CallContext,
    result_schema_hash: str,
) -> JsonResult:
    try:
        response, response_text = post_json(
            base + iface.get("path", ""),
            body=body,
            headers=ctx.headers(call.pk),
            timeout=iface["timeout_ms"] / 1000,  # timeout_ms bounds the whole exchange
            max_bytes=MAX_RESPONSE_BYTES,
        )
    except TooSlow:
        call.fail(
            "transport",
            f"timed out after {iface['timeout_ms']} ms: the response did not end in time",
        )
    except TooLarge as exc:
        call.fail(
            "transport",
            f"the response is larger than {MAX_RESPONSE_BYTES:,} bytes; nothing of it is kept",
            http_status=exc.response.status_code,
            response_headers=redact_headers(exc.response.headers),
        )
    except httpx.TimeoutException as exc:
        call.fail("transport", f"timed out after {iface['timeout_ms']} ms: {exc}")
    except httpx.HTTPError as exc:
        call.fail("transport", f"{type(exc).__name__}: {exc}")
    text = storable_text(scrub(response_text[:200_000]))
    recorded: dict[str, Any] = {
        "http_status": response.status_code,
        "response_headers": redact_headers(response.headers),
        "response_text": text,
    }
    if response.status_code >= 400:
        call.fail(
            "transport"
            if response.status_code >= 500 or response.status_code == 429
            else "http_status",
            f"HTTP {response.status_code} from {call.invocation.source_label}: {text[:500]}",
            **recorded,
        )
    try:
        value = loads_strict(response_text)
        check_storable(value)
    except UnstorableValue as exc:
        call.fail("non_json", f"response JSON cannot be stored: {exc}", **recorded)
    except ValueError as exc:
        call.fail("non_json", f"response is not JSON ({exc}): {text[:200]!r}", **recorded)
    value = scrub_json(value)
    recorded["response_json"] = value
    errors, problem = result_schema_problem(value, result_schema_hash)
    if errors:
        call.fail(
            "schema_invalid",
            f"response does not match its result schema: {problem}",
            validation_status="invalid",
            validation_errors=errors,
            **recorded,
        )
    if result_schema_hash:
        recorded["validation_status"] = "valid"
    call.succeed(**recorded)
    return JsonResult(value, call.pk)


# A JSON endpoint's response is read up to this size; a bigger one fails the call (a hostile or
# broken endpoint could otherwise fill the worker's memory).
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
