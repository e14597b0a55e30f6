"""One MCP tool call over the streamable HTTP transport, through the official ``mcp`` SDK's
client: the exchange itself, classified, with plain data out (no Django, no trace rows; see
``mcp_tool``).

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

from cognition_app.redaction import redact_headers

CLIENT_INFO = Implementation(name="chukwa", version="1")


@dataclass(frozen=True)
class ToolReply:
    """What the server answered to ``tools/call``."""

    reply: dict[str, Any]  # the whole CallToolResult, as JSON
    is_error: bool
    structured: Any  # structuredContent, or None
    content_types: list[str]  # the type of each content block
    texts: list[str]  # the text of each text block
    http_status: int | None
    response_headers: dict[str, str]


class ToolCallFailed(Exception):
    """The call got no tool result: transport, HTTP status or protocol failure."""

    def __init__(self, failure_class: str, message: str, http_status: int | None) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.http_status = http_status


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


def call_tool(
    url: str, tool: str, arguments: dict[str, Any], headers: Mapping[str, str], timeout_ms: int
) -> ToolReply:
    """Call ``tool`` with ``arguments``; raises :class:`ToolCallFailed` when no tool result came
    back (anything else that escapes is a bug)."""
    exchange = _Exchange()
    try:
        result = anyio.run(
            _call_tool, url, tool, arguments, dict(headers), timeout_ms / 1000, exchange
        )
    except Exception as exc:  # classified below; anything unknown is re-raised (a bug)
        failure = _failure(exc, exchange, timeout_ms)
        if failure is None:
            raise
        raise ToolCallFailed(*failure, exchange.call_status) from None
    return ToolReply(
        reply=result.model_dump(mode="json", by_alias=True, exclude_none=True),
        is_error=bool(result.is_error),
        structured=result.structured_content,
        content_types=[block.type for block in result.content],
        texts=[block.text for block in result.content if isinstance(block, TextContent)],
        http_status=exchange.call_status,
        response_headers=exchange.call_headers,
    )


async def _call_tool(
    url: str,
    tool: str,
    arguments: dict[str, Any],
    headers: dict[str, str],
    timeout_s: float,
    exchange: _Exchange,
) -> CallToolResult:
    with anyio.fail_after(timeout_s):
        async with httpx2.AsyncClient(
            headers=headers,
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
