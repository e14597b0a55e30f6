"""Reads of experiments (docs/experiments.md): the experiment, its status and progress, and
the index (results and export: ``experiment_results``).

Status is read from the worlds' attempts: ``running`` while any world has an attempt queued or
running; else ``failed`` when some world stopped short of its turns (the others went on), else
``completed``; ``cancelled`` once cancelled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, IntegerField, Max, Min, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from chukwa_core.errors import NotFoundError
from cognition_app.models import LlmCall
from worlds_app.models import AttemptStatus, Experiment, Measurement, World
from worlds_app.selectors import require_slug

RUNNING, COMPLETED, FAILED, CANCELLED = "running", "completed", "failed", "cancelled"


def first_turn(design: Mapping[str, Any]) -> int:
    """The turn the experiment's worlds start from: 0, or a branch's turn."""
    return int(design.get("first_turn", 0))


def experiment_row(slug: str) -> Experiment:
    require_slug(slug)
    experiment = Experiment.objects.filter(slug=slug).first()
    if experiment is None:
        raise NotFoundError(
            "experiment_not_found", f"slug: no experiment {slug!r}", {"field": "slug"}
        )
    return experiment


def _worlds(experiment: Experiment) -> list[dict[str, Any]]:
    """The experiment's worlds with what their attempts say (one query)."""
    pending = Q(attempts__status__in=[AttemptStatus.QUEUED, AttemptStatus.RUNNING])
    return [
        dict(row)
        for row in World.objects.filter(experiment=experiment)
        .order_by("arm", "replicate")
        .annotate(
            pending=Count("attempts", filter=pending),
            last_ended=Max("attempts__ended_at"),
            first_started=Min("attempts__started_at"),
        )
        .values(
            "id",
            "slug",
            "arm",
            "replicate",
            "current_turn",
            "pending",
            "last_ended",
            "first_started",
        )
    ]


def _budget(experiment: Experiment) -> dict[str, Any] | None:
    """The experiment's budget and its ledger (what finished calls spent, what calls in flight
    could still spend), or None when it has none."""
    if not experiment.has_budget:
        return None
    return {
        "max_tokens_total": experiment.max_tokens_total,
        "max_cost_total": experiment.max_cost_total,
        "spent_tokens": experiment.spent_tokens,
        "spent_cost": experiment.spent_cost,
        "reserved_tokens": experiment.reserved_tokens,
        "reserved_cost": experiment.reserved_cost,
        "exhausted_at": experiment.budget_exhausted_at,
    }


def experiment_status(experiment: Experiment, worlds: list[dict[str, Any]]) -> str:
    last = first_turn(experiment.design) + experiment.design["turns"]
    if experiment.cancelled_at is not None:
        return CANCELLED
    if any(w["pending"] for w in worlds):
        return RUNNING
    return FAILED if any(w["current_turn"] < last for w in worlds) else COMPLETED


def eta_seconds(
    *, status: str, committed: int, planned: int, first_started: datetime | None, now: datetime
) -> int | None:
    """Seconds until the remaining planned turns commit at the rate so far (turns committed
    since the experiment's first turn started, by the time elapsed); None when nothing has
    committed yet or the experiment is not running."""
    if status != RUNNING or committed <= 0 or first_started is None:
        return None
    elapsed = max((now - first_started).total_seconds(), 0.0)
    return round(max(planned - committed, 0) * elapsed / committed)


def experiment_get(*, slug: str) -> dict[str, Any]:
    """Design, status, progress (worlds, turns, measurements), tokens, cost, failed worlds."""
    experiment = experiment_row(slug)
    design = experiment.design
    worlds = _worlds(experiment)
    status = experiment_status(experiment, worlds)
    turns = design["turns"]
    world_ids = [w["id"] for w in worlds]
    metrics = len(design["metrics"])
    start = first_turn(design)
    measured = Measurement.objects.filter(
        world_id__in=world_ids, metric_id__in=design["metrics"], turn_number__gte=start
    ).count()
    tokens = Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0)
    spent = LlmCall.objects.filter(invocation__world_id__in=world_ids).aggregate(
        spent_tokens=Coalesce(Sum(tokens, output_field=IntegerField()), Value(0)),
        spent_cost=Sum("cost"),
        unpriced=Count("pk", filter=Q(cost__isnull=True)),
    )
    committed = sum(w["current_turn"] - start for w in worlds)
    failed = [
        {"slug": w["slug"], "arm": w["arm"], "replicate": w["replicate"], "turn": w["current_turn"]}
        for w in worlds
        if not w["pending"] and w["current_turn"] < start + turns
    ]
    finished_at: datetime | None = None
    if status != RUNNING:
        ends = [w["last_ended"] for w in worlds if w["last_ended"] is not None]
        finished_at = max(ends) if ends else experiment.cancelled_at
    cost: Decimal | None = spent["spent_cost"]
    starts = [w["first_started"] for w in worlds if w["first_started"] is not None]
    planned = len(worlds) * turns
    eta = eta_seconds(
        status=status,
        committed=committed,
        planned=planned,
        first_started=min(starts) if starts else None,
        now=timezone.now(),
    )
    return {
        "slug": experiment.slug,
        "name": experiment.name,
        "description": experiment.description,
        "design": design,
        "status": status,
        "progress": {
            "worlds": len(worlds),
            "turns_committed": committed,
            "turns_planned": planned,
            "measurements_done": measured,
            "measurements_planned": len(worlds) * (turns + 1) * metrics,
            "eta_seconds": eta,
        },
        "budget": _budget(experiment),
        "tokens": int(spent["spent_tokens"]),
        "cost": None if spent["unpriced"] else (cost or Decimal(0)),
        "failed_worlds": failed,
        "worlds": [
            {
                "slug": w["slug"],
                "arm": w["arm"],
                "replicate": w["replicate"],
                "current_turn": w["current_turn"],
            }
            for w in worlds
        ],
        "created_by": experiment.created_by,
        "started_at": experiment.created_at,
        "finished_at": finished_at,
    }


def experiment_list() -> list[dict[str, Any]]:
    """Every experiment, newest first, with its status, progress, tokens and cost (four queries
    whatever the number of experiments)."""
    experiments = list(Experiment.objects.all())
    ids = [e.pk for e in experiments]
    pending = Q(attempts__status__in=[AttemptStatus.QUEUED, AttemptStatus.RUNNING])
    worlds: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in (
        World.objects.filter(experiment_id__in=ids)
        .annotate(pending=Count("attempts", filter=pending))
        .values("experiment_id", "current_turn", "pending")
    ):
        worlds[row["experiment_id"]].append(dict(row))
    measured: dict[tuple[int, str], int] = {
        (row["world__experiment_id"], row["metric_id"]): row["n"]
        for row in Measurement.objects.filter(world__experiment_id__in=ids)
        .values("world__experiment_id", "metric_id")
        .annotate(n=Count("pk"))
    }
    tokens = Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0)
    spent = {
        row["invocation__world__experiment_id"]: row
        for row in LlmCall.objects.filter(invocation__world__experiment_id__in=ids)
        .values("invocation__world__experiment_id")
        .annotate(
            spent_tokens=Sum(tokens, output_field=IntegerField()),
            spent_cost=Sum("cost"),
            unpriced=Count("pk", filter=Q(cost__isnull=True)),
        )
    }
    found = []
    for experiment in experiments:
        design = experiment.design
        rows = worlds[experiment.pk]
        turns = design["turns"]
        paid = spent.get(experiment.pk)
        found.append(
            {
                "slug": experiment.slug,
                "name": experiment.name,
                "status": experiment_status(experiment, rows),
                "worlds": len(rows),
                "arms": [a["label"] for a in design["arms"]],
                "replicates": design["replicates"],
                "turns": turns,
                "progress": {
                    "worlds": len(rows),
                    "turns_committed": sum(w["current_turn"] for w in rows),
                    "turns_planned": len(rows) * turns,
                    "measurements_done": sum(
                        measured.get((experiment.pk, m), 0) for m in design["metrics"]
                    ),
                    "measurements_planned": len(rows) * (turns + 1) * len(design["metrics"]),
                },
                "failed_worlds": sum(
                    1 for w in rows if not w["pending"] and w["current_turn"] < turns
                ),
                "tokens": int(paid["spent_tokens"] or 0) if paid else 0,
                "cost": (
                    Decimal(0)
                    if paid is None
                    else None
                    if paid["unpriced"]
                    else (paid["spent_cost"] or Decimal(0))
                ),
                "created_by": experiment.created_by,
                "started_at": experiment.created_at,
            }
        )
    return found
