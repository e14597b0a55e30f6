"""World, turn and provenance pages (HTML + HTMX, every page also ?format=json)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from chukwa_core.errors import ChukwaError, NotFoundError
from cognition_app.selectors import cost_totals_by_turn
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.permissions import is_operator
from worlds_app import selectors
from worlds_app.comparison import world_compare
from worlds_app.models import ACTIVE_STATUSES, AttemptEvent, PatchTransition, Turn, World
from worlds_app.services import turn_attempt_enqueue


class HtmxHttpRequest(HttpRequest):
    """A request after django-htmx's middleware (typing only)."""

    htmx: HtmxDetails


TURN_HISTORY = 50


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


def _turn_history(world: World) -> list[dict[str, Any]]:
    """The newest committed turns with their narrations and costs: three queries whatever the
    history length."""
    turns: list[dict[str, Any]] = [
        dict(t)
        for t in Turn.objects.filter(world=world)
        .order_by("-number")
        .values("number", "simulation_time", "attempt_id", "state_hash")[:TURN_HISTORY]
    ]
    narrations: dict[Any, list[dict[str, Any]]] = {}
    events = AttemptEvent.objects.filter(
        attempt_id__in=[t["attempt_id"] for t in turns if t["attempt_id"]],
        kind="world_patch_applied",
    ).order_by("seq")
    for attempt_id, subject, payload in events.values_list("attempt_id", "subject_id", "payload"):
        narrations.setdefault(attempt_id, []).append(
            {"subject_id": subject, "narration": payload.get("patch", {}).get("narration", "")}
        )
    costs = cost_totals_by_turn(world_id=world.pk)  # one query, every turn
    for turn in turns:
        turn["narrations"] = narrations.get(turn["attempt_id"], [])
        turn["cost"] = costs.get(turn["number"])
    return turns


def _environments(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each environment with its text and the entities placed in it."""
    envs = [
        {"label": label, "content": text, "entities": []}
        for label, text in sorted(state.get("environments", {}).items())
    ]
    by_label = {e["label"]: e for e in envs}
    for entity in state.get("entities", []):
        kind = entity.get("kind")
        row = {
            "id": entity["id"],
            "name": entity.get("name", entity["id"]),
            "state": entity.get("state", ""),
            "is_agent": isinstance(kind, dict),
            "memory": kind.get("agent", {}).get("memory", []) if isinstance(kind, dict) else [],
        }
        target = by_label.get(entity.get("environment", ""))
        if target is not None:
            target["entities"].append(row)
    return envs


def _world_context(request: HttpRequest, slug: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data = selectors.world_get(slug=slug)
    world = World.objects.get(slug=slug)
    data["turns"] = _turn_history(world)
    active = any(a["status"] in ACTIVE_STATUSES for a in data["recent_attempts"])
    context = {
        "world": data,
        "environments": _environments(data["state"]),
        "turns": data["turns"],
        "attempts": data["recent_attempts"],
        "queue_active": active,
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
    context = {
        "turn": data,
        "environments": _environments(data["state"]),
        "prev": number - 1 if number > 0 else None,
    }
    return respond(request, "worlds_app/turn_detail.html", context, data)


@page
def world_diff_page(request: HttpRequest, slug: str) -> HttpResponse:
    current = selectors.world_get(slug=slug)["current_turn"]
    try:
        to_turn = int(request.GET.get("to", current))
        from_turn = int(request.GET.get("from", max(to_turn - 1, 0)))
    except ValueError:
        raise ChukwaError("invalid_query", "from/to: must be integers") from None
    data = selectors.world_diff(slug=slug, from_turn=from_turn, to_turn=to_turn)
    context = {"diff": data, "current_turn": current, "turn_numbers": range(current + 1)}
    return respond(request, "worlds_app/world_diff.html", context, data)


@page
@require_http_methods(["GET", "HEAD"])
def world_compare_page(request: HttpRequest, slug: str, other: str) -> HttpResponse:
    """Two worlds turn by turn (the API's comparison, paged the same way)."""
    data = world_compare(slug=slug, other=other, params=request.GET)
    limit, offset, count = data["limit"], data["offset"], data["count"]
    context = {
        "cmp": data,
        "prev_offset": max(offset - limit, 0) if offset > 0 else None,
        "next_offset": offset + limit if offset + limit < count else None,
    }
    return respond(request, "worlds_app/world_compare.html", context, data)


def _provenance(slug: str, kinds: tuple[str, ...], target_id: str) -> list[dict[str, Any]]:
    """Every change to one value, oldest first, with what decided it: an LLM call or a rule."""
    rows: list[dict[str, Any]] = [
        dict(r)
        for r in PatchTransition.objects.filter(
            world__slug=slug, target_kind__in=kinds, target_id=target_id
        )
        .order_by("turn_number", "patch_seq", "effect_index")
        .values(
            "turn_number",
            "patch_seq",
            "effect_index",
            "subject_id",
            "node_id",
            "op",
            "target_kind",
            "before",
            "after",
            "attempt_id",
            "llm_call_id",
            "invocation_id",
        )
    ]
    rule_attempts = {r["attempt_id"] for r in rows if not r["llm_call_id"]}
    monologues: dict[tuple[Any, str, str], dict[str, Any]] = {}
    for attempt_id, subject, node, payload in AttemptEvent.objects.filter(
        attempt_id__in=rule_attempts, kind="inner_monologue"
    ).values_list("attempt_id", "subject_id", "node_id", "payload"):
        monologues[(attempt_id, subject, node)] = payload
    narrations: dict[tuple[Any, int | None], str] = {
        (a, seq): p.get("patch", {}).get("narration", "")
        for a, seq, p in AttemptEvent.objects.filter(
            attempt_id__in={r["attempt_id"] for r in rows}, kind="world_patch_applied"
        ).values_list("attempt_id", "patch_seq", "payload")
    }
    for row in rows:
        row["narration"] = narrations.get((row["attempt_id"], row["patch_seq"]), "")
        monologue = monologues.get((row["attempt_id"], row["subject_id"], row["node_id"]))
        row["decided_by"] = (
            {"llm_call_id": row["llm_call_id"]}
            if row["llm_call_id"]
            else {
                "rule_policy": True,
                "matched_rule": monologue.get("matched_rule") if monologue else None,
                "intent": monologue.get("intent") if monologue else None,
            }
        )
    return rows


@page
def entity_page(request: HttpRequest, slug: str, entity_id: str) -> HttpResponse:
    world = selectors.world_get(slug=slug)
    entity = next((e for e in world["state"]["entities"] if e["id"] == entity_id), None)
    if entity is None:
        raise NotFoundError(
            "entity_not_found", f"entity_id: world {slug!r} has no entity {entity_id!r}"
        )
    history = _provenance(slug, ("entity_state", "entity_memory"), entity_id)
    data = {"world": slug, "entity": entity, "history": history}
    context: dict[str, Any] = {
        "world": world,
        "title": entity.get("name", entity_id),
        "kind": "Entity",
    }
    context.update(target_id=entity_id, current=entity.get("state", ""), history=history)
    return respond(request, "worlds_app/provenance.html", context, data)


@page
def environment_page(request: HttpRequest, slug: str, label: str) -> HttpResponse:
    world = selectors.world_get(slug=slug)
    environments = world["state"]["environments"]
    if label not in environments:
        raise NotFoundError(
            "environment_not_found", f"label: world {slug!r} has no environment {label!r}"
        )
    history = _provenance(slug, ("environment",), label)
    data = {"world": slug, "label": label, "content": environments[label], "history": history}
    context: dict[str, Any] = {"world": world, "title": label, "kind": "Environment"}
    context.update(target_id=label, current=environments[label], history=history)
    return respond(request, "worlds_app/provenance.html", context, data)
