"""Reads that page through history: every world's attempts (filtered), a world's turns with
their narrations and costs, the narrations of some turns, the worlds one can be compared with.
Each answers in a fixed number of queries whatever the history length."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict

from django.db.models import Case, Exists, OuterRef, Q, QuerySet, Value, When
from django.db.models.fields.json import KT

from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.selectors import CostTotals, cost_totals_by_attempt, cost_totals_by_turn
from worlds_app.models import AttemptEvent, Turn, TurnAttempt, World
from worlds_app.selectors import world_row


def world_neighbours(*, slug: str, limit: int) -> list[dict[str, Any]]:
    """Other worlds to compare one with: those of the same scenario first, newest first."""
    world = world_row(slug)
    same = Q(scenario_id=world.scenario_id)
    rows = (
        World.objects.exclude(pk=world.pk)
        .annotate(same_scenario=Case(When(same, then=Value(1)), default=Value(0)))
        .order_by("-same_scenario", "-created_at", "slug")
        .values("slug", "name", "same_scenario")[:limit]
    )
    return [{**r, "same_scenario": bool(r["same_scenario"])} for r in rows]


def turn_narrations(*, slug: str, numbers: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The narrations of some committed turns of a world, by turn number (one query)."""
    rows = (
        AttemptEvent.objects.filter(
            kind="world_patch_applied",
            attempt__world__slug=slug,
            attempt__produced_turn__in=numbers,
        )
        .order_by("attempt__produced_turn", "seq")
        .values_list("attempt__produced_turn", "subject_id", KT("payload__patch__narration"))
    )
    found: dict[int, list[dict[str, Any]]] = {}
    for number, subject, narration in rows:
        found.setdefault(number, []).append({"subject_id": subject, "narration": narration or ""})
    return found


# --- indexes: attempts across worlds, a world's turns ---------------------------


class AttemptFilters(TypedDict, total=False):
    """What the surfaces' filter serializer validated; every key is optional."""

    status: str
    world: str
    experiment: str  # an experiment's slug: its worlds only
    arm: str  # an arm's label: the worlds of that arm only
    subject: str  # an entity that thought in the attempt (events, invocations, or its failure)
    model: str  # requested or answering model of one of its LLM calls
    since: datetime  # queued at or after
    until: datetime  # queued before


NO_COST: CostTotals = {
    "total": None,
    "unknown_calls": 0,
    "estimated_calls": 0,
    "calls": 0,
    "tokens": {"prompt": 0, "completion": 0, "cached": 0, "total": 0},
    "calls_reused": 0,
    "tokens_reused": 0,
    "cost_saved": Decimal(0),
}

ATTEMPT_ROW_FIELDS = (
    "id",
    "seq",
    "status",
    "attempted_turn",
    "produced_turn",
    "queued_at",
    "started_at",
    "ended_at",
    "duration_ms",
    "failure_step",
    "failure_subject",
    "failure_reason",
    "waiting_for",
)


def _filtered_attempts(filters: AttemptFilters) -> QuerySet[TurnAttempt]:
    qs = TurnAttempt.objects.all()
    if "status" in filters:
        qs = qs.filter(status=filters["status"])
    if "world" in filters:
        qs = qs.filter(world__slug=filters["world"])
    if "experiment" in filters:
        qs = qs.filter(world__experiment__slug=filters["experiment"])
    if "arm" in filters:
        qs = qs.filter(world__arm=filters["arm"])
    if "subject" in filters:
        subject = filters["subject"]
        here = OuterRef("pk")
        qs = qs.filter(
            Q(failure_subject=subject)
            | Exists(AttemptEvent.objects.filter(attempt=here, subject_id=subject))
            | Exists(SourceInvocation.objects.filter(attempt=here, subject_id=subject))
        )
    if "model" in filters:
        model = filters["model"]
        calls = LlmCall.objects.filter(invocation__attempt=OuterRef("pk"))
        qs = qs.filter(Exists(calls.filter(Q(requested_model=model) | Q(response_model=model))))
    if "since" in filters:
        qs = qs.filter(queued_at__gte=filters["since"])
    if "until" in filters:
        qs = qs.filter(queued_at__lt=filters["until"])
    return qs


def attempt_list(*, filters: AttemptFilters, limit: int, offset: int) -> dict[str, Any]:
    """Attempts of every world, newest first, each with its failure and its cost: three
    queries whatever the page size."""
    qs = _filtered_attempts(filters)
    rows = list(
        qs.order_by("-queued_at", "-seq").values(*ATTEMPT_ROW_FIELDS, "world__slug")[
            offset : offset + limit
        ]
    )
    costs = cost_totals_by_attempt(attempt_ids=[r["id"] for r in rows])
    results = []
    for row in rows:
        step, subject, reason = (
            row.pop("failure_step"),
            row.pop("failure_subject"),
            row.pop("failure_reason"),
        )
        results.append(
            {
                **row,
                "id": str(row["id"]),
                "world": row.pop("world__slug"),
                "failure": (
                    {"step": step, "subject_id": subject, "reason": reason} if reason else None
                ),
                "waiting_for": row["waiting_for"] if row["status"] == "running" else "",
                "cost": costs.get(str(row["id"]), NO_COST),
            }
        )
    return {"count": qs.count(), "limit": limit, "offset": offset, "results": results}


def turn_list(*, slug: str, limit: int, offset: int) -> dict[str, Any]:
    """A world's committed turns, newest first, with their narrations and costs: four queries
    whatever the history length (narrations are read as text, never whole patches)."""
    world = world_row(slug)
    qs = Turn.objects.filter(world=world)
    turns: list[dict[str, Any]] = [
        dict(t)
        for t in qs.order_by("-number").values(
            "number", "simulation_time", "state_hash", "attempt_id", "created_at"
        )[offset : offset + limit]
    ]
    narrations: dict[Any, list[dict[str, Any]]] = {}
    events = (
        AttemptEvent.objects.filter(
            attempt_id__in=[t["attempt_id"] for t in turns if t["attempt_id"]],
            kind="world_patch_applied",
        )
        .order_by("seq")
        .values_list("attempt_id", "subject_id", "patch_seq", KT("payload__patch__narration"))
    )
    for attempt_id, subject, patch_seq, narration in events:
        narrations.setdefault(attempt_id, []).append(
            {"subject_id": subject, "patch_seq": patch_seq, "narration": narration or ""}
        )
    costs = cost_totals_by_turn(world_id=world.pk, turns=[t["number"] for t in turns])
    for turn in turns:
        turn["narrations"] = narrations.get(turn["attempt_id"], [])
        turn["cost"] = costs.get(turn["number"], NO_COST)
    return {
        "world": world.slug,
        "current_turn": world.current_turn,
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "results": turns,
    }


def world_choices(*, limit: int = 200) -> list[dict[str, Any]]:
    """The newest worlds with their last committed turn: what a metric can be tried on."""
    rows = World.objects.order_by("-created_at", "slug").values("slug", "name", "current_turn")
    return [dict(row) for row in rows[:limit]]
