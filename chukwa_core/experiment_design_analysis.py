"""The results of a factorial design and a stopping rule (docs/designs.md), as typed values:
the clustered regression's effects beside the arm table, the cells an interaction plot
draws, and the e-process at every look of a stopping rule. Pure: no Django."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chukwa_core.experiment_analysis import WorldInput
from chukwa_core.experiment_design import Stopping
from chukwa_core.experiment_results_types import (
    FactorialCell,
    FactorialEffect,
    FactorialResult,
    StoppingLook,
    StoppingResult,
)
from chukwa_core.factorial import FactorialDesign
from chukwa_core.statistics.factorial import Observation, fit_factorial
from chukwa_core.statistics.sequential import (
    METHOD,
    NULL,
    Decision,
    look_schedule,
    sequential_test,
)
from chukwa_core.statistics.types import MetricScale

STOPPED_EARLY, MAX_REPLICATES = "stopped_early", "max_replicates"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 12)


def factorial_result(
    design: FactorialDesign,
    *,
    metric: str,
    label: str,
    scale: MetricScale,
    worlds: Mapping[str, Sequence[WorldInput]],
) -> FactorialResult:
    observations = [
        Observation(arm.label, w.replicate, w.value)
        for arm in design.arms
        for w in worlds.get(arm.label, ())
    ]
    fit = fit_factorial(design, scale, observations)
    effects = []
    for term in fit.terms:
        contrast, low, high = term.contrast
        effects.append(
            FactorialEffect(
                term=term.name,
                order=term.order,
                coefficient=_round(term.coefficient),
                ci_low=_round(term.interval.low),
                ci_high=_round(term.interval.high),
                contrast=_round(contrast),
                contrast_ci_low=_round(low),
                contrast_ci_high=_round(high),
                p_value=term.p_value,
                ci_status=term.interval.status.value,
                ci_reason=term.interval.reason,
                aliases=term.aliased_with,
            )
        )
    cells = []
    for arm in design.arms:
        values = [w.value for w in worlds.get(arm.label, ()) if w.value is not None]
        cells.append(
            FactorialCell(
                arm.label,
                arm.level_labels,
                len(values),
                _round(sum(values) / len(values)) if values else None,
            )
        )
    return FactorialResult(
        metric=metric,
        label=label,
        factors=design.names,
        scale=fit.scale,
        method=fit.method,
        library=fit.library,
        n_worlds=fit.n_worlds,
        n_replicates=fit.n_replicates,
        intercept=_round(fit.intercept),
        effects=tuple(effects),
        cells=tuple(cells),
        note=fit.note,
    )


def stopping_result(
    stopping: Stopping,
    *,
    replicates: int,
    scale: MetricScale,
    control: Sequence[WorldInput],
    treatment: Sequence[WorldInput],
) -> StoppingResult:
    """The looks taken: the schedule's replicate counts up to ``replicates`` whose worlds are
    all done (a world still running or not measured yet holds its look back)."""
    by_control = {w.replicate: w for w in control}
    by_treatment = {w.replicate: w for w in treatment}
    pending = {"world_running", "not_measured"}
    ready = 0
    for replicate in range(1, replicates + 1):
        pair = (by_control.get(replicate), by_treatment.get(replicate))
        if any(w is None or w.missing_reason in pending for w in pair):
            break
        ready = replicate
    counts = [
        c
        for c in look_schedule(stopping.start, stopping.every, stopping.max_replicates)
        if c <= ready
    ]
    looks: tuple[StoppingLook, ...] = ()
    reason = None
    if counts:
        found = sequential_test(
            scale,
            [by_control[i].value for i in range(1, counts[-1] + 1)],
            [by_treatment[i].value for i in range(1, counts[-1] + 1)],
            looks=_until_stopped(scale, stopping, counts, by_control, by_treatment),
            alpha=stopping.alpha,
            max_replicates=stopping.max_replicates,
        )
        looks = tuple(
            StoppingLook(
                look.replicates,
                look.pairs,
                look.e_value,
                look.log_e_value,
                look.boundary,
                look.decision.value,
            )
            for look in found.looks
        )
        reason = {Decision.REJECTED: STOPPED_EARLY, Decision.MAX_REACHED: MAX_REPLICATES}.get(
            found.decision
        )
    return StoppingResult(
        test=METHOD,
        null=NULL,
        metric=stopping.metric,
        treatment=stopping.treatment,
        alpha=stopping.alpha,
        every=stopping.every,
        max_replicates=stopping.max_replicates,
        looks=looks,
        reason=reason,
    )


def _until_stopped(
    scale: MetricScale,
    stopping: Stopping,
    counts: Sequence[int],
    control: Mapping[int, WorldInput],
    treatment: Mapping[int, WorldInput],
) -> list[int]:
    """The looks up to the first that stopped (a rule that rejected takes no later look)."""
    taken: list[int] = []
    for count in counts:
        taken.append(count)
        result = sequential_test(
            scale,
            [control[i].value for i in range(1, count + 1)],
            [treatment[i].value for i in range(1, count + 1)],
            looks=taken,
            alpha=stopping.alpha,
            max_replicates=stopping.max_replicates,
        )
        if result.decision is not Decision.CONTINUE:
            break
    return taken
