"""Results of experiments (docs/experiments.md): per metric and arm a summary with its
uncertainty, the paired effects against control, and the tidy rows of every measurement for
export."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

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


def experiment_results(*, slug: str) -> dict[str, Any]:
    """Per metric and arm: n, n_missing, mean, sd, a 95% CI and the per-turn mean with its CI;
    per treatment arm, the paired difference from control (bootstrap CI, sign-flip p). A world's
    value is the metric's aggregate over the turns it ran (its first turn, the baseline — turn
    0, or a branch's turn —, left out)."""
    experiment = experiment_row(slug)
    design = experiment.design
    arms = [a["label"] for a in design["arms"]]
    control, replicates = design["control"], design["replicates"]
    start = experiment.typed_design.first_turn
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
                turn_number__gte=experiment.typed_design.first_turn,
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
