"""The toy MCP server of the park (an ``mcp_tool`` source): a lamp by the park bench, built
with the official ``mcp`` SDK's server and served over streamable HTTP (stateless, JSON
responses) at ``/mcp``. Chukwa reaches it exactly like a real MCP server, through ``mcp_tool``
sources whose ``url_env`` is ``CHUKWA_MCP_LAMP_URL`` (this server's ``…/mcp`` endpoint) and whose
``api_key_env`` is ``CHUKWA_MCP_LAMP_API_KEY``.

Tools (arguments: an empty object unless said otherwise):

``toggle_lamp``
    flips the lamp of the calling world (``X-Chukwa-World``; missing → a tool error) and answers
    ``{"lamp": "on" | "off"}`` as structured content. Every world's lamp starts ``off``, so the
    first toggle turns it on. State is kept in memory: a restarted server starts every lamp off.
``lamp_status_text``
    the world's lamp, ``{"lamp": …}``, as the tool's only text content (no structured content).
``fail_broken_switch``, ``fail_not_json``, ``fail_slow`` (``{"seconds": n}``, n ≤ 10)
    test hooks for Chukwa's failure paths: a tool error (``isError: true``) carrying
    :data:`BROKEN_SWITCH_MESSAGE`; a text content that is not JSON; a reply after ``n`` seconds.

When started with a key, every MCP request must carry ``Authorization: Bearer <key>`` (else
HTTP 401). ``GET /health`` → ``{"ok": true}``, without a key.

Run it: ``python -m devservices.toy_mcp --port 8093 [--api-key-env CHUKWA_MCP_LAMP_API_KEY]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import TypedDict

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

LAMP_URL_ENV = "CHUKWA_MCP_LAMP_URL"
LAMP_KEY_ENV = "CHUKWA_MCP_LAMP_API_KEY"
MCP_PATH = "/mcp"
WORLD_HEADER = "x-chukwa-world"
BROKEN_SWITCH_MESSAGE = "the lamp's switch is broken: it will not move"
NOT_JSON_TEXT = "the lamp hums quietly"
MAX_SLOW_SECONDS = 10.0
START_TIMEOUT_SECONDS = 30.0


class LampState(TypedDict):
    lamp: str


class Lamps:
    """Each world's lamp, ``off`` until toggled (thread-safe: the server runs its own loop)."""

    def __init__(self) -> None:
        self._on: dict[str, bool] = {}
        self._lock = threading.Lock()

    def toggle(self, world: str) -> LampState:
        with self._lock:
            self._on[world] = not self._on.get(world, False)
            return {"lamp": "on" if self._on[world] else "off"}

    def state(self, world: str) -> LampState:
        with self._lock:
            return {"lamp": "on" if self._on.get(world, False) else "off"}


def _world(ctx: Context) -> str:
    world = ((ctx.headers or {}).get(WORLD_HEADER) or "").strip()
    if not world:
        raise ToolError("missing header X-Chukwa-World: the lamp is kept per world")
    return world


def lamp_server(lamps: Lamps | None = None) -> MCPServer:
    """The lamp's MCP server (tools only)."""
    lamps = lamps or Lamps()
    server: MCPServer = MCPServer("chukwa-park-lamp", version="1", log_level="WARNING")

    @server.tool()
    def toggle_lamp(ctx: Context) -> LampState:
        """Flip the switch of the park lamp by the bench; says whether the lamp is now on or
        off."""
        return lamps.toggle(_world(ctx))

    @server.tool(structured_output=False)
    def lamp_status_text(ctx: Context) -> CallToolResult:
        """The lamp's state as JSON text (no structured content)."""
        text = json.dumps(lamps.state(_world(ctx)))
        return CallToolResult(content=[TextContent(type="text", text=text)])

    @server.tool()
    def fail_broken_switch() -> LampState:
        """Test hook: always a tool error."""
        raise ToolError(BROKEN_SWITCH_MESSAGE)

    @server.tool(structured_output=False)
    def fail_not_json() -> CallToolResult:
        """Test hook: a text content that is not JSON."""
        return CallToolResult(content=[TextContent(type="text", text=NOT_JSON_TEXT)])

    @server.tool()
    async def fail_slow(seconds: float) -> LampState:
        """Test hook: answers after ``seconds`` (at most 10)."""
        await anyio.sleep(min(max(seconds, 0.0), MAX_SLOW_SECONDS))
        return {"lamp": "off"}

    @server.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return server


class _RequireBearer:
    """Refuses every MCP request without ``Authorization: Bearer <key>`` (HTTP 401)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(MCP_PATH):
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if auth != self.expected:
                response = JSONResponse({"error": "missing or wrong bearer key"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def asgi_app(server: MCPServer, *, api_key: str | None = None) -> ASGIApp:
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH, stateless_http=True, json_response=True
    )
    return _RequireBearer(app, api_key) if api_key else app


@dataclass
class RunningMcp:
    """An MCP server running in a daemon thread of this process."""

    url: str  # the MCP endpoint (…/mcp)
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread

    def shutdown(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=START_TIMEOUT_SECONDS)


def _bound_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _uvicorn(app: ASGIApp) -> uvicorn.Server:
    # Stateless: no session outlives a request, so a stop need not wait for anyone.
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    return uvicorn.Server(config)


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    api_key: str | None = None,
    server: MCPServer | None = None,
) -> RunningMcp:
    """Start ``server`` (default: the lamp) in a daemon thread; ``port=0`` picks a free port.
    Returns once it accepts connections."""
    sock = _bound_socket(host, port)
    bound = sock.getsockname()[1]
    web = _uvicorn(asgi_app(server or lamp_server(), api_key=api_key))
    thread = threading.Thread(
        target=web.run, kwargs={"sockets": [sock]}, name=f"chukwa-mcp-{bound}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not web.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the MCP server on port {bound} did not start")
        time.sleep(0.02)
    return RunningMcp(f"http://{host}:{bound}{MCP_PATH}", bound, web, thread)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.toy_mcp",
        description="Serve the park's toy MCP server (a lamp) over streamable HTTP at /mcp.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument(
        "--api-key-env",
        default="",
        help="require 'Authorization: Bearer <the value of this variable>' on every MCP request",
    )
    args = parser.parse_args(argv)
    api_key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""
    if args.api_key_env and not api_key:
        parser.error(f"{args.api_key_env} is not set")
    sock = _bound_socket(args.host, args.port)
    url = f"http://{args.host}:{sock.getsockname()[1]}{MCP_PATH}"
    print(f"Chukwa toy MCP server (lamp) at {url} — set: {LAMP_URL_ENV}={url}", flush=True)
    _uvicorn(asgi_app(lamp_server(), api_key=api_key or None)).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
