"""World, turn, diff and comparison pages (HTML + HTMX, every page also ?format=json); the
attempt timeline is surfaces/pages/attempts.py."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from chukwa_core.errors import ChukwaError, NotFoundError
from cognition_app.selectors import tool_calls_of_attempt
from surfaces.pages.interventions import intervention_context
from surfaces.pages.layout import (
    appended_line,
    environments,
    memory_change,
    page_links,
    page_offset,
)
from surfaces.pages.live import stop_polling_when
from surfaces.pages.metric_strip import metric_strip_svg, value_text
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.permissions import is_operator
from worlds_app import indexes, measurement_selectors, selectors
from worlds_app.comparison import world_compare
from worlds_app.services import turn_attempt_enqueue
from worlds_app.services.attempts import turn_attempt_retryable


class HtmxHttpRequest(HttpRequest):
    """A request after django-htmx's middleware (typing only)."""

    htmx: HtmxDetails


FINISHED = selectors.FINISHED_STATUSES
TURNS_PER_PAGE = 20
ATTEMPTS_PER_PAGE = 15
PATCHES_PER_PAGE = 50
COMPARE_CHOICES = 50


@page
def world_list_page(request: HttpRequest) -> HttpResponse:
    data = selectors.world_list(params=request.GET)
    scenario = request.GET.get("scenario", "")
    limit, offset, count = data["limit"], data["offset"], data["count"]
    context = {
        "data": data,
        "scenario": scenario,
        "prev_offset": max(offset - limit, 0) if offset > 0 else None,
        "next_offset": offset + limit if offset + limit < count else None,
    }
    return respond(request, "worlds_app/world_list.html", context, data)


def _world_context(request: HttpRequest, slug: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The world page: its state, one page of turns and one of attempts (each paged on its
    own), and what a comparison can be made with. Constant queries in the history length."""
    data = selectors.world_get(slug=slug)
    turn_offset = page_offset(request, "turn_offset")
    attempt_offset = page_offset(request, "attempt_offset")
    turns = indexes.turn_list(slug=slug, limit=TURNS_PER_PAGE, offset=turn_offset)
    attempts = indexes.attempt_list(
        filters={"world": slug}, limit=ATTEMPTS_PER_PAGE, offset=attempt_offset
    )
    data["turns"] = turns["results"]
    data["attempts"] = {k: v for k, v in attempts.items()}
    data["metrics"] = measurement_selectors.world_metric_series(slug=slug)
    active = bool(data["attempts_queued"] or data["attempts_running"])
    # The card polls the world page itself (its HTMX answer is the card), whichever URL drew it:
    # the run-turns form answers POST only. It carries the turns and attempts pages shown,
    # which its answer redraws.
    world_url = reverse("page-world-detail", args=[slug])
    queue_url = world_url
    shown = {"turn_offset": turn_offset, "attempt_offset": attempt_offset}
    if any(shown.values()):
        queue_url += "?" + urlencode({k: v for k, v in shown.items() if v})
    context = {
        "world": data,
        "environments": environments(data["state"]),
        "turns": turns["results"],
        "turn_pages": page_links(
            request,
            "turn_offset",
            count=turns["count"],
            limit=TURNS_PER_PAGE,
            offset=turn_offset,
            path=world_url,
        ),
        "attempts": attempts["results"],
        "attempt_pages": page_links(
            request,
            "attempt_offset",
            count=attempts["count"],
            limit=ATTEMPTS_PER_PAGE,
            offset=attempt_offset,
            path=world_url,
        ),
        "queue_url": queue_url,
        "queue_active": active,
        "compare_with": indexes.world_neighbours(slug=slug, limit=COMPARE_CHOICES),
        "metrics": _metric_rows(data),
        "is_operator": is_operator(request.user),
        "retry_attempt": _retry_attempt(request, data),
        **intervention_context(request, slug),
    }
    data["interventions"] = context["interventions"]
    return context, data


def _metric_rows(world: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured metric with its strip; a branch's turns before its branch point link to its
    parent's turns (it has none of its own there)."""
    origin = world["branched_from"]

    def href(number: int) -> str:
        if origin is not None and number < origin["turn"]:
            return reverse("page-turn-detail", args=[origin["world"], number])
        return reverse("page-turn-detail", args=[world["slug"], number])

    return [
        {
            **series,
            "url": f"/store/metrics/{series['hash']}/",
            "value_text": value_text(series["value"]),
            "points": [{**p, "value_text": value_text(p["value"])} for p in series["points"]],
            # metric_strip_svg escapes every text and attribute it writes.
            "svg": mark_safe(metric_strip_svg(series["points"], href=href)),  # noqa: S308
        }
        for series in world["metrics"]
    ]


def _retry_attempt(request: HttpRequest, world: dict[str, Any]) -> dict[str, Any] | None:
    """The failed attempt that ended the world's last batch, when an operator may retry it."""
    last = world["last_attempt"]
    if (
        last is None
        or last["status"] not in selectors.RETRYABLE_STATUSES
        or not is_operator(request.user)
        or not turn_attempt_retryable(attempt_id=str(last["id"]))
    ):
        return None
    return dict(last)


@page
@require_http_methods(["GET", "HEAD"])
def world_detail_page(request: HttpRequest, slug: str) -> HttpResponse:
    context, data = _world_context(request, slug)
    response = respond(
        request, "worlds_app/world_detail.html", context, data, partial="worlds_app/_queue.html"
    )
    stop_polling_when(response, request, not context["queue_active"])
    return response


@page
@require_POST
def world_run_turns(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Queue 1-100 attempts (operators only). HTMX swaps the queue partial; plain forms redirect."""
    if not is_operator(request.user):
        raise ChukwaError(
            "forbidden",
            "Running turns requires membership of the operators group.",
            status_code=403,
        )
    raw = request.POST.get("count", "1")
    error = ""
    try:
        count = int(raw)
    except ValueError:
        error = f"count: must be an integer 1…100, got {raw!r}"
    else:
        try:
            result = turn_attempt_enqueue(
                slug=slug, count=count, requested_by=request.user.get_username()
            )
        except NotFoundError:
            raise
        except ChukwaError as exc:
            error = exc.message
    if wants_json(request):
        if error:
            raise ChukwaError("invalid_count", error, {"field": "count"})
        return respond(request, "", {}, result)
    if not error and not request.htmx:
        return redirect("page-world-detail", slug=slug)
    context, data = _world_context(request, slug)
    context["run_error"] = error
    context["run_count"] = raw
    template = "worlds_app/_queue.html" if request.htmx else "worlds_app/world_detail.html"
    response = respond(request, template, context, data, partial="worlds_app/_queue.html")
    if not request.htmx:
        # Without JS the form re-renders in place; HTMX only swaps 2xx answers, so it gets 200.
        response.status_code = 400
    return response


@page
def turn_page(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    data = selectors.turn_get(slug=slug, number=number)
    data["measurements"] = measurement_selectors.turn_measurements(slug=slug, number=number)
    data["tool_calls"] = (
        tool_calls_of_attempt(attempt_id=data["attempt_id"]) if data["attempt_id"] else []
    )
    links = selectors.turn_transition_links(slug=slug, number=number)
    for row in data["transitions"]:
        extra = links.get((row["patch_seq"], row["effect_index"]), {})
        row["llm_call_id"] = extra.get("llm_call_id")
        row["invocation_id"] = extra.get("invocation_id")
    data["transitions"].sort(key=lambda t: (t["patch_seq"], t["effect_index"]))
    # A memory append shows the appended line (the page only: the JSON keeps both values).
    rows = [
        {**t, "appended": appended_line(t["before"], t["after"])}
        if t["target_kind"] == "entity_memory"
        else t
        for t in data["transitions"]
    ]
    # A turn of many subjects (500 agents: 500 patches, 1,000 transitions, 1 MB) shows its
    # patches PATCHES_PER_PAGE at a time, each with its transitions; ?format=json gives all.
    offset = page_offset(request, "patch_offset")
    patches = sorted(data["patches"], key=lambda p: p["patch_seq"])
    shown = patches[offset : offset + PATCHES_PER_PAGE]
    seqs = {p["patch_seq"] for p in shown}
    context = {
        "turn": data,
        "patches": shown,
        "patch_pages": page_links(
            request, "patch_offset", count=len(patches), limit=PATCHES_PER_PAGE, offset=offset
        ),
        "transitions": [t for t in rows if t["patch_seq"] in seqs],
        "transitions_total": len(rows),
        "environments": environments(data["state"]),
        # the world's first turn (0, or a branch's copy of its parent's) has none before it here
        "prev": number - 1 if data["attempt_id"] is not None else None,
        "next": number + 1 if number < selectors.world_current_turn(slug=slug) else None,
        "annotations_url": reverse("page-annotations-on-turn", args=[slug, number]),
        "measurements": [{**m, "value_text": value_text(m["value"])} for m in data["measurements"]],
    }
    return respond(request, "worlds_app/turn_detail.html", context, data)


@page
@require_http_methods(["GET", "HEAD"])
def world_compare_pick(request: HttpRequest, slug: str) -> HttpResponse:
    """The world page's comparison form: on to the comparison with the world it names."""
    selectors.require_slug(slug)
    other = selectors.require_slug(request.GET.get("other", "").strip(), "other")
    return redirect("page-world-compare", slug=slug, other=other)


@page
def world_diff_page(request: HttpRequest, slug: str) -> HttpResponse:
    current = selectors.world_current_turn(slug=slug)
    try:
        to_turn = int(request.GET.get("to", current))
        from_turn = int(request.GET.get("from", max(to_turn - 1, 0)))
    except ValueError:
        raise ChukwaError("invalid_query", "from/to: must be integers") from None
    data = selectors.world_diff(slug=slug, from_turn=from_turn, to_turn=to_turn)
    changes = [
        {**c, "memory": memory_change(c["before"], c["after"])}
        if c["target_kind"] == "entity_memory"
        else c
        for c in data["changes"]
    ]
    context = {"diff": data, "changes": changes, "current_turn": current}
    return respond(request, "worlds_app/world_diff.html", context, data)


def _narrations(
    slug: str, origin: dict[str, Any] | None, numbers: list[int]
) -> dict[int, list[dict[str, Any]]]:
    """A world's narrations of some turns; a branch's turns before its branch point are its
    parent's (one query more, for a branch only)."""
    told = indexes.turn_narrations(slug=slug, numbers=numbers)
    if origin is not None:
        earlier = [n for n in numbers if n < origin["turn"]]
        if earlier:
            told.update(indexes.turn_narrations(slug=origin["world"], numbers=earlier))
    return told


@page
@require_http_methods(["GET", "HEAD"])
def world_compare_page(request: HttpRequest, slug: str, other: str) -> HttpResponse:
    """Two worlds turn by turn (the API's comparison, paged the same way)."""
    data = world_compare(slug=slug, other=other, params=request.GET)
    limit, offset, count = data["limit"], data["offset"], data["count"]
    numbers = [t["number"] for t in data["turns"]]
    left = _narrations(data["world"], data["world_branched_from"], numbers)
    right = _narrations(data["other"], data["other_branched_from"], numbers)
    turns = [
        {
            **t,
            "left_narrations": left.get(t["number"], []),
            "right_narrations": right.get(t["number"], []),
        }
        for t in data["turns"]
    ]
    metrics = [
        {
            **m,
            "world_text": value_text(m["world_value"]),
            "other_text": value_text(m["other_value"]),
            "turns": [
                {
                    **t,
                    "world_text": t["world_error"] or value_text(t["world"]),
                    "other_text": t["other_error"] or value_text(t["other"]),
                }
                for t in m["turns"]
            ],
        }
        for m in data["metrics"]
    ]
    context = {
        "cmp": data,
        "metrics": metrics,
        "turns": turns,
        "prev_offset": max(offset - limit, 0) if offset > 0 else None,
        "next_offset": offset + limit if offset + limit < count else None,
    }
    return respond(request, "worlds_app/world_compare.html", context, data)
