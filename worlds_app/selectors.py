"""Reads for worlds, turns and attempts."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import Q, QuerySet

from chukwa_core.component_validation import type_name
from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import is_hash, label_problem
from cognition_app.budgets import BudgetLimits
from cognition_app.selectors import cost_totals_from_row
from cognition_app.sources.components import source_content
from scenarios_app.selectors import parse_paging, scenario_names_of
from worlds_app import read_sql
from worlds_app.models import (
    ACTIVE_STATUSES,
    Annotation,
    AnnotationTarget,
    AttemptStatus,
    Intervention,
    PatchTransition,
    Turn,
    World,
    WorldBudget,
)

# An attempt in one of these statuses has ended (every other is queued or running): the one
# definition pages and the API show.
FINISHED_STATUSES = tuple(s.value for s in AttemptStatus if s not in ACTIVE_STATUSES)
RETRYABLE_STATUSES = (AttemptStatus.FAILED.value, AttemptStatus.INTERRUPTED.value)

# Turn numbers are stored as PostgreSQL integer; a larger one names no turn and must not reach
# the database as an out-of-range parameter.
MAX_TURN_NUMBER = 2_147_483_647


def require_slug(slug: str, field: str = "slug") -> str:
    """A world slug from a path or a form, checked against the label grammar."""
    problem = label_problem(slug)
    if problem is not None:
        shown = repr(slug) if len(slug) <= 64 else f"{slug[:64]!r}…"
        raise invalid("invalid_slug", field, f"{shown} {problem}")
    return slug


def require_turn_number(number: int, field: str = "number") -> int:
    """A negative turn number is a bad form (400); one past the column's range is well formed
    but names no turn that can exist (404), like any other turn not committed yet."""
    if number < 0:
        raise invalid("invalid_turn", field, f"must be a turn number ≥ 0, got {number}")
    if number > MAX_TURN_NUMBER:
        raise NotFoundError(
            "turn_not_found",
            f"{field}: no turn {number}; turn numbers stop at {MAX_TURN_NUMBER}",
            {"field": field},
        )
    return number


def _world(slug: str) -> World:
    require_slug(slug)
    world = World.objects.filter(slug=slug).first()
    if world is None:
        raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
    return world


def world_row(slug: str) -> World:
    """The world of a slug (checked), or 404."""
    return _world(slug)


def world_summary(row: Mapping[str, Any]) -> dict[str, Any]:
    """A world as lists show it, from a ``read_sql`` summary row."""
    return {
        "slug": row["slug"],
        "name": row["name"],
        "label": row["label"],
        "scenario_hash": row["scenario_id"],
        "scenario_ref": row["scenario_ref"],
        "replay_from": row["replay_from"],
        "seed": row["seed"],
        "reuse": row["reuse"],
        "branched_from": (
            {"world": row["branched_from_slug"], "turn": row["branched_from_turn"]}
            if row["branched_from_turn"] is not None
            else None
        ),
        "experiment": row["experiment_slug"],
        "arm": row["arm"] or None,
        "replicate": row["replicate"],
        "chronon_seconds": row["chronon_seconds"],
        "current_turn": row["current_turn"],
        "created_at": row["created_at"],
        "attempts_queued": row["queued"],
        "attempts_running": row["running"],
        # the newest finished attempt's outcome, so a world whose last attempt failed never
        # reads as plain "idle"
        "last_attempt": (
            {
                "id": row["last_id"],
                "seq": row["last_seq"],
                "status": row["last_status"],
                "ended_at": row["last_ended_at"],
            }
            if row["last_id"]
            else None
        ),
    }


def world_list(*, params: Mapping[str, Any]) -> dict[str, Any]:
    """Worlds newest first, optionally only those of one scenario (``scenario=<hash>``)."""
    limit, offset = parse_paging(params)
    scenario = params.get("scenario") or None
    if scenario and not is_hash(scenario):
        raise invalid("invalid_hash", "scenario", f"{scenario!r} is not a lowercase sha256 hex")
    rows = read_sql.world_page(scenario=scenario, limit=limit, offset=offset)
    # Counted by the page's own statement, unless the page is empty
    if rows:
        count = rows[0]["total"]
    else:
        count = read_sql.world_count(scenario=scenario) if offset else 0
    results = [world_summary(row) for row in rows]
    names = scenario_names_of(hashes=[w["scenario_hash"] for w in results])
    for world in results:
        world["scenario_names"] = names.get(world["scenario_hash"], [])
    return {"count": count, "limit": limit, "offset": offset, "results": results}


BUDGET_LIMITS = ("max_tokens_per_turn", "max_cost_per_turn", "max_tokens_total", "max_cost_total")


def world_budget_limits(*, world_id: int) -> BudgetLimits | None:
    """The budget in force (the newest row), as the cognition layer checks it; None if none."""
    row = WorldBudget.objects.filter(world_id=world_id).order_by("-set_at", "-id").first()
    return None if row is None else budget_limits_of(row)


def budget_limits_of(row: WorldBudget) -> BudgetLimits | None:
    """A budget row's limits as the cognition layer checks them; None if it sets none."""
    limits = BudgetLimits(**{name: getattr(row, name) for name in BUDGET_LIMITS})
    return None if limits.is_empty() else limits


def world_budget_history(*, world_id: int) -> list[dict[str, Any]]:
    """Every budget setting of a world, newest (the one in force) first."""
    return list(
        WorldBudget.objects.filter(world_id=world_id)
        .order_by("-set_at", "-id")
        .values(*BUDGET_LIMITS, "set_at", "set_by")
    )


def world_budget_get(*, slug: str) -> dict[str, Any]:
    world = _world(slug)
    history = world_budget_history(world_id=world.pk)
    return {
        "world": world.slug,
        "budget": {k: history[0][k] for k in BUDGET_LIMITS} if history else None,
        "history": history,
    }


def world_get(*, slug: str) -> dict[str, Any]:
    require_slug(slug)
    row = read_sql.world_detail(slug=slug)
    if row is None:
        raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
    if row["turn_id"] is None:  # a world always has its current turn
        raise Turn.DoesNotExist(f"world {slug!r} has no turn {row['current_turn']}")
    summary = world_summary(row)
    names = scenario_names_of(hashes=[summary["scenario_hash"]])
    return {
        **summary,
        "scenario_names": names.get(summary["scenario_hash"], []),
        "simulation_time": row["simulation_time"],
        "state": row["state"],
        "state_hash": row["state_hash"],
        "scenario_snapshot": row["scenario_snapshot"],
        "recent_attempts": read_sql.recent_attempts(world_id=row["id"]),
        "budget": (
            {name: row[name] for name in BUDGET_LIMITS} if row["budget_id"] is not None else None
        ),
        "cost": cost_totals_from_row(row, "cost_"),
        "warnings": seed_warnings(row["scenario_snapshot"]) if row["seed"] is not None else [],
        "measured_metrics": row["measured_metrics"],
    }


def workflow_llm_sources(workflow: Mapping[str, Any]) -> list[str]:
    """The hashes of the LLM sources a stored workflow's nodes call, in node order."""
    return [
        node["llm_source_ref"]["hash"]
        for node in workflow["nodes"]
        if isinstance(node.get("llm_source_ref"), dict) and "hash" in node["llm_source_ref"]
    ]


def seed_warnings(snapshot: Mapping[str, Any]) -> list[dict[str, str]]:
    """The LLM sources of a seeded world whose params fix a seed: their calls send that seed,
    not one derived from the world's, so the world's seed does not vary them."""
    warnings: list[dict[str, str]] = []
    seen: set[str] = set()
    for profile in snapshot["cognition_profiles"].values():
        for source_hash in workflow_llm_sources(profile["workflow"]):
            if source_hash in seen:
                continue
            seen.add(source_hash)
            content = source_content(source_hash)
            params = content["interface"].get("params", {})
            if content["interface"]["name"] == "llm_chat_completions" and "seed" in params:
                warnings.append(
                    {
                        "code": "source_seed_fixed",
                        "message": f"source {content['label']!r} ({source_hash[:12]}) fixes "
                        f"seed {params['seed']} in its params: its calls send that seed, not "
                        "one derived from the world's, so worlds of other seeds repeat them",
                        "source_hash": source_hash,
                    }
                )
    return warnings


def _refuse_before_branch(slug: str, number: int) -> None:
    """404 ``before_branch`` for a turn a branch never had: it is its parent's."""
    branch = (
        World.objects.filter(slug=slug, branched_from_turn__gt=number)
        .values("branched_from_slug", "branched_from_turn")
        .first()
    )
    if branch is not None:
        parent, start = branch["branched_from_slug"], branch["branched_from_turn"]
        raise NotFoundError(
            "before_branch",
            f"number: world {slug!r} is a branch of {parent!r} from turn {start}; turn {number} "
            f"is {parent!r}'s (GET /api/worlds/{parent}/turns/{number}/)",
            {"field": "number", "parent": parent, "branched_at": start},
        )


def turn_get(*, slug: str, number: int) -> dict[str, Any]:
    require_slug(slug)
    require_turn_number(number)
    row = read_sql.turn(slug=slug, number=number)
    if row is None:
        raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
    if row["turn_id"] is None:
        _refuse_before_branch(slug, number)
        raise NotFoundError(
            "turn_not_found",
            f"number: world {slug!r} has no committed turn {number} (current: {row['current_turn']})",
            {"field": "number"},
        )
    return {
        "world": slug,
        "number": row["number"],
        "simulation_time": row["simulation_time"],
        "state": row["state"],
        "state_hash": row["state_hash"],
        "attempt_id": row["attempt_id"],
        "created_at": row["created_at"],
        "cost": cost_totals_from_row(row, "cost_"),
        "patches": [
            {
                "subject_id": s,
                "patch_seq": seq,
                "narration": p["patch"]["narration"],
                "patch": p["patch"],
                # an operator's intervention (patch_seq 1, no subject): who and why
                "intervention": p.get("intervention"),
            }
            for s, seq, p in row["narrations"]
        ],
        "transitions": row["transitions"],
    }


# Events that describe the turn's change, real only once the turn is committed.
PROVISIONAL_EVENTS = frozenset({"world_patch_applied", "effect_contested"})


def _commit_state(status: str) -> str:
    """What a patch event of an attempt in ``status`` is worth: ``provisional`` while the
    attempt runs, ``committed`` with its turn, ``not_committed`` when it failed, was
    interrupted or cancelled (its world never saw the patch)."""
    if status == AttemptStatus.COMMITTED:
        return "committed"
    if status in ACTIVE_STATUSES:
        return "provisional"
    return "not_committed"


def attempt_get(
    *, attempt_id: str, events_after: int = 0, events_limit: int | None = None
) -> dict[str, Any]:
    """The attempt, its events numbered above ``events_after`` (at most ``events_limit``; all
    by default), its calls and cost. ``events_next_after`` is the number to ask from next when
    the limit left events out, else None."""
    if not _is_uuid(attempt_id):
        raise invalid("invalid_id", "attempt_id", f"{attempt_id!r} is not a UUID")
    attempt = read_sql.attempt(attempt_id=uuid.UUID(attempt_id))
    if attempt is None:
        raise NotFoundError(
            "attempt_not_found", f"attempt_id: no attempt {attempt_id}", {"field": "attempt_id"}
        )
    state = _commit_state(attempt["status"])
    rows = read_sql.attempt_events(
        attempt_id=attempt["id"],
        after=events_after,
        limit=None if events_limit is None else events_limit + 1,  # one more: are there more?
    )
    more = events_limit is not None and len(rows) > events_limit
    if more:
        del rows[events_limit:]
    events: list[dict[str, Any]] = [
        {**event, "commit_state": state if event["kind"] in PROVISIONAL_EVENTS else None}
        for event in rows
    ]
    from cognition_app.selectors import invocation_summaries

    invocations = invocation_summaries(attempt_id=attempt["id"])
    return {
        "id": str(attempt["id"]),
        "world": attempt["world_slug"],
        "seq": attempt["seq"],
        "batch_id": str(attempt["batch_id"]),
        "batch_index": attempt["batch_index"],
        "batch_size": attempt["batch_size"],
        "status": attempt["status"],
        "attempted_turn": attempt["attempted_turn"],
        "produced_turn": attempt["produced_turn"],
        "lease_owner": attempt["lease_owner"],
        "lease_expires_at": attempt["lease_expires_at"],
        "queued_at": attempt["queued_at"],
        "started_at": attempt["started_at"],
        "ended_at": attempt["ended_at"],
        "duration_ms": attempt["duration_ms"],
        "waiting_for": attempt["waiting_for"] if attempt["status"] == AttemptStatus.RUNNING else "",
        "failure": (
            {
                "step": attempt["failure_step"],
                "subject_id": attempt["failure_subject"],
                "reason": attempt["failure_reason"],
            }
            if attempt["failure_reason"]
            else None
        ),
        "events": events,
        "events_next_after": events[-1]["seq"] if more else None,
        "source_invocations": invocations,
        "cost": cost_totals_from_row(attempt, "cost_"),
    }


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def world_current_turn(*, slug: str) -> int:
    return _world(slug).current_turn


def world_diff(*, slug: str, from_turn: int, to_turn: int) -> dict[str, Any]:
    """What changed between two committed turns: entity states and memories, environments."""
    require_slug(slug)
    require_turn_number(from_turn, "from")
    require_turn_number(to_turn, "to")
    world = _world(slug)
    turns = {t.number: t for t in Turn.objects.filter(world=world, number__in=[from_turn, to_turn])}
    for number, field in ((from_turn, "from"), (to_turn, "to")):
        if number not in turns:
            raise NotFoundError(
                "turn_not_found",
                f"{field}: world {slug!r} has no committed turn {number} (current: {world.current_turn})",
                {"field": field},
            )
    before, after = turns[from_turn].state, turns[to_turn].state
    old_entities = {e["id"]: e for e in before["entities"]}
    changes: list[dict[str, Any]] = []
    for entity in after["entities"]:
        old = old_entities.get(entity["id"])
        if old is None:
            continue
        if old["state"] != entity["state"]:
            changes.append(
                {
                    "target_kind": "entity_state",
                    "target_id": entity["id"],
                    "before": old["state"],
                    "after": entity["state"],
                }
            )
        if isinstance(entity["kind"], dict):
            old_memory = old["kind"]["agent"]["memory"]
            new_memory = entity["kind"]["agent"]["memory"]
            if old_memory != new_memory:
                changes.append(
                    {
                        "target_kind": "entity_memory",
                        "target_id": entity["id"],
                        "before": old_memory,
                        "after": new_memory,
                    }
                )
    for label, text in after["environments"].items():
        if before["environments"].get(label) != text:
            changes.append(
                {
                    "target_kind": "environment",
                    "target_id": label,
                    "before": before["environments"].get(label),
                    "after": text,
                }
            )
    return {"world": slug, "from": from_turn, "to": to_turn, "changes": changes}


# --- annotations ----------------------------------------------------------------

ANNOTATION_FILTERS = (
    "name",
    "value",
    "target_kind",
    "attempt",
    "llm_call",
    "world",
    "turn",
    "author",
)


def parse_uuid(value: Any, field: str) -> uuid.UUID:
    if not isinstance(value, str):
        raise invalid("invalid_id", field, f"must be a UUID string, got {type_name(value)}")
    try:
        return uuid.UUID(value)
    except ValueError:
        shown = repr(value) if len(value) <= 64 else f"{value[:64]!r}…"
        raise invalid("invalid_id", field, f"{shown} is not a UUID") from None


def annotation_not_found(annotation_id: uuid.UUID) -> NotFoundError:
    return NotFoundError(
        "annotation_not_found",
        f"annotation_id: no annotation {annotation_id}",
        {"field": "annotation_id"},
    )


def _annotations() -> QuerySet[Annotation]:
    return Annotation.objects.select_related("author", "turn__world")


def annotation_summary(annotation: Annotation) -> dict[str, Any]:
    turn = annotation.turn
    return {
        "id": annotation.id,
        "target": {
            "kind": annotation.target_kind,
            "attempt": annotation.attempt_id,
            "turn": {"world": turn.world.slug, "number": turn.number} if turn else None,
            "llm_call": annotation.llm_call_id,
        },
        "name": annotation.name,
        "value_kind": annotation.value_kind,
        "value": annotation.value,
        "comment": annotation.comment,
        "author": annotation.author.get_username(),
        "created_at": annotation.created_at,
        "updated_at": annotation.updated_at,
    }


def annotation_row(*, annotation_id: str) -> Annotation:
    """The annotation itself (for the caller's author-or-operator check); 404 if none."""
    pk = parse_uuid(annotation_id, "annotation_id")
    annotation = _annotations().filter(pk=pk).first()
    if annotation is None:
        raise annotation_not_found(pk)
    return annotation


def annotation_get(*, annotation_id: str) -> dict[str, Any]:
    return annotation_summary(annotation_row(annotation_id=annotation_id))


def _value_filter(raw: str) -> Q:
    """``value=`` matches whichever kinds the text can be: a label, a number, a boolean."""
    condition = Q(value_kind="label", value_label=raw)
    if raw in ("true", "false"):
        condition |= Q(value_kind="boolean", value_boolean=raw == "true")
    try:
        number = float(raw)
    except ValueError:
        number = math.nan
    if math.isfinite(number):
        condition |= Q(value_kind="number", value_number=number)
    return condition


def annotation_list(*, params: Mapping[str, Any]) -> dict[str, Any]:
    """Annotations newest first, filtered by ``name``, ``value``, ``target_kind``, a target
    (``attempt``, ``llm_call``, ``world`` and optionally ``turn``) and ``author``."""
    limit, offset = parse_paging(params)
    for key in ANNOTATION_FILTERS:
        if "\x00" in str(params.get(key) or ""):
            raise invalid("invalid_query", key, "contains U+0000")
    unknown = sorted(
        k for k in params if k not in (*ANNOTATION_FILTERS, "limit", "offset", "format")
    )
    if unknown:
        raise invalid(
            "invalid_query",
            unknown[0],
            f"unknown filter; known: {', '.join(ANNOTATION_FILTERS)}, limit, offset",
        )
    qs = _annotations()
    if params.get("name"):
        name = params["name"]
        problem = label_problem(name)
        if problem is not None:
            raise invalid("invalid_query", "name", f"{name[:64]!r} {problem}")
        qs = qs.filter(name=name)
    if params.get("value"):
        qs = qs.filter(_value_filter(params["value"]))
    if params.get("target_kind"):
        kind = params["target_kind"]
        if kind not in AnnotationTarget.values:
            raise invalid(
                "invalid_query",
                "target_kind",
                f"{kind[:64]!r} is not one of {', '.join(AnnotationTarget.values)}",
            )
        qs = qs.filter(target_kind=kind)
    if params.get("attempt"):
        qs = qs.filter(attempt_id=parse_uuid(params["attempt"], "attempt"))
    if params.get("llm_call"):
        qs = qs.filter(llm_call_id=parse_uuid(params["llm_call"], "llm_call"))
    if params.get("world"):
        qs = qs.filter(turn__world__slug=require_slug(params["world"], "world"))
    if params.get("turn"):
        if not params.get("world"):
            raise invalid("invalid_query", "turn", "needs world (turn numbers are per world)")
        try:
            number = int(params["turn"])
        except ValueError:
            raise invalid(
                "invalid_query", "turn", f"must be an integer, got {params['turn']!r}"
            ) from None
        if not 0 <= number <= MAX_TURN_NUMBER:
            raise invalid("invalid_query", "turn", f"must be 0…{MAX_TURN_NUMBER}, got {number}")
        qs = qs.filter(turn__number=number)
    if params.get("author"):
        qs = qs.filter(author__username=params["author"])
    rows = qs.order_by("-created_at", "id")
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "results": [annotation_summary(a) for a in rows[offset : offset + limit]],
    }


def intervention_row(intervention: Intervention) -> dict[str, Any]:
    return {
        "id": intervention.pk,
        "world": intervention.world.slug,
        "turn": intervention.turn,
        "patch": intervention.patch,
        "note": intervention.note,
        "created_by": intervention.created_by,
        "created_at": intervention.created_at,
        "status": "consumed" if intervention.consumed else "pending",
        "consumed_by_attempt": intervention.consumed_by_id,
        "consumed_at": intervention.consumed_at,
    }


def intervention_list(*, slug: str) -> list[dict[str, Any]]:
    """A world's interventions in turn order, pending and consumed."""
    require_slug(slug)
    world = World.objects.filter(slug=slug).first()
    if world is None:
        raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
    return [
        intervention_row(i)
        for i in Intervention.objects.filter(world=world).select_related("world").order_by("turn")
    ]


def turn_transition_links(*, slug: str, number: int) -> dict[tuple[int, int], dict[str, Any]]:
    """(patch seq, effect index) → the generation that decided each effect of a committed turn
    (``llm_call_id``, ``invocation_id``; both null for a rule or an intervention)."""
    return {
        (t["patch_seq"], t["effect_index"]): dict(t)
        for t in PatchTransition.objects.filter(world__slug=slug, turn_number=number).values(
            "patch_seq", "effect_index", "llm_call_id", "invocation_id"
        )
    }


def world_count() -> int:
    return World.objects.count()
