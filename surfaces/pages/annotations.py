"""Annotations in place: the panel a page includes for its attempt, turn or LLM call,
with HTMX forms to add one and to edit or delete one where it stands. Any signed-in reviewer
may add one; changing or deleting one is for its author or an operator (as in the API).

Every endpoint also works without JavaScript: forms post normally and come back to the page
they were sent from (``next``), and each answers ``?format=json`` with the same facts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from chukwa_core.errors import ChukwaError
from scenarios_app.selectors import metric_labels
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.permissions import is_operator
from worlds_app import selectors
from worlds_app.selectors import MAX_TURN_NUMBER, parse_uuid, require_slug
from worlds_app.services import annotations as services

PANEL_LIMIT = 200  # annotations shown on one target; more are on the index

if TYPE_CHECKING:  # typing only: pages read through selectors and call services
    from django.contrib.auth.models import User


def form_value(raw: str) -> bool | int | float | str:
    """A value as typed in the form: true/false, a number, else a label."""
    text = raw.strip()
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def value_text(value: Any) -> str:
    """A stored value as the form shows it (what ``form_value`` reads back to the same)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _can_edit(request: HttpRequest, author: str) -> bool:
    return is_operator(request.user) or author == request.user.get_username()


def _row(request: HttpRequest, annotation: dict[str, Any]) -> dict[str, Any]:
    return {**annotation, "can_edit": _can_edit(request, annotation["author"])}


def _next_url(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def _panel(
    request: HttpRequest,
    *,
    target: dict[str, Any],
    filters: dict[str, str],
    url: str,
    key: str,
    error: ChukwaError | None = None,
    names: list[str] | None = None,
) -> HttpResponse:
    listing = selectors.annotation_list(params={**filters, "limit": str(PANEL_LIMIT)})
    form = {k: request.POST.get(k, "") for k in ("name", "value", "comment")} if error else {}
    context = {
        "notes": {
            "key": key,
            "url": url,
            "index_url": f"{reverse('page-annotation-index')}?{urlencode(filters)}",
            "rows": [_row(request, a) for a in listing["results"]],
            "count": listing["count"],
            "error": error,
            "form": form,
            "next": _next_url(request, request.get_full_path()),
            # names offered as the reviewer types (a turn: the metrics' labels, so people
            # label what the metrics measure and their agreement can be read)
            "names": names or [],
        }
    }
    data = {"target": target, **listing}
    response = respond(
        request,
        "pages/annotations_on.html",
        context,
        data,
        partial="pages/_annotations.html",
    )
    if error is not None and not getattr(request, "htmx", False):
        response.status_code = error.status_code
    return response


def _on(
    request: HttpRequest,
    target: dict[str, Any],
    filters: dict[str, str],
    url: str,
    key: str,
    names: list[str] | None = None,
) -> HttpResponse:
    if request.method != "POST":
        return _panel(request, target=target, filters=filters, url=url, key=key, names=names)
    body = {
        "target": target,
        "name": request.POST.get("name", "").strip(),
        "value": form_value(request.POST.get("value", "")),
        "comment": request.POST.get("comment", ""),
    }
    try:
        # @page let only a signed-in user (a User row) this far
        services.annotation_create(
            data=cast(services.AnnotationInput, body), author=cast("User", request.user)
        )
    except ChukwaError as exc:
        if wants_json(request) or exc.status_code != 400:
            raise
        return _panel(
            request, target=target, filters=filters, url=url, key=key, error=exc, names=names
        )
    if not getattr(request, "htmx", False) and not wants_json(request):
        return redirect(_next_url(request, url))
    return _panel(request, target=target, filters=filters, url=url, key=key, names=names)


@page
@require_http_methods(["GET", "HEAD", "POST"])
def annotations_on_attempt(request: HttpRequest, attempt_id: str) -> HttpResponse:
    pk = str(parse_uuid(attempt_id, "attempt_id"))
    url = reverse("page-annotations-on-attempt", args=[pk])
    filters = {"target_kind": "attempt", "attempt": pk}
    return _on(request, {"attempt": pk}, filters, url, f"attempt-{pk}")


@page
@require_http_methods(["GET", "HEAD", "POST"])
def annotations_on_llm_call(request: HttpRequest, call_id: str) -> HttpResponse:
    pk = str(parse_uuid(call_id, "call_id"))
    url = reverse("page-annotations-on-llm-call", args=[pk])
    filters = {"target_kind": "llm_call", "llm_call": pk}
    return _on(request, {"llm_call": pk}, filters, url, f"llm-call-{pk}")


@page
@require_http_methods(["GET", "HEAD", "POST"])
def annotations_on_turn(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    require_slug(slug)
    if number > MAX_TURN_NUMBER:
        raise ChukwaError("invalid_turn", f"number: must be 0…{MAX_TURN_NUMBER}")
    url = reverse("page-annotations-on-turn", args=[slug, number])
    filters = {"target_kind": "turn", "world": slug, "turn": str(number)}
    target = {"turn": {"world": slug, "number": number}}
    return _on(request, target, filters, url, f"turn-{slug}-{number}", names=metric_labels())


def _editable(request: HttpRequest, annotation_id: str) -> dict[str, Any]:
    annotation = selectors.annotation_get(annotation_id=annotation_id)
    if not _can_edit(request, annotation["author"]):
        raise ChukwaError(
            "forbidden",
            "Only the annotation's author or an operator may change or delete it.",
            status_code=403,
        )
    return annotation


def _one(
    request: HttpRequest,
    annotation: dict[str, Any],
    *,
    editing: bool,
    error: ChukwaError | None = None,
) -> HttpResponse:
    form = (
        {k: request.POST.get(k, "") for k in ("name", "value", "comment")}
        if error
        else {
            "name": annotation["name"],
            "value": value_text(annotation["value"]),
            "comment": annotation["comment"],
        }
    )
    context = {
        "a": _row(request, annotation),
        "editing": editing,
        "form": form,
        "error": error,
        "next": _next_url(request, reverse("page-annotation-index")),
    }
    partial = "pages/_annotation_edit.html" if editing else "pages/_annotation_row.html"
    response = respond(
        request, "pages/annotation_detail.html", context, annotation, partial=partial
    )
    if error is not None and not getattr(request, "htmx", False):
        response.status_code = error.status_code
    return response


@page
@require_http_methods(["GET", "HEAD"])
def annotation_page(request: HttpRequest, annotation_id: str) -> HttpResponse:
    """One annotation (HTMX: its row, which "cancel" puts back in place of the edit form)."""
    annotation = selectors.annotation_get(annotation_id=annotation_id)
    return _one(request, annotation, editing=False)


@page
@require_http_methods(["GET", "HEAD", "POST"])
def annotation_edit(request: HttpRequest, annotation_id: str) -> HttpResponse:
    """GET: the edit form in place of the row; POST: save, and the row again."""
    annotation = _editable(request, annotation_id)
    if request.method != "POST":
        return _one(request, annotation, editing=True)
    change = {
        "name": request.POST.get("name", "").strip(),
        "value": form_value(request.POST.get("value", "")),
        "comment": request.POST.get("comment", ""),
    }
    try:
        services.annotation_update(
            annotation_id=parse_uuid(annotation_id, "annotation_id"),
            data=cast(services.AnnotationChangeInput, change),
        )
    except ChukwaError as exc:
        if wants_json(request) or exc.status_code != 400:
            raise
        return _one(request, annotation, editing=True, error=exc)
    saved = selectors.annotation_get(annotation_id=annotation_id)
    if not getattr(request, "htmx", False) and not wants_json(request):
        return redirect(_next_url(request, reverse("page-annotation-index")))
    return _one(request, saved, editing=False)


@page
@require_POST
def annotation_delete(request: HttpRequest, annotation_id: str) -> HttpResponse:
    annotation = _editable(request, annotation_id)
    services.annotation_delete(annotation_id=parse_uuid(annotation_id, "annotation_id"))
    if wants_json(request):
        return respond(request, "", {}, {"deleted": str(annotation["id"])})
    if getattr(request, "htmx", False):
        return HttpResponse("")  # the row goes away where it stood
    return redirect(_next_url(request, reverse("page-annotation-index")))
