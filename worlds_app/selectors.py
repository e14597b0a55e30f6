"""Reads for worlds, turns and attempts."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from chukwa_core.component_validation import type_name
from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import is_hash, label_problem
from cognition_app.budgets import BudgetLimits
from cognition_app.selectors import (
    cost_totals,
)
from scenarios_app.selectors import parse_paging
from worlds_app.models import (
    ACTIVE_STATUSES,
    Annotation,
    AnnotationTarget,
    AttemptEvent,
    AttemptStatus,
    PatchTransition,
    Turn,
    TurnAttempt,
    World,
    WorldBudget,
)

# Turn numbers are stored as PostgreSQL integer; a larger one names no turn and must not reach
# the database as an out-of-range parameter.
MAX_TURN_NUMBER = 2_147_483_647


def require_slug(slug: str, field: str = "slug") -> str:
    """A world slug from a path or a form, checked against the label grammar (SPEC §1)."""
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


def world_summary(
    world: World,
    *,
    queued: int = 0,
    running: int = 0,
    last_attempt: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "slug": world.slug,
        "name": world.name,
        "label": world.label,
        "scenario_hash": world.scenario_id,
        "scenario_ref": world.scenario_ref,
        "replay_from": world.replay_from,
        "chronon_seconds": world.chronon_seconds,
        "current_turn": world.current_turn,
        "created_at": world.created_at,
        "attempts_queued": queued,
        "attempts_running": running,
        "last_attempt": last_attempt,
    }


LAST_ATTEMPT_FIELDS = ("id", "seq", "status", "ended_at")


def _finished_attempts() -> QuerySet[TurnAttempt]:
    return TurnAttempt.objects.exclude(status__in=ACTIVE_STATUSES)


def world_list(*, params: Mapping[str, Any]) -> dict[str, Any]:
    """Worlds newest first, optionally only those of one scenario (``scenario=<hash>``)."""
    limit, offset = parse_paging(params)
    qs = World.objects.all()
    scenario = params.get("scenario")
    if scenario:
        if not is_hash(scenario):
            raise invalid("invalid_hash", "scenario", f"{scenario!r} is not a lowercase sha256 hex")
        qs = qs.filter(scenario_id=scenario)
    # The newest finished attempt's outcome, so a world whose last attempt failed never reads
    # as plain "idle"; subqueries keep the page at one query whatever its length.
    last = _finished_attempts().filter(world=OuterRef("pk")).order_by("-seq")
    rows = qs.annotate(
        queued=Count("attempts", filter=Q(attempts__status="queued")),
        running=Count("attempts", filter=Q(attempts__status="running")),
        last_id=Subquery(last.values("id")[:1]),
        last_seq=Subquery(last.values("seq")[:1]),
        last_status=Subquery(last.values("status")[:1]),
        last_ended_at=Subquery(last.values("ended_at")[:1]),
    ).order_by("-created_at", "slug")[offset : offset + limit]
    results = []
    for w in rows:
        last_attempt = (
            {
                "id": w.last_id,
                "seq": w.last_seq,
                "status": w.last_status,
                "ended_at": w.last_ended_at,
            }
            if w.last_id
            else None
        )
        results.append(
            world_summary(w, queued=w.queued, running=w.running, last_attempt=last_attempt)
        )
    return {"count": qs.count(), "limit": limit, "offset": offset, "results": results}


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
    world = _world(slug)
    counts = TurnAttempt.objects.filter(world=world).aggregate(
        queued=Count("pk", filter=Q(status="queued")),
        running=Count("pk", filter=Q(status="running")),
    )
    turn = Turn.objects.get(world=world, number=world.current_turn)
    recent = list(
        TurnAttempt.objects.filter(world=world)
        .order_by("-seq")[:20]
        .values(
            "id",
            "seq",
            "status",
            "attempted_turn",
            "produced_turn",
            "queued_at",
            "ended_at",
            "failure_reason",
        )
    )
    last_attempt = (
        _finished_attempts().filter(world=world).order_by("-seq").values(*LAST_ATTEMPT_FIELDS)
    ).first()
    return {
        **world_summary(
            world,
            queued=counts["queued"],
            running=counts["running"],
            last_attempt=last_attempt,
        ),
        "simulation_time": turn.simulation_time,
        "state": turn.state,
        "state_hash": turn.state_hash,
        "scenario_snapshot": world.scenario_snapshot,
        "recent_attempts": recent,
        "budget": world_budget_get(slug=world.slug)["budget"],
        "cost": cost_totals(world_id=world.pk),
    }


def turn_get(*, slug: str, number: int) -> dict[str, Any]:
    require_slug(slug)
    require_turn_number(number)
    world = _world(slug)
    turn = Turn.objects.filter(world=world, number=number).first()
    if turn is None:
        raise NotFoundError(
            "turn_not_found",
            f"number: world {slug!r} has no committed turn {number} (current: {world.current_turn})",
            {"field": "number"},
        )
    transitions = list(
        PatchTransition.objects.filter(world=world, turn_number=number).values(
            "patch_seq",
            "effect_index",
            "subject_id",
            "node_id",
            "workflow_hash",
            "op",
            "target_kind",
            "target_id",
            "before",
            "after",
        )
    )
    narrations = (
        list(
            AttemptEvent.objects.filter(attempt_id=turn.attempt_id, kind="world_patch_applied")
            .order_by("seq")
            .values_list("subject_id", "patch_seq", "payload")
        )
        if turn.attempt_id
        else []
    )
    return {
        "world": slug,
        "number": turn.number,
        "simulation_time": turn.simulation_time,
        "state": turn.state,
        "state_hash": turn.state_hash,
        "attempt_id": turn.attempt_id,
        "created_at": turn.created_at,
        "cost": cost_totals(world_id=world.pk, attempted_turn=turn.number),
        "patches": [
            {
                "subject_id": s,
                "patch_seq": seq,
                "narration": p["patch"]["narration"],
                "patch": p["patch"],
            }
            for s, seq, p in narrations
        ],
        "transitions": transitions,
    }


# Events that describe the turn's change, real only once the turn is committed (SPEC §6).
PROVISIONAL_EVENTS = frozenset({"world_patch_applied", "effect_contested"})


def _commit_state(status: str) -> str:
    """What a patch event of an attempt in ``status`` is worth: ``provisional`` while the
    attempt runs, ``committed`` with its turn, ``not_committed`` when it failed, was
    interrupted or cancelled (its world never saw the patch)."""
    if status == AttemptStatus.COMMITTED:
        return "committed"
    if status in (AttemptStatus.QUEUED, AttemptStatus.RUNNING):
        return "provisional"
    return "not_committed"


def attempt_get(*, attempt_id: str) -> dict[str, Any]:
    if not _is_uuid(attempt_id):
        raise invalid("invalid_id", "attempt_id", f"{attempt_id!r} is not a UUID")
    attempt = TurnAttempt.objects.select_related("world").filter(pk=attempt_id).first()
    if attempt is None:
        raise NotFoundError(
            "attempt_not_found", f"attempt_id: no attempt {attempt_id}", {"field": "attempt_id"}
        )
    state = _commit_state(attempt.status)
    events: list[dict[str, Any]] = [
        {**event, "commit_state": state if event["kind"] in PROVISIONAL_EVENTS else None}
        for event in attempt.events.order_by("seq").values(
            "seq",
            "kind",
            "subject_id",
            "node_id",
            "workflow_hash",
            "patch_seq",
            "payload",
            "content_hash",
            "invocation_id",
            "llm_call_id",
            "created_at",
        )
    ]
    from cognition_app.selectors import invocation_summaries

    invocations = invocation_summaries(attempt_id=attempt.pk)
    return {
        "id": str(attempt.id),
        "world": attempt.world.slug,
        "seq": attempt.seq,
        "batch_id": str(attempt.batch_id),
        "batch_index": attempt.batch_index,
        "batch_size": attempt.batch_size,
        "status": attempt.status,
        "attempted_turn": attempt.attempted_turn,
        "produced_turn": attempt.produced_turn,
        "lease_owner": attempt.lease_owner,
        "lease_expires_at": attempt.lease_expires_at,
        "queued_at": attempt.queued_at,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "duration_ms": attempt.duration_ms,
        "failure": (
            {
                "step": attempt.failure_step,
                "subject_id": attempt.failure_subject,
                "reason": attempt.failure_reason,
            }
            if attempt.failure_reason
            else None
        ),
        "events": events,
        "source_invocations": invocations,
        "cost": cost_totals(world_id=attempt.world_id, attempt_id=attempt.pk),
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


# --- annotations (SPEC §12) ----------------------------------------------------------------

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
