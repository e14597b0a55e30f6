"""503 ``unavailable`` for every request that failed because PostgreSQL or the broker is
unreachable, wherever the failure happened: in a page view, in the admin, or in a middleware
. API views answer the same error through ``api_errors.api_exception_handler``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from surfaces.api.errors import RETRY_AFTER_SECONDS, outage_of, unavailable_error

_OUTAGE_ATTR = "_chukwa_outage"


def unavailable_response(request: HttpRequest, service: str, exc: BaseException) -> HttpResponse:
    """JSON under /api/ and for ``?format=json``, else a plain page. The page is rendered
    without the request's context processors: they read the session and the user, which
    live in the database that is down."""
    error = unavailable_error(service, exc)
    if request.path.startswith("/api/") or request.GET.get("format") == "json":
        response: HttpResponse = JsonResponse({"error": error.as_dict()}, status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"error": error}), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _remember_outage(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django turns an exception raised inside a middleware into a 500 response right where it
    happens, before any outer middleware could see it; this signal fires while the exception
    is being handled, so the outage is noted on the request for OutageMiddleware."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None:
        service = outage_of(exc)
        if service is not None:
            setattr(request, _OUTAGE_ATTR, (service, exc))


got_request_exception.connect(_remember_outage, dispatch_uid="chukwa-outages")


class OutageMiddleware:
    """Outermost: a request that failed on an unreachable database or broker answers 503
    ``unavailable`` (never a 500 page or a traceback, even with DEBUG on)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        outage = getattr(request, _OUTAGE_ATTR, None)
        if outage is not None and response.status_code >= 500:
            return unavailable_response(request, *outage)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        service = outage_of(exception)
        if service is None:
            return None
        return unavailable_response(request, service, exception)
