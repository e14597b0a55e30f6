"""Helpers shared by the server-rendered pages: sign-in, ``?format=json``, HTMX partials."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

from chukwa_core.errors import ChukwaError
from surfaces.permissions import is_operator

View = Callable[..., HttpResponse]


def page(view: View) -> View:
    """Sign-in required (anonymous → the sign-in page, even for ?format=json); a ChukwaError
    becomes an error page (or JSON error) with its status, never a 500."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        try:
            return view(request, *args, **kwargs)
        except ChukwaError as exc:
            if wants_json(request):
                return JsonResponse({"error": exc.as_dict()}, status=exc.status_code)
            return render(request, "error.html", {"error": exc}, status=exc.status_code)

    return wrapper


def wants_json(request: HttpRequest) -> bool:
    return request.GET.get("format") == "json"


def respond(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    data: Any,
    *,
    partial: str | None = None,
) -> HttpResponse:
    """One view, three answers: ``?format=json`` gives ``data`` (the same facts the page shows),
    an HTMX request gets ``partial`` alone, a browser the full page."""
    if wants_json(request):
        return JsonResponse(data, encoder=DjangoJSONEncoder, safe=False)
    context = {**context, "is_operator": is_operator(request.user)}
    if partial is not None and getattr(request, "htmx", False):
        response = render(request, partial, context)
    else:
        response = render(request, template, context)
    patch_vary_headers(response, ("HX-Request",))
    return response
