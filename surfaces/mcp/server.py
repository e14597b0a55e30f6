"""The MCP server of one caller: the API's operations as tools (SDK low-level ``Server``).

Both transports build it per caller (``surfaces/mcp/http.py`` per request, the stdio command
once). ``tools/list`` shows the tools the API would let the caller call; ``tools/call`` runs the
REST operation's view (``surfaces/mcp/calls.py``) in a worker thread, because Django's ORM may
not run inside the event loop, and closes that thread's database connections afterwards.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
from django.db import connections
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from chukwa_core.errors import ChukwaError
from surfaces.api.errors import outage_of, unavailable_error
from surfaces.mcp.calls import Answer, Caller, call, current
from surfaces.mcp.catalog import Tool, api_tools
from surfaces.mcp.descriptions import INSTRUCTIONS

logger = logging.getLogger(__name__)

SERVER_NAME = "chukwa"
SERVER_VERSION = "1.0.0"


def allowed(tool: Tool, user: Any) -> bool:
    """Whether the API lets ``user`` call ``tool``: its view's own permission classes, asked
    as for a request of the tool's method (reads for any signed-in user, writes for
    operators, annotations for any signed-in user)."""
    view = tool.view_class()
    probe = SimpleNamespace(user=user, method=tool.method)
    return all(permission.has_permission(probe, view) for permission in view.get_permissions())


def visible_tools(user: Any) -> list[Tool]:
    return [tool for tool in api_tools().values() if allowed(tool, user)]


def _mcp_tool(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=types.ToolAnnotations(**tool.annotations),
    )


def _result(answer: Answer) -> types.CallToolResult:
    """The endpoint's JSON body, as text and as structured content; an error body is
    ``isError``."""
    text = json.dumps(answer.body, ensure_ascii=False, sort_keys=False)
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=answer.body,
        is_error=answer.is_error,
    )


def _call_in_thread(tool: Tool, arguments: dict[str, Any], caller: Caller) -> Answer:
    try:
        return call(tool, arguments, caller)
    except Exception as exc:
        service = outage_of(exc)
        if service is not None:
            # Outside the view (the token's lookup): the API's 503 all the same.
            return Answer(503, {"error": unavailable_error(service, exc).as_dict()})
        # What the REST API would answer with a 500 page: nothing of the exception reaches
        # the client (it may name hosts or data); the log has it.
        logger.exception("MCP tool %s failed", tool.name)
        return Answer(
            500,
            {
                "error": {
                    "code": "internal_error",
                    "message": "The tool failed unexpectedly; the server log has the details.",
                    "details": {},
                }
            },
        )
    finally:
        connections.close_all()


def build_server(caller: Caller) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = await anyio.to_thread.run_sync(partial(_visible, caller))
        return types.ListToolsResult(tools=[_mcp_tool(tool) for tool in tools])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = api_tools().get(params.name)
        if tool is None:
            # Every tool is callable by name, visible or not: the API refuses what the caller
            # may not do, with its own error. Only a name that is no tool is a protocol error.
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        answer = await anyio.to_thread.run_sync(
            partial(_call_in_thread, tool, dict(params.arguments or {}), caller)
        )
        return _result(answer)

    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        title="Chukwa",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _visible(caller: Caller) -> list[Tool]:
    try:
        return visible_tools(current(caller).user)
    except ChukwaError:
        return []  # the token is gone: nothing may be called
    finally:
        connections.close_all()
