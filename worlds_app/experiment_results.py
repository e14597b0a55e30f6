"""Results of experiments (docs/experiments.md): per metric and arm a summary with its
uncertainty, the paired effects against control (typed: ``chukwa_core/experiment_results_types``),
and the tidy rows of every measurement for export."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from chukwa_core.experiment_results_types import (
    ArmResult,
    Effect,
    ExperimentResults,
    MetricResult,
    ResultMetric,
    TurnPoint,
    WorldValue,
)
from chukwa_core.experiment_stats import arm_summary, paired_difference
from chukwa_core.metric_values import aggregate
from scenarios_app.models import Metric
from worlds_app.experiment_selectors import experiment_row
from worlds_app.models import Experiment, Measurement, World

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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 12)


def _per_turn(values: dict[int, list[float]], start: int, turns: int) -> tuple[TurnPoint, ...]:
    """One arm's points from the baseline (``start``) to its last planned turn."""
    points = []
    for number in range(start, start + turns + 1):
        summary = arm_summary(values.get(number, []))
        points.append(
            TurnPoint(
                turn=number,
                n=summary.n,
                mean=_round(summary.mean),
                ci_low=_round(summary.ci_low),
                ci_high=_round(summary.ci_high),
            )
        )
    return tuple(points)


def _arm_result(
    arm: str, values: list[float | None], slugs: list[str | None], per_turn: tuple[TurnPoint, ...]
) -> ArmResult:
    summary = arm_summary(values)
    return ArmResult(
        arm=arm,
        n=summary.n,
        n_missing=summary.n_missing,
        mean=_round(summary.mean),
        sd=_round(summary.sd),
        ci_low=_round(summary.ci_low),
        ci_high=_round(summary.ci_high),
        ci_method=summary.ci_method,
        per_turn=per_turn,
        worlds=tuple(
            WorldValue(replicate=i + 1, world=slug, value=_round(value))
            for i, (slug, value) in enumerate(zip(slugs, values, strict=True))
            if slug is not None
        ),
    )


def _effect(
    arm: str, control: str, treated: list[float | None], base: list[float | None], seed: int
) -> Effect:
    diff = paired_difference(base, treated, seed=seed)
    return Effect(
        arm=arm,
        control=control,
        n_pairs=diff.n_pairs,
        difference=_round(diff.mean),
        ci_low=_round(diff.ci_low),
        ci_high=_round(diff.ci_high),
        ci_method=diff.ci_method,
        p_value=_round(diff.p_value),
        p_method=diff.p_method,
    )


def experiment_results(*, slug: str) -> ExperimentResults:
    """Per metric and arm: n, n_missing, mean, sd, a 95% CI and the per-turn mean with its CI;
    per treatment arm, the paired difference from control (bootstrap CI, sign-flip p). A world's
    value is the metric's aggregate over the turns it ran (its first turn, the baseline — turn
    0, or a branch's turn —, left out)."""
    experiment = experiment_row(slug)
    design = experiment.typed_design
    arms = list(design.arm_labels)
    control, replicates, turns = design.control, design.replicates, design.turns
    metric_hashes = list(design.metrics)
    start = design.first_turn
    worlds = {
        w["id"]: w
        for w in World.objects.filter(experiment=experiment).values(
            "id", "slug", "arm", "replicate"
        )
    }
    metrics = {
        m["hash"]: m
        for m in Metric.objects.filter(pk__in=metric_hashes).values("hash", "label", "content")
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
    for metric_hash in metric_hashes:
        metric = metrics[metric_hash]
        kind = metric["content"]["aggregate"]
        values: dict[str, list[float | None]] = {arm: [None] * replicates for arm in arms}
        slugs: dict[str, list[str | None]] = {arm: [None] * replicates for arm in arms}
        by_turn: dict[str, dict[int, list[float]]] = {arm: {} for arm in arms}
        for world_id, world in worlds.items():
            points = per_turn.get((metric_hash, world_id), [])
            ran = [v for n, v in points if n > start]
            values[world["arm"]][(world["replicate"] or 1) - 1] = aggregate(kind, ran)
            slugs[world["arm"]][(world["replicate"] or 1) - 1] = world["slug"]
            for number, value in points:
                by_turn[world["arm"]].setdefault(number, []).append(value)
        results.append(
            MetricResult(
                metric=ResultMetric(hash=metric_hash, label=metric["label"], aggregate=kind),
                arms=tuple(
                    _arm_result(arm, values[arm], slugs[arm], _per_turn(by_turn[arm], start, turns))
                    for arm in arms
                ),
                effects=tuple(
                    _effect(arm, control, values[arm], values[control], experiment.seed)
                    for arm in arms
                    if arm != control
                ),
            )
        )
    return ExperimentResults(experiment=experiment.slug, control=control, results=tuple(results))


def export_rows(*, slug: str) -> tuple[Experiment, Iterator[dict[str, Any]]]:
    """The tidy rows of every measurement of the experiment, streamed from the database (in
    chunks): one per (arm, replicate, world, turn, metric)."""
    experiment = experiment_row(slug)
    design = experiment.typed_design

    def rows() -> Iterator[dict[str, Any]]:
        query = (
            Measurement.objects.filter(
                world__experiment=experiment,
                metric_id__in=list(design.metrics),
                turn_number__gte=design.first_turn,
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
