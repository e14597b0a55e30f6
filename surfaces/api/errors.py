"""Maps every API failure to {"error": {"code", "message", "details"}}."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response

from chukwa_core.errors import ChukwaError, NotFoundError
from surfaces.signin_throttle import SigninThrottled


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


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error leaves as {"error": {"code", "message", "details"}}."""
    if isinstance(exc, ChukwaError):
        return error_response(exc)
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
