"""Calling an ``http_json`` source: one traced POST whose JSON reply is checked against its result
schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict, storable_text
from cognition_app.models import SourceInvocation
from cognition_app.rows import insert_statement
from cognition_app.sources.components import source_content
from cognition_app.sources.deadline import TooLarge, TooSlow, post_json
from cognition_app.sources.failure import SourceFailure
from cognition_app.sources.replay import request_key
from cognition_app.sources.results import (
    JsonResult,
    fail_unsent,
    replayed_or_new,
    result_schema_problem,
)
from cognition_app.sources.retry import try_row, with_retries
from cognition_app.sources.tracing import (
    CallContext,
    fail_invocation,
    finish_succeeded,
    finished_on_error,
    open_rows,
)
from cognition_app.sources.variables import redact_headers, scrub, scrub_json, url_from_env


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
    inv = replayed_or_new(
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
    if isinstance(inv, JsonResult):  # served from the recording
        return inv
    try:
        base = url_from_env(iface["url_env"], "url_env")
    except SourceFailure as exc:
        raise fail_unsent(ctx, inv, exc) from None
    inv.request["url"] = base + iface.get("path", "")

    def one_try(try_ctx: CallContext) -> JsonResult:
        row = try_row(inv, try_ctx)
        open_rows(try_ctx, [insert_statement(row)])  # the row exists before any byte is sent
        with finished_on_error(row):
            return _post_json(row, iface, base, body, try_ctx, result_schema_hash)

    return with_retries(interface=iface, ctx=ctx, what=what, call=one_try)


def _post_json(
    inv: SourceInvocation,
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
            headers=ctx.headers(inv.pk),
            timeout=iface["timeout_ms"] / 1000,  # timeout_ms bounds the whole exchange
            max_bytes=MAX_RESPONSE_BYTES,
        )
    except TooSlow:
        return fail_invocation(
            inv,
            "transport",
            f"timed out after {iface['timeout_ms']} ms: the response did not end in time",
        )
    except TooLarge as exc:
        return fail_invocation(
            inv,
            "transport",
            f"the response is larger than {MAX_RESPONSE_BYTES:,} bytes; nothing of it is kept",
            http_status=exc.response.status_code,
            response_headers=redact_headers(exc.response.headers),
        )
    except httpx.TimeoutException as exc:
        return fail_invocation(inv, "transport", f"timed out after {iface['timeout_ms']} ms: {exc}")
    except httpx.HTTPError as exc:
        return fail_invocation(inv, "transport", f"{type(exc).__name__}: {exc}")
    text = storable_text(scrub(response_text[:200_000]))
    recorded: dict[str, Any] = {
        "http_status": response.status_code,
        "response_headers": redact_headers(response.headers),
        "response_text": text,
    }
    if response.status_code >= 400:
        return fail_invocation(
            inv,
            "transport"
            if response.status_code >= 500 or response.status_code == 429
            else "http_status",
            f"HTTP {response.status_code} from {inv.source_label}: {text[:500]}",
            **recorded,
        )
    try:
        value = loads_strict(response_text)
        check_storable(value)
    except UnstorableValue as exc:
        return fail_invocation(
            inv, "non_json", f"response JSON cannot be stored: {exc}", **recorded
        )
    except ValueError as exc:
        return fail_invocation(
            inv, "non_json", f"response is not JSON ({exc}): {text[:200]!r}", **recorded
        )
    value = scrub_json(value)
    recorded["response_json"] = value
    errors, problem = result_schema_problem(value, result_schema_hash)
    if errors:
        return fail_invocation(
            inv,
            "schema_invalid",
            f"response does not match its result schema: {problem}",
            validation_status="invalid",
            validation_errors=errors,
            **recorded,
        )
    if result_schema_hash:
        recorded["validation_status"] = "valid"
    finish_succeeded(ctx, inv, **recorded)
    return JsonResult(value, inv.pk)


# A JSON endpoint's response is read up to this size; a bigger one fails the call (a hostile or
# broken endpoint could otherwise fill the worker's memory).
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
