"""World, turn, diff, comparison and attempt-timeline pages (HTML + HTMX, every page also
?format=json)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from chukwa_core.errors import ChukwaError, NotFoundError
from surfaces.pages.layout import (
    appended_line,
    environments,
    memory_change,
    page_links,
    page_offset,
)
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.permissions import is_operator
from worlds_app import indexes, selectors
from worlds_app.comparison import world_compare
from worlds_app.models import PatchTransition
from worlds_app.services import turn_attempt_enqueue


class HtmxHttpRequest(HttpRequest):
    """A request after django-htmx's middleware (typing only)."""

    htmx: HtmxDetails


FINISHED = ("committed", "failed", "interrupted", "cancelled")
TURNS_PER_PAGE = 20
ATTEMPTS_PER_PAGE = 15
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
    active = bool(data["attempts_queued"] or data["attempts_running"])
    queue_url = request.path
    if attempt_offset:
        queue_url += f"?attempt_offset={attempt_offset}"
    context = {
        "world": data,
        "environments": environments(data["state"]),
        "turns": turns["results"],
        "turn_pages": page_links(
            request, "turn_offset", count=turns["count"], limit=TURNS_PER_PAGE, offset=turn_offset
        ),
        "attempts": attempts["results"],
        "attempt_pages": page_links(
            request,
            "attempt_offset",
            count=attempts["count"],
            limit=ATTEMPTS_PER_PAGE,
            offset=attempt_offset,
        ),
        "queue_url": queue_url,
        "queue_active": active,
        "compare_with": indexes.world_neighbours(slug=slug, limit=COMPARE_CHOICES),
        "is_operator": is_operator(request.user),
    }
    return context, data


@page
@require_http_methods(["GET", "HEAD"])
def world_detail_page(request: HttpRequest, slug: str) -> HttpResponse:
    context, data = _world_context(request, slug)
    return respond(
        request, "worlds_app/world_detail.html", context, data, partial="worlds_app/_queue.html"
    )


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
    links: dict[tuple[int, int], dict[str, Any]] = {
        (t["patch_seq"], t["effect_index"]): dict(t)
        for t in PatchTransition.objects.filter(world__slug=slug, turn_number=number).values(
            "patch_seq", "effect_index", "llm_call_id", "invocation_id"
        )
    }
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
    context = {
        "turn": data,
        "transitions": rows,
        "environments": environments(data["state"]),
        "prev": number - 1 if number > 0 else None,
        "next": number + 1 if number < selectors.world_current_turn(slug=slug) else None,
        "annotations_url": reverse("page-annotations-on-turn", args=[slug, number]),
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


@page
@require_http_methods(["GET", "HEAD"])
def world_compare_page(request: HttpRequest, slug: str, other: str) -> HttpResponse:
    """Two worlds turn by turn (the API's comparison, paged the same way)."""
    data = world_compare(slug=slug, other=other, params=request.GET)
    limit, offset, count = data["limit"], data["offset"], data["count"]
    numbers = [t["number"] for t in data["turns"]]
    left = indexes.turn_narrations(slug=data["world"], numbers=numbers)
    right = indexes.turn_narrations(slug=data["other"], numbers=numbers)
    turns = [
        {
            **t,
            "left_narrations": left.get(t["number"], []),
            "right_narrations": right.get(t["number"], []),
        }
        for t in data["turns"]
    ]
    context = {
        "cmp": data,
        "turns": turns,
        "prev_offset": max(offset - limit, 0) if offset > 0 else None,
        "next_offset": offset + limit if offset + limit < count else None,
    }
    return respond(request, "worlds_app/world_compare.html", context, data)


def _offset_ms(moment: datetime | None, start: datetime) -> float:
    return 0.0 if moment is None else max((moment - start).total_seconds() * 1000, 0.0)


def _timeline(data: dict[str, Any]) -> dict[str, Any]:
    """Waterfall rows for the attempt: invocations (tool calls nested under their generation)
    and the patch / commit / failure markers, positioned relative to the attempt start."""
    now = timezone.now()
    start = data["started_at"] or data["queued_at"]
    end = data["ended_at"] or now
    invocations = data["source_invocations"]
    for inv in invocations:
        if inv["ended_at"] and inv["ended_at"] > end:
            end = inv["ended_at"]
    total = max(_offset_ms(end, start), 1.0)
    rejections = {
        e["invocation_id"]: e["payload"].get("rejection", "")
        for e in data["events"]
        if e["kind"] == "generation_rejected"
    }
    rows: list[dict[str, Any]] = []
    for inv in invocations:
        offset = _offset_ms(inv["started_at"], start)
        duration = inv["duration_ms"]
        if duration is None:
            duration = _offset_ms(inv["ended_at"] or now, inv["started_at"])
        if inv["kind"] == "llm_generation":
            label = f"{inv['node_id']} · generation {inv['generation_attempt'] or 1}"
            if inv["tool_loop_round"]:
                label += f" · round {inv['tool_loop_round']}"
        elif inv["kind"] == "model_elected_tool":
            label = f"tool {inv['tool_name']}"
        elif inv["kind"] == "conformance_check":
            label = f"{inv['node_id']} · conformance check of {inv['source_label']}"
        else:
            label = f"ambient {inv['ambient_source_id'] or inv['source_label']}"
        rejected = inv["id"] in rejections
        rows.append(
            {
                "type": "invocation",
                "kind": inv["kind"],
                "label": label,
                "subject_id": inv["subject_id"],
                "depth": 1 if inv["parent_id"] else 0,
                "status": "rejected" if rejected else inv["status"],
                "rejection": rejections.get(inv["id"], ""),
                "failure": inv["failure_message"],
                "offset_ms": round(offset),
                "duration_ms": round(duration),
                "left": offset / total * 100,
                "width": max(duration / total * 100, 0.4),
                "tokens": (inv["prompt_tokens"], inv["completion_tokens"]),
                "cost": inv["cost"],
                "cost_estimated": inv["cost_estimated"],
                "ttft_ms": inv["ttft_ms"],
                "invocation_id": inv["id"],
                "llm_call_id": inv["llm_call_id"],
                "output_kind": inv["model_output_kind"],
                "sort": (offset, inv["seq"]),
            }
        )
    markers = {"world_patch_applied", "turn_committed", "attempt_failed", "inner_monologue"}
    markers |= {"attempt_interrupted", "attempt_cancelled", "effect_contested"}
    for event in data["events"]:
        if event["kind"] not in markers:
            continue
        offset = _offset_ms(event["created_at"], start)
        payload = event["payload"]
        if event["kind"] == "world_patch_applied":
            # provisional until the turn commits; never shown as applied when it did not
            label = {
                "committed": f"patch #{event['patch_seq']} applied",
                "provisional": f"patch #{event['patch_seq']} applied (provisional)",
            }.get(event["commit_state"], f"patch #{event['patch_seq']} not committed")
            note = payload.get("patch", {}).get("narration", "")
        elif event["kind"] == "effect_contested":
            overridden = payload.get("overridden", {})
            label = f"{payload.get('target_id')} contested"
            note = (
                f"patch #{event['patch_seq']} ({event['subject_id']}) overrides patch "
                f"#{overridden.get('patch_seq')} ({overridden.get('subject_id')})"
            )
        elif event["kind"] == "inner_monologue":
            label = f"{event['node_id']} · rule policy"
            note = f"matched rule {payload.get('matched_rule')}: {payload.get('intent', '')}"
        elif event["kind"] == "turn_committed":
            label, note = "turn committed", f"turn {data['produced_turn']}"
        else:
            label = event["kind"].replace("_", " ")
            note = payload.get("reason", "")
        rows.append(
            {
                "type": "marker",
                "kind": event["kind"],
                "commit_badge": {
                    "provisional": "provisional",
                    "not_committed": "not committed",
                }.get(event["commit_state"] or ""),
                "label": label,
                "subject_id": event["subject_id"],
                "depth": 0,
                "note": note,
                "offset_ms": round(offset),
                "left": min(offset / total * 100, 99.6),
                "llm_call_id": event["llm_call_id"],
                "invocation_id": event["invocation_id"],
                "sort": (offset, 10**9 + event["seq"]),
            }
        )
    rows.sort(key=lambda r: r["sort"])
    # Tool calls sit directly under the generation that asked for them.
    children: dict[Any, list[dict[str, Any]]] = {}
    parents = {inv["id"]: inv["parent_id"] for inv in invocations}
    top: list[dict[str, Any]] = []
    for row in rows:
        parent = parents.get(row.get("invocation_id")) if row["type"] == "invocation" else None
        (children.setdefault(parent, []) if parent else top).append(row)
    ordered: list[dict[str, Any]] = []
    for row in top:
        ordered.append(row)
        if row["type"] == "invocation":
            ordered.extend(children.pop(row["invocation_id"], []))
    for orphans in children.values():
        ordered.extend(orphans)
    for row in ordered:
        del row["sort"]
    ticks = [{"left": i * 25, "ms": round(total * i / 4)} for i in range(5)]
    return {"rows": ordered, "total_ms": round(total), "ticks": ticks}


@page
def attempt_page(request: HttpRequest, attempt_id: str) -> HttpResponse:
    data = selectors.attempt_get(attempt_id=attempt_id)
    timeline = _timeline(data)
    generations = [i for i in data["source_invocations"] if i["kind"] == "llm_generation"]
    context = {
        "attempt": data,
        "timeline": timeline,
        "finished": data["status"] in FINISHED,
        "url": reverse("page-attempt", args=[data["id"]]),
        "stats": {
            "invocations": len(data["source_invocations"]),
            "generations": len(generations),
            "retries": sum(1 for e in data["events"] if e["kind"] == "generation_rejected"),
            "prompt_tokens": sum(i["prompt_tokens"] or 0 for i in generations),
            "completion_tokens": sum(i["completion_tokens"] or 0 for i in generations),
        },
    }
    return respond(
        request,
        "worlds_app/attempt_detail.html",
        context,
        {**data, "timeline": timeline["rows"]},
        partial="worlds_app/_timeline.html",
    )
