"""Index pages that find things across worlds: attempts, LLM calls and annotations, each with a
filter form and pages, and the home page's "what is running, what failed" (HTML, every page
also ?format=json)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from chukwa_core.errors import ChukwaError
from cognition_app.selectors import CALL_OUTCOMES
from scenarios_app.selectors import store_counts
from surfaces.api.annotations import ANNOTATION_TARGET_KINDS
from surfaces.api.indexes import (
    INVOCATION_KINDS,
    INVOCATION_STATUSES,
    attempt_page_of,
    invocation_page_of,
    llm_call_page_of,
)
from surfaces.api.worlds import STATUSES
from surfaces.pages.layout import page_links
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.permissions import is_operator
from worlds_app import selectors as world_selectors

TIME_HINT = "2030-01-01T09:00:00Z"


def _field(
    key: str, label: str, params: Any, *, choices: Any = None, hint: str = ""
) -> dict[str, Any]:
    return {
        "key": key,
        "label": label,
        "value": params.get(key, ""),
        "choices": list(choices) if choices is not None else None,
        "hint": hint,
    }


def _experiment_fields(params: Any) -> list[dict[str, Any]]:
    return [
        _field("experiment", "Experiment", params, hint="experiment slug"),
        _field("arm", "Arm", params, hint="arm label, e.g. control"),
    ]


def _common_fields(params: Any, statuses: Any) -> list[dict[str, Any]]:
    return [
        _field("status", "Status", params, choices=statuses),
        _field("world", "World", params, hint="world slug"),
        *_experiment_fields(params),
        _field("subject", "Subject", params, hint="entity id, e.g. bob"),
        _field("model", "Model", params, hint="requested or answering model"),
        _field("since", "Since", params, hint=TIME_HINT),
        _field("until", "Until", params, hint=TIME_HINT),
    ]


def _index(
    request: HttpRequest,
    *,
    template: str,
    fields: list[dict[str, Any]],
    read: Callable[[Any], tuple[dict[str, Any], dict[str, Any]]],
) -> HttpResponse:
    """One filtered, paged index. A bad filter is shown on the form (400), with the values
    as typed, instead of an error page that loses them."""
    try:
        filters, data = read(request.GET)
    except ChukwaError as exc:
        if wants_json(request) or exc.status_code != 400:
            raise
        context = {"fields": fields, "error": exc, "data": None, "filtered": True}
        response = respond(request, template, context, None)
        response.status_code = 400
        return response
    pages = page_links(
        request, "offset", count=data["count"], limit=data["limit"], offset=data["offset"]
    )
    context = {"fields": fields, "data": data, "pages": pages, "filtered": bool(filters)}
    return respond(request, template, context, data)


@page
def attempt_index_page(request: HttpRequest) -> HttpResponse:
    return _index(
        request,
        template="pages/attempt_index.html",
        fields=_common_fields(request.GET, STATUSES),
        read=attempt_page_of,
    )


@page
def llm_call_index_page(request: HttpRequest) -> HttpResponse:
    return _index(
        request,
        template="pages/llm_call_index.html",
        fields=_common_fields(request.GET, CALL_OUTCOMES),
        read=llm_call_page_of,
    )


@page
def invocation_index_page(request: HttpRequest) -> HttpResponse:
    return _index(
        request,
        template="pages/invocation_index.html",
        fields=[
            _field("kind", "Kind", request.GET, choices=INVOCATION_KINDS),
            _field("source", "Source", request.GET, hint="label or tool, e.g. buy_candy"),
            _field("status", "Status", request.GET, choices=INVOCATION_STATUSES),
            _field("world", "World", request.GET, hint="world slug"),
            *_experiment_fields(request.GET),
            _field("subject", "Subject", request.GET, hint="entity id, e.g. bob"),
            _field("since", "Since", request.GET, hint=TIME_HINT),
            _field("until", "Until", request.GET, hint=TIME_HINT),
        ],
        read=invocation_page_of,
    )


def _annotation_rows(request: HttpRequest, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    operator = is_operator(request.user)
    return [{**a, "can_edit": operator or a["author"] == request.user.get_username()} for a in rows]


@page
def annotation_index_page(request: HttpRequest) -> HttpResponse:
    params = request.GET.copy()
    for key in [k for k, v in params.items() if v == ""]:
        del params[key]  # a blank form field is no filter
    fields = [
        _field("target_kind", "On", request.GET, choices=ANNOTATION_TARGET_KINDS),
        _field("world", "World", request.GET, hint="world slug (turns)"),
        _field("name", "Name", request.GET, hint="e.g. helpfulness"),
        _field("value", "Value", request.GET, hint="3, wrong, true…"),
        _field("author", "Author", request.GET, hint="username"),
    ]
    try:
        data = world_selectors.annotation_list(params=params)
    except ChukwaError as exc:
        if wants_json(request) or exc.status_code != 400:
            raise
        context = {"fields": fields, "error": exc, "data": None, "filtered": True}
        response = respond(request, "pages/annotation_index.html", context, None)
        response.status_code = 400
        return response
    pages = page_links(
        request, "offset", count=data["count"], limit=data["limit"], offset=data["offset"]
    )
    context = {
        "fields": fields,
        "data": data,
        "rows": _annotation_rows(request, data["results"]),
        "pages": pages,
        "filtered": any(k not in ("limit", "offset", "format") for k in params),
    }
    return respond(request, "pages/annotation_index.html", context, data)


HOME_ROWS = 8


@page
def home(request: HttpRequest) -> HttpResponse:
    """What is running and what failed lately, one click from each; the store at a glance."""
    _, running = attempt_page_of({"status": "running", "limit": HOME_ROWS})
    _, failed = attempt_page_of({"status": "failed", "limit": HOME_ROWS})
    _, queued = attempt_page_of({"status": "queued", "limit": 1})
    _, rejected = llm_call_page_of({"status": "rejected", "limit": 1})
    counts = store_counts()
    data = {
        "running": running,
        "failed": failed,
        "queued_count": queued["count"],
        "rejected_calls_count": rejected["count"],
        "worlds_count": world_selectors.world_count(),
        "store": counts,
    }
    store = [{"title": title, "count": counts[key], "url": url} for key, title, url in STORE_LINKS]
    context = {"now": data, "store": store}
    return respond(request, "home.html", context, data)


STORE_LINKS = (
    ("scenarios", "Scenarios", "/scenarios/"),
    ("names", "Names", "/names/"),
    ("json_schemas", "JSON schemas", "/store/json-schemas/"),
    ("response_sources", "Response sources", "/store/response-sources/"),
    ("cognition_workflows", "Cognition workflows", "/store/cognition-workflows/"),
    ("cognition_profiles", "Cognition profiles", "/store/cognition-profiles/"),
    ("environments", "Environments", "/store/environments/"),
    ("entities", "Entities", "/store/entities/"),
    ("metrics", "Metrics", "/store/metrics/"),
)
