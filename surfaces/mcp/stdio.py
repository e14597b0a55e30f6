"""MCP over stdio, for a desktop MCP client that launches ``manage.py mcp_stdio`` itself.

The caller is the user of an API token read from the environment (``CHUKWA_MCP_TOKEN``), never
from the command line, where other users of the machine could read it.
"""

from __future__ import annotations

import os

import anyio
from django.db import connections
from mcp.server.stdio import stdio_server
from rest_framework import exceptions as drf_exceptions

from chukwa_core.errors import ChukwaError
from surfaces.mcp.calls import Caller
from surfaces.mcp.catalog import api_tools
from surfaces.mcp.server import build_server
from surfaces.signin_throttle import ThrottledTokenAuthentication

TOKEN_VARIABLE = "CHUKWA_MCP_TOKEN"  # noqa: S105 (the variable's name, not a secret)


def stdio_caller() -> Caller:
    """The caller named by ``CHUKWA_MCP_TOKEN``, checked as the API checks a token."""
    key = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not key:
        raise ChukwaError(
            "not_authenticated",
            f"{TOKEN_VARIABLE}: set it to an API token (manage.py create_operator prints one)",
            {"field": TOKEN_VARIABLE},
            status_code=401,
        )
    try:
        user, token = ThrottledTokenAuthentication().authenticate_credentials(key)
    except drf_exceptions.AuthenticationFailed as exc:
        raise ChukwaError(
            "not_authenticated",
            f"{TOKEN_VARIABLE}: {exc.detail}",
            {"field": TOKEN_VARIABLE},
            status_code=401,
        ) from None
    return Caller(user=user, token=token, token_key=key)


async def _serve(caller: Caller) -> None:
    server = build_server(caller)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(caller: Caller) -> None:
    """Serve ``caller`` on stdin/stdout until the client closes stdin."""
    api_tools()  # built before the event loop starts
    # The tools run in worker threads with their own connections; this thread's is done.
    connections.close_all()
    anyio.run(_serve, caller)
