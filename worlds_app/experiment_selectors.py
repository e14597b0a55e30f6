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

from chukwa_core.errors import NotFoundError
from chukwa_core.experiment_design import (
    BATCH,
    COMPLETED,
    RUNNING,
    ExperimentDesign,
    Progress,
    WorldProgress,
)
from cognition_app import batch_queue as batches
from cognition_app.models import LlmCall
from scenarios_app.selectors import scenario_names_of
from worlds_app.models import (
    ACTIVE_STATUSES,
    Experiment,
    ExperimentLedger,
    Measurement,
    PendingJudging,
    World,
)
from worlds_app.selectors import require_slug
from worlds_app.services.batch_mode import batch_progress
from worlds_app.services.experiment_time import TIMED_CALLS, time_of

__all__ = ["COMPLETED", "RUNNING", "experiment_get", "experiment_list", "experiment_row"]


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
    pending = Q(attempts__status__in=ACTIVE_STATUSES)
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
    ledger = ExperimentLedger.objects.filter(pk=experiment.pk).first() or ExperimentLedger()
    return {
        "max_tokens_total": experiment.max_tokens_total,
        "max_cost_total": experiment.max_cost_total,
        "spent_tokens": ledger.spent_tokens,
        "spent_cost": ledger.spent_cost,
        "reserved_tokens": ledger.reserved_tokens,
        "reserved_cost": ledger.reserved_cost,
        "exhausted_at": experiment.budget_exhausted_at,
    }


def stopping_ended(history: list[dict[str, Any]]) -> bool:
    """Whether the stopping rule recorded its end (``services.experiment_stopping``)."""
    return any(entry.get("change") == "stopping" for entry in history)


def _progress(
    experiment: Experiment, design: ExperimentDesign, worlds: list[dict[str, Any]], measured: int
) -> Progress:
    return design.progress(
        (WorldProgress(w["current_turn"], bool(w["pending"])) for w in worlds),
        measured=measured,
        cancelled=experiment.cancelled_at is not None,
        stopping_open=design.stopping is not None and not stopping_ended(experiment.history),
    )


def eta_seconds(
    *,
    status: str,
    design: ExperimentDesign,
    worlds: list[dict[str, Any]],
    committed: int,
    calls: Mapping[str, int],
) -> int | None:
    """Seconds until the remaining turns commit, by the estimate's model (``time_of``): each
    unfinished world's turns left, at the calls per committed turn the experiment has made so
    far (``calls``: per source hash), each at its model's observed median latency, worlds side
    by side as the limits allow. None when the experiment is not running, nothing has committed
    yet, or a model's latency is unknown."""
    if status != RUNNING or committed <= 0 or not calls:
        return None
    per_turn = {source: count / committed for source, count in calls.items()}
    left = [
        {
            source: rate * max(design.last_turn - w["current_turn"], 0)
            for source, rate in per_turn.items()
        }
        for w in worlds
        if not design.world_finished(w["current_turn"])
    ]
    return time_of(left).seconds


def _calls_by_source(world_ids: list[int]) -> dict[str, int]:
    """The experiment's recorded LLM calls that took the model's time, counted per source hash."""
    rows = (
        LlmCall.objects.filter(invocation__world_id__in=world_ids, **TIMED_CALLS)
        .values("invocation__source_hash")
        .annotate(n=Count("pk"))
    )
    return {row["invocation__source_hash"]: row["n"] for row in rows}


def _totals() -> dict[str, Any]:
    """What LLM calls spent: tokens, cost, and how many have no price."""
    tokens = Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0)
    return {
        "spent_tokens": Coalesce(Sum(tokens, output_field=IntegerField()), Value(0)),
        "spent_cost": Sum("cost"),
        "unpriced": Count("pk", filter=Q(cost__isnull=True)),
        "calls_reused": Count("pk", filter=Q(invocation__reused_from__isnull=False)),
        "reused_tokens": Coalesce(Sum("tokens_reused"), Value(0)),
        "saved_cost": Sum("cost_saved"),
        "unsaved": Count(
            "pk", filter=Q(invocation__reused_from__isnull=False, cost_saved__isnull=True)
        ),
    }


def _cost(paid: dict[str, Any] | None) -> Decimal | None:
    """What the calls cost; None when some call has no price."""
    if paid is None:
        return Decimal(0)
    return None if paid["unpriced"] else (paid["spent_cost"] or Decimal(0))


def arm_scenarios(design: ExperimentDesign) -> dict[str, dict[str, Any]]:
    """Per arm label, its scenario's hash and the names that point at it now: one query."""
    names = scenario_names_of(hashes=[arm.scenario_hash for arm in design.arms])
    return {
        arm.label: {
            "scenario_hash": arm.scenario_hash,
            "scenario_names": names.get(arm.scenario_hash, []),
        }
        for arm in design.arms
    }


def experiment_get(*, slug: str) -> dict[str, Any]:
    """Design, status, progress (worlds, turns, measurements), tokens, cost, failed worlds."""
    experiment = experiment_row(slug)
    design = experiment.typed_design
    worlds = _worlds(experiment)
    world_ids = [w["id"] for w in worlds]
    measured = Measurement.objects.filter(
        world_id__in=world_ids,
        metric_id__in=list(design.metrics),
        turn_number__gte=design.first_turn,
    ).count()
    progress = _progress(experiment, design, worlds, measured)
    spent = LlmCall.objects.filter(invocation__world_id__in=world_ids).aggregate(**_totals())
    failed = [
        {"slug": w["slug"], "arm": w["arm"], "replicate": w["replicate"], "turn": w["current_turn"]}
        for w in worlds
        if not w["pending"] and not design.world_finished(w["current_turn"])
    ]
    finished_at: datetime | None = None
    if progress.status != RUNNING:
        ends = [w["last_ended"] for w in worlds if w["last_ended"] is not None]
        finished_at = max(ends) if ends else experiment.cancelled_at
    eta = eta_seconds(
        status=progress.status,
        design=design,
        worlds=worlds,
        committed=progress.turns_committed,
        calls=_calls_by_source(world_ids) if progress.status == RUNNING else {},
    )
    return {
        "slug": experiment.slug,
        "name": experiment.name,
        "description": experiment.description,
        "design": design,
        "status": progress.status,
        "progress": {
            **_progress_fields(progress),
            "eta_seconds": eta,
            **judges_waiting(world_ids),
        },
        "budget": _budget(experiment),
        "tokens": int(spent["spent_tokens"]),
        "cost": _cost(spent),
        "calls_reused": spent["calls_reused"],
        "tokens_reused": int(spent["reused_tokens"]),
        # unknown when a reused call's original had no price (never counted as 0)
        "cost_saved": None if spent["unsaved"] else (spent["saved_cost"] or Decimal(0)),
        "failed_worlds": failed,
        # batch mode's ticks, parked attempts and requests waiting in batches; null online
        "batch": batch_progress(experiment.pk) if design.mode == BATCH else None,
        "arm_scenarios": arm_scenarios(design),
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


def judges_waiting(world_ids: list[int]) -> dict[str, int]:
    """Judgings of these worlds waiting on a provider batch (``interface.batch``): unmeasured
    until it ends; and the provider batches holding them (those not sent yet count none)."""
    waiting = PendingJudging.objects.filter(
        world_id__in=world_ids, request__status__in=[batches.PENDING, batches.SUBMITTED]
    ).aggregate(
        judges=Count("pk"),
        batches=Count("request__batch", distinct=True),
    )
    return {"judges_waiting": waiting["judges"], "judge_batches": waiting["batches"]}


def _progress_fields(progress: Progress) -> dict[str, int]:
    return {
        "worlds": progress.worlds,
        "turns_committed": progress.turns_committed,
        "turns_planned": progress.turns_planned,
        "measurements_done": progress.measurements_done,
        "measurements_planned": progress.measurements_planned,
    }


def experiment_list() -> list[dict[str, Any]]:
    """Every experiment, newest first, with its status, progress, failed-world count, tokens
    and cost — the same progress as the experiment's own read — in four queries whatever the
    number of experiments."""
    experiments = list(Experiment.objects.all())
    ids = [e.pk for e in experiments]
    pending = Q(attempts__status__in=ACTIVE_STATUSES)
    worlds: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in (
        World.objects.filter(experiment_id__in=ids)
        .annotate(pending=Count("attempts", filter=pending))
        .values("experiment_id", "current_turn", "pending")
    ):
        worlds[row["experiment_id"]].append(dict(row))
    measured: dict[tuple[int, str, int], int] = {
        (row["world__experiment_id"], row["metric_id"], row["turn_number"]): row["n"]
        for row in Measurement.objects.filter(world__experiment_id__in=ids)
        .values("world__experiment_id", "metric_id", "turn_number")
        .annotate(n=Count("pk"))
    }
    key = "invocation__world__experiment_id"
    spent = {
        row[key]: row
        for row in LlmCall.objects.filter(invocation__world__experiment_id__in=ids)
        .values(key)
        .annotate(**_totals())
    }
    found = []
    for experiment in experiments:
        design = experiment.typed_design
        rows = worlds[experiment.pk]
        done = sum(
            n
            for (owner, metric, turn), n in measured.items()
            if owner == experiment.pk and metric in design.metrics and turn >= design.first_turn
        )
        progress = _progress(experiment, design, rows, done)
        paid = spent.get(experiment.pk)
        found.append(
            {
                "slug": experiment.slug,
                "name": experiment.name,
                "status": progress.status,
                "worlds": progress.worlds,
                "arms": list(design.arm_labels),
                "replicates": design.replicates,
                "turns": design.turns,
                "first_turn": design.first_turn,
                "progress": _progress_fields(progress),
                "failed_worlds": progress.failed_worlds,
                "tokens": int(paid["spent_tokens"]) if paid else 0,
                "cost": _cost(paid),
                "created_by": experiment.created_by,
                "started_at": experiment.created_at,
            }
        )
    return found
