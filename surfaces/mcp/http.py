"""``/mcp/``: MCP's streamable HTTP transport, served by the Django app (WSGI).

The SDK's transport is an ASGI application; in stateless mode with JSON responses each POST
carries one JSON-RPC message and gets one JSON answer, with no session between requests. So this
view authenticates the request as the REST API does (a DRF token, sent as ``Token <key>`` or
``Bearer <key>``; a refusal is a ``Bearer`` challenge that says how to send it), hands the request to a fresh ``StreamableHTTPSessionManager`` running in an
event loop of its own, and returns what the transport answered. The SDK decides every
protocol answer (202 for notifications, 405 for DELETE without sessions, 406/415 for bad
headers, protocol versions); only GET is answered here: stateless JSON mode offers no SSE stream,
and the specification's answer for that is 405.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from starlette.types import Message

from chukwa_core.errors import NotFoundError
from surfaces.mcp.calls import Caller
from surfaces.mcp.catalog import api_tools
from surfaces.mcp.server import build_server
from surfaces.signin_throttle import (
    ThrottledBearerAuthentication,
    ThrottledTokenAuthentication,
    client_address,
)

# RFC 6750's challenge. MCP clients read a 401 without a Bearer challenge (or with one naming
# no error) as "start OAuth discovery"; Chukwa has no OAuth, only its API tokens, so the
# challenge names the error and says how to send one.
TOKEN_HINT = "Send an API token as Authorization: Bearer <API token> (Chukwa has no OAuth)."  # noqa: S105
BEARER_CHALLENGE = (
    'Bearer realm="chukwa", error="invalid_token", '
    'error_description="send Authorization: Bearer <API token>; Chukwa has no OAuth"'
)


class BearerTokenAuthentication(ThrottledBearerAuthentication):
    """The API's tokens sent the way MCP clients send credentials: ``Bearer <key>``."""


class AnyAcceptNegotiation(BaseContentNegotiation):
    """The transport judges the Accept header (MCP's rules, not DRF's); error bodies of the
    API (401, 429, 503) are JSON whatever the client accepts."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


def _scope(request: Request, body: bytes) -> dict[str, Any]:
    raw = request._request
    headers = [
        (key[5:].replace("_", "-").lower().encode("latin-1"), value.encode("latin-1"))
        for key, value in raw.META.items()
        if key.startswith("HTTP_") and isinstance(value, str)
    ]
    for key, name in (("CONTENT_TYPE", b"content-type"), ("CONTENT_LENGTH", b"content-length")):
        if raw.META.get(key):
            headers.append((name, str(raw.META[key]).encode("latin-1")))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": raw.method,
        "scheme": raw.scheme,
        "path": raw.path,
        "raw_path": raw.path.encode(),
        "query_string": raw.META.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "client": (raw.META.get("REMOTE_ADDR", ""), 0),
        "server": (raw.get_host(), int(raw.get_port())),
    }


async def _serve(caller: Caller, scope: dict[str, Any], body: bytes) -> HttpResponse:
    answer: dict[str, Any] = {"status": 500, "headers": [], "body": b""}
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        # The client stays connected until the answer is sent (it is sent in one piece).
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = message.get("headers", [])
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    manager = StreamableHTTPSessionManager(build_server(caller), json_response=True, stateless=True)
    async with manager.run():
        await manager.handle_request(scope, receive, send)
    response = HttpResponse(answer["body"], status=answer["status"])
    for key, value in answer["headers"]:
        name = key.decode("latin-1")
        if name.lower() not in ("content-length", "connection"):
            response[name] = value.decode("latin-1")
    return response


class McpEndpoint(APIView):
    """The MCP endpoint. Any signed-in user may connect; what each may do is the API's rule."""

    authentication_classes = [ThrottledTokenAuthentication, BearerTokenAuthentication]
    permission_classes = [IsAuthenticated]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = AnyAcceptNegotiation

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        if response.status_code == 401:
            response["WWW-Authenticate"] = BEARER_CHALLENGE
            # Clients show the body (the Inspector prints it): it says what to send, too.
            error = response.data["error"]
            error["message"] = f"{error['message']} {TOKEN_HINT}"
        return response

    @extend_schema(exclude=True)
    def post(self, request: Request) -> HttpResponse:
        body = request._request.body
        caller = Caller(
            user=request.user,
            token=request.auth,
            host=request._request.get_host(),
            address=client_address(request._request),
        )
        api_tools()  # built here, not inside the event loop, on a process's first request
        return anyio.run(_serve, caller, _scope(request, body), body)

    @extend_schema(exclude=True)
    def delete(self, request: Request) -> HttpResponse:
        return self.post(request)

    @extend_schema(exclude=True)
    def get(self, request: Request) -> HttpResponse:
        return JsonResponse(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32000,
                    "message": "Method Not Allowed: this server sends no SSE stream; POST "
                    "JSON-RPC messages to this endpoint",
                },
            },
            status=405,
            headers={"Allow": "POST, DELETE"},
        )


@csrf_exempt  # a JSON 404 for any method; a CSRF 403 page would hide the real answer
def oauth_not_offered(request: HttpRequest) -> JsonResponse:
    """OAuth's discovery and registration paths: a client that probes them (after a 401, or
    before connecting) gets the API's JSON 404 saying what to send instead, not an HTML page."""
    error = NotFoundError(
        "oauth_not_supported",
        f"path: {request.path}: Chukwa offers no OAuth; send an API token in the header "
        "Authorization: Bearer <API token>",
        {"field": "path", "path": request.path},
    )
    return JsonResponse({"error": error.as_dict()}, status=error.status_code)
