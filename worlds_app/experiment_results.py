"""Results of experiments (docs/experiments.md): per metric and arm a summary with its
uncertainty, the paired effects against control (typed: ``chukwa_core/experiment_results_types``),
and the tidy rows of every measurement for export."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from django.db import connection

from chukwa_core.experiment_analysis import (
    MISSING_DATA_RULE,
    DesignFacts,
    MetricInput,
    WorldInput,
    fitting_scale,
    methods_paragraph,
    metric_result,
    software,
    with_holm,
)
from chukwa_core.experiment_design import ExperimentDesign
from chukwa_core.experiment_design_analysis import factorial_result, stopping_result
from chukwa_core.experiment_results_types import (
    ExperimentResults,
    FactorialResult,
    HistoryEntry,
    StoppingResult,
)
from chukwa_core.metric_kinds import turn_scale, world_scale_of
from chukwa_core.people_reference import people_reference
from cognition_app.models import LlmCall
from scenarios_app.models import Metric
from worlds_app.experiment_points import (
    arm_codes,
    read_rows,
    world_turns,
)
from worlds_app.experiment_points import by_turn as turns_by_arm
from worlds_app.experiment_points import world_values as world_values_of
from worlds_app.experiment_selectors import experiment_row
from worlds_app.models import (
    ACTIVE_STATUSES,
    Experiment,
    Measurement,
    ReferenceValue,
)

REFERENCE_COLUMNS = ("unit", "metric_label", "metric_hash", "value")
EXPORT_COLUMNS = (
    "arm",
    "replicate",
    "world",
    "turn",
    "metric_label",
    "metric_hash",
    "value",
    "error_code",
    "subject",  # the agent a survey asked; empty for every other kind
)


def _type_basis(content: dict[str, Any]) -> str:
    if "type" in content:
        return "declared by the metric"
    return "inferred; an expression may declare its type"


def _registered(experiment: Experiment, design: ExperimentDesign) -> tuple[str, int, set[str]]:
    """The pre-registration: its hash, replicates and metrics (an experiment made before
    registration was recorded counts as registered as it is now)."""
    if experiment.registered_design is None:
        return experiment.registered_hash or "", design.replicates, set(design.metrics)
    frozen = ExperimentDesign.from_json(experiment.registered_design)
    # a stopping rule's replicates were registered with it, up to its max_replicates
    replicates = frozen.replicates if frozen.stopping is None else frozen.stopping.max_replicates
    return experiment.registered_hash, replicates, set(frozen.metrics)


def _world_values(
    design: ExperimentDesign,
    worlds: list[dict[str, Any]],
    values: list[tuple[float | None, str | None]],
) -> dict[str, list[WorldInput]]:
    """Each arm's worlds (``worlds`` in replicate order) with their value or why they have
    none (``values``, one per world)."""
    found: dict[str, list[WorldInput]] = {arm: [] for arm in design.arm_labels}
    for world, (value, reason) in zip(worlds, values, strict=True):
        if world["arm"] in found:
            found[world["arm"]].append(
                WorldInput(world["replicate"] or 1, world["slug"], value, reason)
            )
    return found


# The experiment's worlds; for a world short of its last turn, its turns queued or running
# (whether it is still running), the only use of the count.
WORLDS_SQL = (
    "SELECT w.id, w.slug, w.arm, w.replicate, w.current_turn, CASE WHEN w.current_turn < %s "
    "THEN (SELECT count(*) FROM worlds_app_turnattempt a WHERE a.world_id = w.id "
    "AND a.status = ANY(%s)) ELSE 0 END FROM worlds_app_world w WHERE w.experiment_id = %s "
    "ORDER BY w.id"
)
WORLD_FIELDS = ("id", "slug", "arm", "replicate", "current_turn", "pending")


def experiment_results(*, slug: str) -> ExperimentResults:
    """Per metric and arm: n, missing worlds with reasons, mean, sd and a 95% interval inside
    the metric's range, and the per-turn means with pointwise intervals; per treatment arm the
    paired effect by the metric's type (docs/statistics.md), Holm-adjusted across the
    experiment; the history of changes after creation, the methods paragraph and the software.
    A world's value is the metric's aggregate over every turn it was to run (its first turn,
    the baseline — turn 0, or a branch's turn —, left out)."""
    experiment = experiment_row(slug)
    design = experiment.typed_design
    arms = list(design.arm_labels)
    with connection.cursor() as cursor:
        active = [status.value for status in ACTIVE_STATUSES]
        cursor.execute(WORLDS_SQL, [design.last_turn, active, experiment.pk])
        worlds = {row[0]: dict(zip(WORLD_FIELDS, row, strict=True)) for row in cursor.fetchall()}
    by_replicate = sorted(worlds.values(), key=lambda world: world["replicate"] or 0)
    metrics = {
        m["hash"]: m
        for m in Metric.objects.filter(pk__in=list(design.metrics)).values(
            "hash", "label", "content"
        )
    }
    # every measurement in one query, as arrays (a survey's turn has one row per agent)
    hashes = list(metrics)
    measured = read_rows(hashes, list(worlds), range(design.first_turn, design.last_turn + 1))
    arm_of = {world_id: world["arm"] for world_id, world in worlds.items()}
    registered_hash, registered_replicates, registered_metrics = _registered(experiment, design)
    people: dict[str, list[float]] = defaultdict(list)
    for label, observed in ReferenceValue.objects.filter(experiment=experiment).values_list(
        "metric_label", "value"
    ):
        people[label].append(observed)
    results = []
    fits: list[FactorialResult] = []
    stopping: StoppingResult | None = None
    for metric_hash in design.metrics:
        metric = metrics[metric_hash]
        content = metric["content"]
        rows = measured[hashes.index(metric_hash)]
        by_turn = turns_by_arm(rows, arm_codes(rows, arm_of, arms), arms)
        world_values = _world_values(
            design,
            by_replicate,
            world_values_of(
                by_replicate,
                world_turns(rows, design.run_turns),
                design.run_turns,
                design.last_turn,
                content["aggregate"],
            ),
        )
        present = [w.value for arm in arms for w in world_values[arm] if w.value is not None]
        scale, _ = fitting_scale(world_scale_of(content), present)
        if design.factorial is not None:
            fits.append(
                factorial_result(
                    design.factorial.design,
                    metric=metric_hash,
                    label=metric["label"],
                    scale=scale,
                    worlds=world_values,
                )
            )
        if design.stopping is not None and design.stopping.metric == metric_hash:
            stopping = stopping_result(
                design.stopping,
                replicates=design.replicates,
                scale=scale,
                control=world_values[design.control],
                treatment=world_values[design.stopping.treatment],
            )
        result = metric_result(
            MetricInput(
                hash=metric_hash,
                label=metric["label"],
                aggregate=content["aggregate"],
                turn_scale=turn_scale(content),
                world_scale=world_scale_of(content),
                type_basis=_type_basis(content),
                primary=metric_hash == design.primary,
                added_after_creation=metric_hash not in registered_metrics,
            ),
            arms=arms,
            control=design.control,
            worlds=world_values,
            by_turn=by_turn,
            turns=design.measured_turns,
            seed=experiment.seed,
            registered_replicates=registered_replicates,
        )
        if people.get(metric["label"]):
            arm_values = [
                (arm, [w.value for w in world_values[arm] if w.value is not None]) for arm in arms
            ]
            reference = people_reference(arm_values, people[metric["label"]], seed=experiment.seed)
            result = replace(result, people=reference)
        results.append(result)
    adjusted, multiplicity = with_holm(results)
    history = tuple(
        HistoryEntry(at=h["at"], change=h["change"], detail=h["detail"], by=h.get("by", ""))
        for h in experiment.history
    )
    models = sorted(
        LlmCall.objects.filter(invocation__world__experiment=experiment)
        .values_list("requested_model", flat=True)
        .distinct()
    )
    design_text = None if design.factorial is None else design.factorial.design.text()
    facts = DesignFacts(
        experiment=experiment.slug,
        arms=arms,
        control=design.control,
        replicates=design.replicates,
        registered_replicates=registered_replicates,
        turns=design.turns,
        first_turn=design.first_turn,
        seed=experiment.seed,
        models=models,
        registered_hash=registered_hash,
        reuse=design.reuse,
        mode=design.mode,
    )
    return ExperimentResults(
        experiment=experiment.slug,
        control=design.control,
        results=adjusted,
        registered_hash=registered_hash,
        history=history,
        multiplicity=multiplicity,
        missing_data=MISSING_DATA_RULE,
        methods=methods_paragraph(
            facts,
            adjusted,
            history,
            multiplicity,
            design_text=design_text,
            factorial=fits,
            stopping=stopping,
        ),
        software=software(),
        design_text=design_text,
        factorial=tuple(fits),
        stopping=stopping,
    )


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
            .order_by("world__arm", "world__replicate", "turn_number", "metric__label", "subject")
            .values_list(
                "world__arm",
                "world__replicate",
                "world__slug",
                "turn_number",
                "metric__label",
                "metric_id",
                "value",
                "error_code",
                "subject",
            )
        )
        for values in query.iterator(chunk_size=2000):
            yield dict(zip(EXPORT_COLUMNS, values, strict=True))

    return experiment, rows()


def reference_rows(*, slug: str) -> tuple[Experiment, list[dict[str, Any]]]:
    """The people's values uploaded to the experiment, one tidy row each (unit, metric label,
    the metric's hash in the design, value), by metric then upload order."""
    experiment = experiment_row(slug)
    hashes = dict(
        Metric.objects.filter(pk__in=list(experiment.typed_design.metrics)).values_list(
            "label", "hash"
        )
    )
    rows = [
        dict(zip(REFERENCE_COLUMNS, (unit, label, hashes.get(label), value), strict=True))
        for unit, label, value in ReferenceValue.objects.filter(experiment=experiment)
        .order_by("metric_label", "id")
        .values_list("unit", "metric_label", "value")
    ]
    return experiment, rows
