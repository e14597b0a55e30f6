"""Reads of experiments (docs/experiments.md): status and progress, results with their
uncertainty, and the tidy rows of every measurement for export.

Status is read from the worlds' attempts: ``running`` while any world has an attempt queued or
running; else ``failed`` when some world stopped short of its turns (the others went on), else
``completed``; ``cancelled`` once cancelled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, IntegerField, Max, Min, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from chukwa_core.errors import NotFoundError
from chukwa_core.experiment_stats import arm_summary, paired_difference
from chukwa_core.metric_values import aggregate
from cognition_app.models import LlmCall
from scenarios_app.models import Metric
from worlds_app.models import AttemptStatus, Experiment, Measurement, World
from worlds_app.selectors import require_slug

RUNNING, COMPLETED, FAILED, CANCELLED = "running", "completed", "failed", "cancelled"
EXPORT_COLUMNS = (
    "arm",
    "replicate",
    "world",
    "turn",
    "metric_label",
    "metric_hash",
    "value",
    "error_code",
)


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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 12)


def experiment_results(*, slug: str) -> dict[str, Any]:
    """Per metric and arm: n, n_missing, mean, sd, a 95% CI and the per-turn mean with its CI;
    per treatment arm, the paired difference from control (bootstrap CI, sign-flip p). A world's
    value is the metric's aggregate over the turns it ran (its first turn, the baseline — turn
    0, or a branch's turn —, left out)."""
    experiment = experiment_row(slug)
    design = experiment.design
    arms = [a["label"] for a in design["arms"]]
    control, replicates = design["control"], design["replicates"]
    start = first_turn(design)
    worlds = {
        w["id"]: w
        for w in World.objects.filter(experiment=experiment).values(
            "id", "slug", "arm", "replicate"
        )
    }
    metrics = {
        m["hash"]: m
        for m in Metric.objects.filter(pk__in=design["metrics"]).values("hash", "label", "content")
    }
    # (metric, world) → per-turn values in turn order, errors left out
    per_turn: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
    rows = (
        Measurement.objects.filter(world_id__in=list(worlds), metric_id__in=list(metrics))
        .exclude(value__isnull=True)
        .order_by("turn_number")
        .values_list("metric_id", "world_id", "turn_number", "value")
    )
    for metric_id, world_id, number, value in rows.iterator(chunk_size=5000):
        if value is not None:
            per_turn[(metric_id, world_id)].append((number, value))
    results = []
    for metric_hash in design["metrics"]:
        metric = metrics[metric_hash]
        kind = metric["content"]["aggregate"]
        values: dict[str, list[float | None]] = {arm: [None] * replicates for arm in arms}
        slugs: dict[str, list[str | None]] = {arm: [None] * replicates for arm in arms}
        by_turn: dict[str, dict[int, list[float | None]]] = {arm: {} for arm in arms}
        for world_id, world in worlds.items():
            points = per_turn.get((metric_hash, world_id), [])
            ran = [v for n, v in points if n > start]
            values[world["arm"]][(world["replicate"] or 1) - 1] = aggregate(kind, ran)
            slugs[world["arm"]][(world["replicate"] or 1) - 1] = world["slug"]
            for number, value in points:
                by_turn[world["arm"]].setdefault(number, []).append(value)
        arm_rows = []
        for arm in arms:
            summary = arm_summary(values[arm])
            series = []
            for number in range(start, start + design["turns"] + 1):
                turn_summary = arm_summary(by_turn[arm].get(number, []))
                series.append(
                    {
                        "turn": number,
                        "n": turn_summary.n,
                        "mean": _round(turn_summary.mean),
                        "ci_low": _round(turn_summary.ci_low),
                        "ci_high": _round(turn_summary.ci_high),
                    }
                )
            arm_rows.append(
                {
                    "arm": arm,
                    "n": summary.n,
                    "n_missing": summary.n_missing,
                    "mean": _round(summary.mean),
                    "sd": _round(summary.sd),
                    "ci_low": _round(summary.ci_low),
                    "ci_high": _round(summary.ci_high),
                    "ci_method": summary.ci_method,
                    "per_turn": series,
                    # each world's value (None: failed, or the metric erred on every turn)
                    "worlds": [
                        {"replicate": i + 1, "world": slug, "value": _round(value)}
                        for i, (slug, value) in enumerate(zip(slugs[arm], values[arm], strict=True))
                        if slug is not None
                    ],
                }
            )
        effects = []
        for arm in arms:
            if arm == control:
                continue
            diff = paired_difference(values[control], values[arm], seed=experiment.seed)
            effects.append(
                {
                    "arm": arm,
                    "control": control,
                    "n_pairs": diff.n_pairs,
                    "difference": _round(diff.mean),
                    "ci_low": _round(diff.ci_low),
                    "ci_high": _round(diff.ci_high),
                    "ci_method": diff.ci_method,
                    "p_value": _round(diff.p_value),
                    "p_method": diff.p_method,
                }
            )
        results.append(
            {
                "metric": {"hash": metric_hash, "label": metric["label"], "aggregate": kind},
                "arms": arm_rows,
                "effects": effects,
            }
        )
    return {"experiment": experiment.slug, "control": control, "results": results}


def export_rows(*, slug: str) -> tuple[Experiment, Iterator[dict[str, Any]]]:
    """The tidy rows of every measurement of the experiment, streamed from the database (in
    chunks): one per (arm, replicate, world, turn, metric)."""
    experiment = experiment_row(slug)

    def rows() -> Iterator[dict[str, Any]]:
        query = (
            Measurement.objects.filter(
                world__experiment=experiment,
                metric_id__in=experiment.design["metrics"],
                turn_number__gte=first_turn(experiment.design),
            )
            .order_by("world__arm", "world__replicate", "turn_number", "metric__label")
            .values_list(
                "world__arm",
                "world__replicate",
                "world__slug",
                "turn_number",
                "metric__label",
                "metric_id",
                "value",
                "error_code",
            )
        )
        for values in query.iterator(chunk_size=2000):
            yield dict(zip(EXPORT_COLUMNS, values, strict=True))

    return experiment, rows()


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
