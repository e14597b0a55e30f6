"""Calling an ``mcp_tool`` source (SPEC §5): one tool on an MCP server over the streamable HTTP
transport, through the official ``mcp`` SDK's client, traced, validated and replayed exactly like
an ``http_json`` call.

The arguments are the JSON object the model (or the rule plan) gave. The result is the tool's
``structuredContent``, else its single JSON text content, else the call fails (``non_json``);
``isError: true`` fails it as ``tool_error`` carrying the tool's message — the MCP form of an
HTTP tool answering 4xx (``http_status``): a failed invocation that fails the attempt, never a
model-content retry. Timeouts, refused connections and HTTP 5xx/429 are ``transport`` failures;
a JSON-RPC error or a reply that breaks the protocol is a ``protocol_error``.

Each call is one short MCP connection (the SDK negotiates the protocol version, with the
``initialize`` handshake for servers that predate ``server/discover``) run on an event loop of
its own, so the synchronous worker thread that asked simply waits for it; ``timeout_ms`` bounds
the whole exchange.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from ssl import SSLContext
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Implementation, TextContent
from pydantic import ValidationError

from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict, storable_text
from cognition_app.models import InvocationStatus, SourceInvocation
from cognition_app.sources.components import source_content
from cognition_app.sources.failure import SourceFailure
from cognition_app.sources.replay import fail_miss, open_replayed, request_key
from cognition_app.sources.results import (
    JsonResult,
    fail_unsent,
    result_schema_problem,
    serve_replayed,
)
from cognition_app.sources.tracing import (
    CallContext,
    fail_invocation,
    finish_invocation,
    finished_on_error,
    new_invocation,
    trace_write,
)
from cognition_app.sources.variables import (
    key_from_env,
    redact_headers,
    scrub,
    scrub_json,
    url_from_env,
)

CLIENT_INFO = Implementation(name="chukwa", version="1")
RESPONSE_TEXT_LIMIT = 200_000


@lru_cache(maxsize=1)
def _ssl_context() -> SSLContext:
    # Building a context reads the system trust store (tens of milliseconds): once per process.
    return httpx2.create_ssl_context()


@dataclass
class _Exchange:
    """The HTTP answers one call received, to tell a server error from a protocol error and to
    trace the ``tools/call`` answer's status and headers."""

    statuses: list[int] = field(default_factory=list)
    call_status: int | None = None
    call_headers: dict[str, str] = field(default_factory=dict)

    async def on_response(self, response: httpx2.Response) -> None:
        self.statuses.append(response.status_code)
        try:
            method = json.loads(response.request.content).get("method")
        except (ValueError, AttributeError):
            method = None
        if method == "tools/call":
            self.call_status = response.status_code
            self.call_headers = redact_headers(response.headers)


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
    if ctx.replay is not None:
        record = ctx.replay.take(key)
        if record is not None:
            return serve_replayed(
                open_replayed(
                    ctx,
                    kind=kind,
                    source_hash=source_hash,
                    source=source,
                    request=request,
                    key=key,
                    record=record,
                    input_schema_hash=input_schema_hash,
                    output_schema_hash=result_schema_hash,
                ),
                record,
                result_schema_hash,
            )
        if ctx.replay.strict:
            fail_miss(
                ctx,
                kind=kind,
                source_hash=source_hash,
                source=source,
                request=request,
                key=key,
                what=f"{kind} {ctx.tool_name} of {ctx.subject_id or 'the turn'}",
            )
    inv = new_invocation(
        ctx,
        kind=kind,
        source_hash=source_hash,
        source=source,
        request=request,
        request_key=key,
        input_schema_hash=input_schema_hash,
        output_schema_hash=result_schema_hash,
    )
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
        raise fail_unsent(inv, exc) from None
    inv.request["url"] = url
    with trace_write():  # the row exists before any byte is sent
        inv.save(force_insert=True)
    with finished_on_error(inv):
        headers = {**ctx.headers(inv.pk), **auth}
        return _call(inv, iface, url, headers, body, result_schema_hash)


async def _call_tool(
    url: str,
    tool: str,
    arguments: dict[str, Any],
    headers: Mapping[str, str],
    timeout_s: float,
    exchange: _Exchange,
) -> CallToolResult:
    with anyio.fail_after(timeout_s):
        async with httpx2.AsyncClient(
            headers=dict(headers),
            timeout=timeout_s,
            verify=_ssl_context(),
            event_hooks={"response": [exchange.on_response]},
        ) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, client_info=CLIENT_INFO, cache=None) as client:
                return await client.call_tool(tool, arguments)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups: the SDK's task groups wrap a
    refused connection or a JSON-RPC error in one or two of them."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _failure(exc: Exception, exchange: _Exchange, timeout_ms: int) -> tuple[str, str] | None:
    """The failure class and message of an exception the call raised, or None for a bug. The
    SDK turns an HTTP error answer into a JSON-RPC error; the status of the last answer says
    which it was (an earlier one may be a refused protocol probe the SDK recovered from)."""
    leaves = _leaves(exc)
    last = exchange.statuses[-1] if exchange.statuses else None
    for leaf in leaves:
        if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
            return "transport", f"timed out after {timeout_ms} ms"
    for leaf in leaves:
        if isinstance(leaf, httpx2.TransportError):
            return "transport", f"{type(leaf).__name__}: {leaf}"
    if last is not None and (last >= 500 or last == 429):
        return "transport", f"HTTP {last} from the MCP server"
    for leaf in leaves:
        if isinstance(leaf, httpx2.HTTPStatusError):
            return "http_status", f"HTTP {leaf.response.status_code} from the MCP server: {leaf}"
        if isinstance(leaf, MCPError):
            if last is not None and last >= 400:
                return "http_status", f"HTTP {last} from the MCP server ({leaf.message})"
            return "protocol_error", f"MCP error {leaf.code}: {leaf.message}"
        if isinstance(leaf, ValidationError):
            return "protocol_error", f"the reply does not follow the MCP protocol: {leaf}"[:1000]
    return None


def _call(
    inv: SourceInvocation,
    iface: Mapping[str, Any],
    url: str,
    headers: Mapping[str, str],
    arguments: dict[str, Any],
    result_schema_hash: str,
) -> JsonResult:
    exchange = _Exchange()
    try:
        result = anyio.run(
            _call_tool, url, iface["tool"], arguments, headers, iface["timeout_ms"] / 1000, exchange
        )
    except Exception as exc:  # classified below; anything unknown is re-raised (a bug)
        failure = _failure(exc, exchange, iface["timeout_ms"])
        if failure is None:
            raise
        return fail_invocation(inv, *failure, http_status=exchange.call_status)
    reply = scrub_json(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    recorded: dict[str, Any] = {
        "http_status": exchange.call_status,
        "response_headers": exchange.call_headers,
        "response_text": storable_text(
            json.dumps(reply, ensure_ascii=False, sort_keys=True)[:RESPONSE_TEXT_LIMIT]
        ),
    }
    if result.is_error:
        return fail_invocation(
            inv, "tool_error", f"{iface['tool']} failed: {_texts(result)[:2000]}", **recorded
        )
    value, problem = _value_of(result)
    if problem:
        return fail_invocation(inv, "non_json", problem, **recorded)
    value = scrub_json(value)
    recorded["response_json"] = value
    errors, schema_problem = result_schema_problem(value, result_schema_hash)
    if errors:
        return fail_invocation(
            inv,
            "schema_invalid",
            f"result does not match its result schema: {schema_problem}",
            validation_status="invalid",
            validation_errors=errors,
            **recorded,
        )
    if result_schema_hash:
        recorded["validation_status"] = "valid"
    finish_invocation(inv, InvocationStatus.SUCCEEDED, **recorded)
    return JsonResult(value, inv.pk)


def _texts(result: CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    return scrub(" ".join(texts)) or "(the tool sent no text)"


def _value_of(result: CallToolResult) -> tuple[Any, str]:
    """The result: ``structuredContent``, else the one text content parsed as JSON; or the
    reason there is none."""
    if result.structured_content is not None:
        value: Any = result.structured_content
    else:
        kinds = [block.type for block in result.content]
        if len(kinds) != 1 or not isinstance(result.content[0], TextContent):
            return None, (
                "the tool result has no structuredContent and not exactly one text content "
                f"(content: {', '.join(kinds) or 'none'})"
            )
        text = result.content[0].text
        try:
            value = loads_strict(text)
        except ValueError as exc:
            return None, f"the tool's text content is not JSON ({exc}): {scrub(text[:200])!r}"
    try:
        check_storable(value)
    except UnstorableValue as exc:
        return None, f"the tool result cannot be stored: {exc}"
    return value, ""
