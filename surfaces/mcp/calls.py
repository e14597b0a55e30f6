"""Calling a tool: the REST operation's own view, in process, as the calling user.

A tool call becomes the request a REST client would send (path parameters in the path, query
parameters in the query string, the rest as the JSON body), routed by the project's URLconf
and answered by the operation's view with the caller's identity forced on it. So a tool runs the
same serializers, service or selector, permission check and error mapping as the endpoint, and
answers with the same body, errors included.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from django.core.handlers.wsgi import WSGIRequest
from django.urls import Resolver404, resolve
from rest_framework import exceptions as drf_exceptions

from chukwa_core.component_validation import type_name
from chukwa_core.errors import ChukwaError, NotFoundError, invalid
from surfaces.mcp.catalog import Tool
from surfaces.signin_throttle import ThrottledTokenAuthentication

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    """Who calls, as the API would see them: the token's user, the token, and where from."""

    user: Any
    token: Any
    host: str = "localhost"
    address: str = "127.0.0.1"
    # Set for a long-lived caller (stdio): the token is checked again at every call.
    token_key: str | None = None


def current(caller: Caller) -> Caller:
    """``caller`` as of now: a long-lived caller's token is looked up again, so a deleted token
    or a deactivated user stops working at once (raises ``ChukwaError`` not_authenticated)."""
    if caller.token_key is None:
        return caller
    try:
        user, token = ThrottledTokenAuthentication().authenticate_credentials(caller.token_key)
    except drf_exceptions.AuthenticationFailed as exc:
        raise ChukwaError("not_authenticated", str(exc.detail), status_code=401) from None
    return replace(caller, user=user, token=token)


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]

    @property
    def is_error(self) -> bool:
        return self.status >= 400


def _error(error: ChukwaError) -> Answer:
    return Answer(error.status_code, {"error": error.as_dict()})


def _query_value(value: Any) -> str:
    """A JSON argument as a query-string value, written as a REST client would write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


def _path_value(name: str, value: Any, schema: dict[str, Any]) -> str:
    if schema.get("type") == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid("invalid_input", name, f"must be an integer, got {type_name(value)}")
        return str(value)
    if not isinstance(value, str):
        raise invalid("invalid_input", name, f"must be a string, got {type_name(value)}")
    return value


def _request(
    tool: Tool, arguments: dict[str, Any]
) -> tuple[str, str, bytes | None]:  # path, query string, body
    unknown = sorted(set(arguments) - set(tool.input_schema["properties"]))
    if unknown and not tool.has_body:
        # With a body, unknown arguments go into it and the API names them; without one, this
        # is the same error the body's serializer gives.
        allowed = ", ".join(sorted(tool.input_schema["properties"])) or "none"
        raise ChukwaError(
            "invalid_input",
            f"{unknown[0]}: unknown field; allowed fields are {allowed}",
            {
                "field": unknown[0],
                "errors": [{"field": k, "message": "unknown field"} for k in unknown],
            },
        )
    path = tool.path
    for name in tool.path_params:
        if name not in arguments:
            raise invalid("invalid_input", name, "This field is required.")
        value = _path_value(name, arguments[name], tool.input_schema["properties"][name])
        path = path.replace("{" + name + "}", value)
    query = urlencode(
        [
            (name, _query_value(arguments[name]))
            for name in tool.query_params
            if arguments.get(name) is not None
        ]
    )
    if not tool.has_body:
        return path, query, None
    params = set(tool.path_params) | set(tool.query_params)
    body = {key: value for key, value in arguments.items() if key not in params}
    # ensure_ascii: a lone surrogate travels escaped, as from any JSON client, and the API
    # names it.
    return path, query, json.dumps(body).encode()


def _wsgi_request(
    tool: Tool, caller: Caller, path: str, query: str, body: bytes | None
) -> WSGIRequest:
    payload = body or b""
    environ = {
        "REQUEST_METHOD": tool.method,
        "SCRIPT_NAME": "",
        # WSGI carries the decoded path's UTF-8 bytes read as latin-1.
        "PATH_INFO": path.encode().decode("latin-1"),
        "QUERY_STRING": query,
        "SERVER_NAME": caller.host.rsplit(":", 1)[0],
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": caller.host,
        "REMOTE_ADDR": caller.address,
        "HTTP_ACCEPT": "application/json",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(payload),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if body is not None:
        environ["CONTENT_TYPE"] = "application/json"
        environ["CONTENT_LENGTH"] = str(len(payload))
    request = WSGIRequest(environ)
    # DRF's forced authentication: the view authenticates nobody else, and its permission
    # classes judge the caller exactly as for a token request.
    request._force_auth_user = caller.user  # type: ignore[attr-defined]
    request._force_auth_token = caller.token  # type: ignore[attr-defined]
    return request


def call(tool: Tool, arguments: dict[str, Any], caller: Caller) -> Answer:
    """Run ``tool`` with ``arguments`` as ``caller``; the answer is the REST endpoint's."""
    try:
        caller = current(caller)
        path, query, body = _request(tool, arguments)
    except ChukwaError as error:
        return _error(error)
    try:
        match = resolve(path)
    except Resolver404:
        match = None
    if match is None or getattr(match.func, "cls", None) is not tool.view_class:
        # A path parameter holding "/" (or the like) would reach another endpoint.
        return _error(
            NotFoundError(
                "not_found",
                f"path: no API endpoint at {path}",
                {"field": "path", "path": path},
            )
        )
    request = _wsgi_request(tool, caller, path, query, body)
    response = match.func(request, *match.args, **match.kwargs)
    render = getattr(response, "render", None)
    if render is not None:
        render()
    content = response.content
    parsed = json.loads(content) if content else {}
    if not isinstance(parsed, dict):
        parsed = {"result": parsed}
    return Answer(response.status_code, parsed)
