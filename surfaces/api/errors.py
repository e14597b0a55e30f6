"""Maps every API failure to {"error": {"code", "message", "details"}}."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response

from chukwa_core.errors import ChukwaError, NotFoundError
from surfaces.signin_throttle import SigninThrottled
from worlds_app.services.dispatch import BROKER_ERRORS

logger = logging.getLogger(__name__)

# Clients may retry after this long; an outage usually outlasts a single request.
RETRY_AFTER_SECONDS = 5
_UNAVAILABLE_MESSAGES = {
    "database": "The database is unavailable; try again shortly.",
    "broker": "The task broker is unavailable; try again shortly.",
}


def _flatten_drf_detail(detail: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Turn DRF's nested error detail into (field path, message) pairs."""
    pairs: list[tuple[str, str]] = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors":
                path = prefix or "body"
            pairs.extend(_flatten_drf_detail(value, path))
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            for item in detail:
                pairs.append((prefix or "body", str(item)))
        else:
            for index, item in enumerate(detail):
                pairs.extend(_flatten_drf_detail(item, f"{prefix}[{index}]"))
    else:
        pairs.append((prefix or "body", str(detail)))
    return pairs


def error_response(error: ChukwaError) -> Response:
    return Response({"error": error.as_dict()}, status=error.status_code)


def outage_of(exc: BaseException) -> str | None:
    """Which backing service an exception says is unreachable: "database", "broker" or None.

    Every psycopg OperationalError/InterfaceError counts (connection refused or lost, server
    shutting down, too many connections…): each is transient and the request may be retried."""
    if isinstance(exc, OperationalError | InterfaceError):
        return "database"
    if isinstance(exc, BROKER_ERRORS):
        return "broker"
    return None


def unavailable_error(service: str, exc: BaseException) -> ChukwaError:
    """The 503 for an outage. The message is fixed: the driver's text (socket paths, hosts)
    stays in the server log, and no DSN or broker URL can leak into a response."""
    logger.warning("%s unavailable: %s: %s", service, type(exc).__name__, str(exc).strip())
    return ChukwaError(
        "unavailable",
        _UNAVAILABLE_MESSAGES[service],
        {"service": service, "retry_after_seconds": RETRY_AFTER_SECONDS},
        status_code=503,
    )


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error leaves as {"error": {"code", "message", "details"}}."""
    if isinstance(exc, ChukwaError):
        return error_response(exc)
    service = outage_of(exc)
    if service is not None:
        response = error_response(unavailable_error(service, exc))
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if isinstance(exc, RequestDataTooBig):
        return error_response(
            ChukwaError(
                "request_too_large", "Request body is larger than allowed.", status_code=413
            )
        )
    if isinstance(exc, Http404):
        return error_response(NotFoundError("not_found", str(exc) or "Not found."))
    if isinstance(exc, drf_exceptions.ValidationError):
        pairs = _flatten_drf_detail(exc.detail)
        field, message = pairs[0] if pairs else ("body", "Invalid input.")
        return error_response(
            ChukwaError(
                "invalid_input",
                f"{field}: {message}",
                {"field": field, "errors": [{"field": f, "message": m} for f, m in pairs]},
            )
        )
    if isinstance(exc, drf_exceptions.ParseError):
        return error_response(ChukwaError("malformed_json", f"Request body: {exc.detail}"))
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return error_response(
            ChukwaError("unsupported_media_type", str(exc.detail), status_code=415)
        )
    if isinstance(exc, SigninThrottled):
        response = error_response(
            ChukwaError(
                "signin_throttled",
                str(exc.detail),
                {"retry_after_seconds": exc.wait},
                status_code=exc.status_code,
            )
        )
        response["Retry-After"] = str(exc.wait)
        return response
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        response = error_response(
            ChukwaError("not_authenticated", str(exc.detail), status_code=401)
        )
        response["WWW-Authenticate"] = 'Token realm="api"'
        return response
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return error_response(
            ChukwaError("permission_denied", str(exc.detail), status_code=status.HTTP_403_FORBIDDEN)
        )
    if isinstance(exc, drf_exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        return error_response(ChukwaError(str(code), str(exc.detail), status_code=exc.status_code))
    return None
