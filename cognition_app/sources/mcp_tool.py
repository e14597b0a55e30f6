"""Calling an ``mcp_tool`` source: one tool on an MCP server over the streamable HTTP
transport, through the official ``mcp`` SDK's client, traced, validated and replayed exactly like
an ``http_json`` call.

The arguments are the JSON object the model (or the rule plan) gave. The result is the tool's
``structuredContent``, else its single JSON text content, else the call fails (``non_json``);
``isError: true`` fails it as ``tool_error`` carrying the tool's message — the MCP form of an
HTTP tool answering 4xx (``http_status``): a failed invocation that fails the attempt, never a
model-content retry. Timeouts, refused connections and HTTP 5xx/429 are ``transport`` failures;
a JSON-RPC error or a reply that breaks the protocol is a ``protocol_error``. The exchange
itself is ``mcp_client``'s.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict, storable_text
from cognition_app.failures import SourceFailure
from cognition_app.recording import CallRecord
from cognition_app.redaction import scrub, scrub_json
from cognition_app.sources.components import source_content
from cognition_app.sources.context import CallContext
from cognition_app.sources.replay import request_key
from cognition_app.sources.results import JsonResult, replayed_or_new, result_schema_problem
from cognition_app.sources.retry import try_record, with_retries
from cognition_app.sources.variables import key_from_env, url_from_env

if TYPE_CHECKING:
    from cognition_app.sources.mcp_client import ToolReply

RESPONSE_TEXT_LIMIT = 200_000


def invoke_mcp_tool(
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
    if iface["name"] != "mcp_tool":
        raise SourceFailure(
            "not_executable", f"source {source_hash[:12]} is not an mcp_tool source"
        )
    request = {"url_env": iface["url_env"], "tool": iface["tool"], "arguments": body}
    # Neither the URL nor the key (nor the X-Chukwa-* per-call ids) is part of the key.
    key = request_key(source_hash, {"tool": iface["tool"], "arguments": body})
    what = f"{kind} {ctx.tool_name} of {ctx.subject_id or 'the turn'}"
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
        url = url_from_env(iface["url_env"], "url_env")
        auth = {}
        if "api_key_env" in iface:
            api_key = key_from_env(iface["api_key_env"], "api_key_env", iface["url_env"])
            auth["Authorization"] = f"Bearer {api_key}"
        if not isinstance(body, dict):
            raise SourceFailure(
                "invalid_arguments",
                f"MCP tool arguments must be a JSON object, got {type(body).__name__} (the "
                "tool's arguments schema allows what MCP cannot carry)",
            )
    except SourceFailure as exc:
        raise call.refused(exc) from None
    call.invocation.request["url"] = url

    def one_try(try_ctx: CallContext) -> JsonResult:
        this_try = try_record(call, try_ctx)
        this_try.open()  # the row exists before any byte is sent
        with this_try.guard():
            headers = {**try_ctx.headers(this_try.pk), **auth}
            return _call(this_try, iface, url, headers, body, result_schema_hash)

    return with_retries(interface=iface, ctx=ctx, what=what, call=one_try)


def _call(
    call: CallRecord,
    iface: dict[str, Any],
    url: str,
    headers: dict[str, str],
    arguments: dict[str, Any],
    result_schema_hash: str,
) -> JsonResult:
    # The SDK takes seconds to import (pydantic models of every protocol version): it is loaded
    # by the first MCP call, not by every process that imports the source layer.
    from cognition_app.sources.mcp_client import ToolCallFailed, call_tool

    try:
        answer = call_tool(url, iface["tool"], arguments, headers, iface["timeout_ms"])
    except ToolCallFailed as exc:
        call.fail(exc.failure_class, exc.message, http_status=exc.http_status)
    recorded: dict[str, Any] = {
        "http_status": answer.http_status,
        "response_headers": answer.response_headers,
        "response_text": storable_text(
            json.dumps(scrub_json(answer.reply), ensure_ascii=False, sort_keys=True)[
                :RESPONSE_TEXT_LIMIT
            ]
        ),
    }
    if answer.is_error:
        message = scrub(" ".join(answer.texts)) or "(the tool sent no text)"
        call.fail("tool_error", f"{iface['tool']} failed: {message[:2000]}", **recorded)
    value, problem = _value_of(answer)
    if problem:
        call.fail("non_json", problem, **recorded)
    value = scrub_json(value)
    recorded["response_json"] = value
    errors, schema_problem = result_schema_problem(value, result_schema_hash)
    if errors:
        call.fail(
            "schema_invalid",
            f"result does not match its result schema: {schema_problem}",
            validation_status="invalid",
            validation_errors=errors,
            **recorded,
        )
    if result_schema_hash:
        recorded["validation_status"] = "valid"
    call.succeed(**recorded)
    return JsonResult(value, call.pk)


def _value_of(answer: ToolReply) -> tuple[Any, str]:
    """The result: ``structuredContent``, else the one text content parsed as JSON; or the
    reason there is none."""
    if answer.structured is not None:
        value: Any = answer.structured
    else:
        if answer.content_types != ["text"]:
            return None, (
                "the tool result has no structuredContent and not exactly one text content "
                f"(content: {', '.join(answer.content_types) or 'none'})"
            )
        text = answer.texts[0]
        try:
            value = loads_strict(text)
        except ValueError as exc:
            return None, f"the tool's text content is not JSON ({exc}): {scrub(text[:200])!r}"
    try:
        check_storable(value)
    except UnstorableValue as exc:
        return None, f"the tool result cannot be stored: {exc}"
    return value, ""
