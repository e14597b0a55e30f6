"""An experiment's results from its worlds' values (docs/experiments.md, "Results, honestly";
docs/statistics.md): per metric and arm a summary whose interval never leaves the metric's range,
per treatment arm the paired effect by the metric's type, Holm's adjustment over every (arm,
metric) comparison, and the methods paragraph. The database is read elsewhere
(``worlds_app/experiment_results.py``); the calibration bench calls the same functions on
simulated worlds. Pure: no Django."""

from __future__ import annotations

import platform
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from chukwa_core.experiment_results_types import (
    ArmResult,
    Effect,
    EffectSizeValue,
    FactorialResult,
    HistoryEntry,
    MetricResult,
    Missing,
    ResultMetric,
    Software,
    StoppingResult,
    TurnPoint,
    WorldValue,
)
from chukwa_core.metric_types import scale_label
from chukwa_core.statistics import (
    ArmSummary,
    MetricScale,
    MetricType,
    compare_pairs,
    holm,
    summarize_arm,
)
from chukwa_core.statistics.libraries import version
from chukwa_core.statistics.multiplicity import HOLM
from chukwa_core.statistics.pairs import RESAMPLES


def chukwa_version() -> str:
    """Chukwa's version, as pyproject.toml (its one home) says it."""
    return str(tomllib.loads(PYPROJECT.read_text())["project"]["version"])


PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
MISSING_REASONS = ("world_incomplete", "world_running", "metric_error", "not_measured")
MISSING_DATA_RULE = (
    "A world that stopped short of its last planned turn is missing for every metric "
    "(world_incomplete; world_running while it still runs); a world whose metric erred on any "
    "of its turns is missing for that metric (metric_error), as is one with a turn not measured "
    "yet (not_measured): no value is aggregated from part of a world's turns. Effects use "
    "complete pairs only; pairs with one side missing are dropped and counted."
)


@dataclass(frozen=True)
class MetricInput:
    """A metric as the analysis needs it."""

    hash: str
    label: str
    aggregate: str
    turn_scale: MetricScale
    world_scale: MetricScale
    type_basis: str
    primary: bool
    added_after_creation: bool


@dataclass(frozen=True)
class WorldInput:
    """One world's value of one metric, or why it has none."""

    replicate: int
    slug: str
    value: float | None
    missing_reason: str | None


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 12)


def fitting_scale(scale: MetricScale, values: Sequence[float]) -> tuple[MetricScale, str]:
    """The scale the values fit: ``scale`` itself, or — values that are not whole numbers on an
    ordinal or count scale (a judge's mean score, old rows) — continuous within its bounds."""
    try:
        scale.check_all(values)
    except ValueError as exc:
        if scale.type in (MetricType.ORDINAL, MetricType.COUNT):
            wider = MetricScale.continuous(scale.low, scale.high)
            try:
                wider.check_all(values)
            except ValueError:
                return MetricScale.continuous(), f"treated as unbounded continuous: {exc}"
            return wider, f"treated as {scale_label(wider)}: {exc}"
        return MetricScale.continuous(), f"treated as unbounded continuous: {exc}"
    return scale, ""


def _turn_points(
    scale: MetricScale, by_turn: Mapping[int, Sequence[float]], turns: range
) -> tuple[TurnPoint, ...]:
    points = []
    for number in turns:
        values = list(by_turn.get(number, ()))
        fit, _ = fitting_scale(scale, values)
        summary = summarize_arm(fit, values)
        shown = summary.interval.shown
        points.append(
            TurnPoint(
                turn=number,
                n=summary.n,
                mean=_round(summary.mean),
                ci_low=_round(summary.interval.low) if shown else None,
                ci_high=_round(summary.interval.high) if shown else None,
            )
        )
    return tuple(points)


def _arm_result(
    arm: str,
    summary: ArmSummary,
    worlds: Sequence[WorldInput],
    per_turn: tuple[TurnPoint, ...],
) -> ArmResult:
    reasons = [w.missing_reason for w in worlds if w.value is None and w.missing_reason]
    interval = summary.interval
    shown = interval.shown
    return ArmResult(
        arm=arm,
        n=summary.n,
        n_missing=len(worlds) - summary.n,
        missing=Missing(*(reasons.count(name) for name in MISSING_REASONS)),
        mean=_round(summary.mean),
        sd=_round(summary.sd),
        ci_low=_round(interval.low) if shown else None,
        ci_high=_round(interval.high) if shown else None,
        ci_status=interval.status.value,
        ci_reason=interval.reason,
        ci_method=interval.method,
        ci_library=interval.library,
        per_turn=per_turn,
        worlds=tuple(
            WorldValue(w.replicate, w.slug, _round(w.value), w.missing_reason) for w in worlds
        ),
    )


def _effect(
    arm: str,
    control: str,
    scale: MetricScale,
    base: Sequence[WorldInput],
    treated: Sequence[WorldInput],
    *,
    seed: int,
    primary: bool,
    late: bool,
) -> Effect:
    paired = compare_pairs(scale, [w.value for w in base], [w.value for w in treated], seed=seed)
    interval, test = paired.interval, paired.test
    shown = interval.shown
    notes = [n for n in (test.note, None if shown else interval.reason) if n]
    return Effect(
        arm=arm,
        control=control,
        n_pairs=paired.n_pairs,
        n_dropped=paired.n_dropped,
        control_mean=_round(paired.control_mean),
        treatment_mean=_round(paired.treatment_mean),
        difference=_round(paired.difference),
        ci_low=_round(interval.low) if shown else None,
        ci_high=_round(interval.high) if shown else None,
        ci_status=interval.status.value,
        ci_reason=interval.reason,
        ci_method=interval.method,
        ci_library=interval.library,
        p_value=_round(test.p_value),
        p_display=test.display,
        p_holm=None,  # set over the whole experiment (with_holm)
        p_method=test.method,
        p_library=test.library,
        p_exact=test.exact,
        p_resamples=test.resamples,
        p_seed=test.seed,
        p_monte_carlo_se=_round(test.monte_carlo_se),
        can_reach_significance=test.can_reach_alpha,
        note="; ".join(notes) or None,
        effect_sizes=tuple(
            EffectSizeValue(e.name, _round(e.value), e.method) for e in paired.effect_sizes
        ),
        primary=primary,
        added_after_creation=late,
    )


def metric_result(
    metric: MetricInput,
    *,
    arms: Sequence[str],
    control: str,
    worlds: Mapping[str, Sequence[WorldInput]],
    by_turn: Mapping[str, Mapping[int, Sequence[float]]],
    turns: range,
    seed: int,
    registered_replicates: int,
) -> MetricResult:
    """One metric: each arm's summary and per-turn points, each treatment arm's effect. The
    worlds of each arm are in replicate order (replicate i of every arm paired)."""
    values = [w.value for arm in arms for w in worlds[arm] if w.value is not None]
    scale, note = fitting_scale(metric.world_scale, values)
    summaries = {arm: summarize_arm(scale, [w.value for w in worlds[arm]]) for arm in arms}
    effects = []
    for arm in arms:
        if arm == control:
            continue
        late = metric.added_after_creation or any(
            w.replicate > registered_replicates and w.value is not None and c.value is not None
            for w, c in zip(worlds[arm], worlds[control], strict=True)
        )
        effects.append(
            _effect(
                arm,
                control,
                scale,
                worlds[control],
                worlds[arm],
                seed=seed,
                primary=metric.primary,
                late=late,
            )
        )
    turn_method = summarize_arm(metric.turn_scale, []).interval.method
    basis = metric.type_basis if not note else f"{metric.type_basis}; {note}"
    return MetricResult(
        metric=ResultMetric(
            hash=metric.hash,
            label=metric.label,
            aggregate=metric.aggregate,
            type=scale.type.value,
            type_label=scale_label(scale),
            type_basis=basis,
            range_low=scale.low,
            range_high=scale.high,
            turn_type_label=scale_label(metric.turn_scale),
            primary=metric.primary,
            added_after_creation=metric.added_after_creation,
        ),
        arms=tuple(
            _arm_result(
                arm,
                summaries[arm],
                worlds[arm],
                _turn_points(metric.turn_scale, by_turn.get(arm, {}), turns),
            )
            for arm in arms
        ),
        effects=tuple(effects),
        per_turn_ci_method=f"pointwise: {turn_method}",
    )


def with_holm(results: Sequence[MetricResult]) -> tuple[tuple[MetricResult, ...], str]:
    """Holm's adjusted p beside each raw p, over every (arm, metric) comparison with a p."""
    raw = [e.p_value for r in results for e in r.effects]
    adjusted = iter(holm(raw).adjusted)
    family = sum(p is not None for p in raw)
    done = tuple(
        replace(r, effects=tuple(replace(e, p_holm=_round(next(adjusted))) for e in r.effects))
        for r in results
    )
    return done, f"{HOLM}, over the experiment's {family} (arm, metric) comparisons with a p"


def software() -> Software:
    return Software(
        chukwa=chukwa_version(),
        python=platform.python_version(),
        numpy=version("numpy"),
        scipy=version("scipy"),
        statsmodels=version("statsmodels"),
    )


def _join(items: Sequence[str]) -> str:
    items = list(dict.fromkeys(items))
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


@dataclass(frozen=True)
class DesignFacts:
    """What the methods paragraph says of the design."""

    experiment: str
    arms: Sequence[str]
    control: str
    replicates: int
    registered_replicates: int
    turns: int
    first_turn: int
    seed: int
    models: Sequence[str]
    registered_hash: str
    reuse: str = "exact"  # the worlds' reuse (docs/costs.md): "exact" | "off"
    mode: str = "online"  # how the model requests went: "online" | "batch"


def _requests_sentence(reuse: str, mode: str) -> str:
    """How the model requests were made: what a reader needs to reproduce the run's costs and
    to know that an identical request was answered once (reuse) and when (batch)."""
    sent = (
        "sent through the provider's Batch API, at its batch prices, each turn's requests "
        "waiting for their batch"
        if mode == "batch"
        else "sent one at a time as each turn ran"
    )
    if reuse == "exact":
        return (
            f"Model requests were {sent}; a request identical to one already answered in this "
            "deployment (same endpoint, model, messages, parameters and seed) was answered from "
            "that record instead of being sent again (reuse 'exact')."
        )
    return f"Model requests were {sent}; every request was sent, none answered from a record."


def _factorial_sentences(design_text: str, fits: Sequence[FactorialResult]) -> list[str]:
    """What a factorial design adds: how its arms were made (the fraction and its aliasing, as
    the design states them) and how the effects were estimated."""
    parts = [
        "The arms were made from factors whose levels fork one base scenario; the control is the "
        f"arm at every factor's first level. Design: {design_text.replace(chr(10), '; ').rstrip('.')}."
    ]
    for fit in fits:
        parts.append(
            f"For {fit.label}, main effects and interactions were estimated by {fit.method} "
            f"({fit.library}) on effect-coded factors (a two-level factor's first level -1, its "
            f"second +1; coefficients on the {fit.scale} scale) over {fit.n_worlds} worlds, with "
            "standard errors clustered by replicate (the arms of a replicate share a seed) and "
            f"95% intervals on t with G - 1 degrees of freedom (G = {fit.n_replicates})."
        )
    return parts


def _stopping_sentences(stopping: StoppingResult, metric_label: str) -> list[str]:
    """What a stopping rule adds: its schedule, its test and boundary, the looks taken, why the
    experiment ended, and that the fixed-n tests are not the valid test after stopping early."""
    ended = {
        "stopped_early": "it stopped early when the boundary was reached",
        "max_replicates": "it ran to the maximum without reaching the boundary",
        None: "the rule had not ended when these results were read",
    }[stopping.reason]
    last = stopping.looks[-1].replicates if stopping.looks else 0
    return [
        f"Replicates were added {stopping.every} at a time up to {stopping.max_replicates}; at "
        f"each look {stopping.test} tested {stopping.null} on {metric_label} ({stopping.treatment} "
        f"against the control), rejecting when the e-value reached 1/alpha = "
        f"{1 / stopping.alpha:g}. {len(stopping.looks)} looks were taken (the last at {last} "
        f"replicates) and {ended}. The e-value is valid at every look; the fixed-sample tests "
        "and intervals above are computed at the final sample size without adjustment for the "
        "optional stopping and should be read as descriptive."
    ]


def methods_paragraph(
    facts: DesignFacts,
    results: Sequence[MetricResult],
    history: Sequence[HistoryEntry],
    multiplicity: str,
    *,
    design_text: str | None = None,
    factorial: Sequence[FactorialResult] = (),
    stopping: StoppingResult | None = None,
) -> str:
    """A paragraph naming the design and every method, ready to paste into a paper (with a
    factorial design's fraction and estimation, and a stopping rule's test and looks)."""
    first, last = facts.first_turn + 1, facts.first_turn + facts.turns
    start = "" if facts.first_turn == 0 else f" (branched at turn {facts.first_turn})"
    treated = [a for a in facts.arms if a != facts.control]
    parts = [
        f"Experiment {facts.experiment} compared {len(facts.arms)} arms ({_join(treated)}, "
        f"each against the control arm '{facts.control}') over {facts.replicates} replicates "
        "per arm, "
        "paired by seed: replicate i of every arm ran with the same seed, derived from the "
        f"experiment seed {facts.seed}. Each world ran turns {first} to {last}{start}; turn "
        f"{facts.first_turn}, the baseline, was measured but not aggregated."
    ]
    if design_text is not None:
        parts.extend(_factorial_sentences(design_text, factorial))
    if stopping is not None:
        labels = {r.metric.hash: r.metric.label for r in results}
        parts.extend(_stopping_sentences(stopping, labels.get(stopping.metric, stopping.metric)))
    if facts.models:
        parts.append(f"Models: {_join(list(facts.models))}.")
        parts.append(_requests_sentence(facts.reuse, facts.mode))
    for result in results:
        m = result.metric
        flags = " (primary)" if m.primary else ""
        flags += " (added after the experiment was created)" if m.added_after_creation else ""
        parts.append(
            f"Metric {m.label}{flags} (hash {m.hash[:12]}): a world's value aggregates its turns' "
            f"values ({m.turn_type_label}) by '{m.aggregate}' and is analysed as {m.type_label} "
            f"({m.type_basis})."
        )
    arm_methods = [f"{a.ci_method} ({a.ci_library})" for r in results for a in r.arms]
    tests = [f"{e.p_method} ({e.p_library})" for r in results for e in r.effects]
    intervals = [f"{e.ci_method} ({e.ci_library})" for r in results for e in r.effects]
    if arm_methods:
        parts.append(f"Each arm's 95% interval: {_join(arm_methods)}.")
    if tests:
        parts.append(
            "Paired effects (treatment minus control, complete pairs only) were tested with "
            f"{_join(tests)}, with 95% intervals by {_join(intervals)}; an interval that would "
            "contradict its test's p is withheld, and a row whose pairs cannot reach p < 0.05 "
            "says so."
        )
    if any(not e.p_exact and e.p_resamples for r in results for e in r.effects):
        parts.append(
            f"Monte Carlo p-values used {RESAMPLES} resamples seeded with the experiment seed "
            f"{facts.seed}; a p at the resampling floor is reported as < 1/(B+1)."
        )
    parts.append(f"Multiplicity: {multiplicity}.")
    parts.append(MISSING_DATA_RULE)
    registered = (
        f"The design was registered when the experiment was created (hash "
        f"{facts.registered_hash[:16]}…, {facts.registered_replicates} replicates)"
    )
    if history:
        changes = "; ".join(f"{h.at[:19]}: {h.change} {h.detail}" for h in history)
        parts.append(f"{registered}; changed after creation: {changes}.")
    else:
        parts.append(f"{registered}; nothing was changed after creation.")
    return " ".join(parts)
