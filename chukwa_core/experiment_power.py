"""How many replicates a design needs (docs/experiments.md, "How many replicates do I need?"):
the request (``PowerRequest``: a metric of the design, the effect to detect, alpha, the power
wanted, and the paired differences' spread, given or read from a pilot experiment) and the
answer (``PowerEstimate``), both typed. The figures come from the statistics layer's
``power_for`` (statsmodels' paired t power for count, ordinal and continuous metrics, the exact
McNemar power for binary ones); nothing here computes power. Pure: no Django."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chukwa_core.experiment_results_types import doc
from chukwa_core.ids import Hash, Label
from chukwa_core.statistics import MetricScale, power_for
from chukwa_core.statistics.types import ALPHA

POWER = 0.8
POWER_FIELDS = ("metric", "effect", "alpha", "power", "sd", "pilot")
# What ``sd`` means, by the world's type (the API's help text says it too).
SD_MEANING = (
    "the standard deviation of the paired differences (treatment minus control world values); "
    "for a binary metric the differences are -1, 0 or 1 and sd² + effect² is the share of "
    "discordant pairs (one arm 1, the other 0), so |effect| ≤ sd² + effect² ≤ 1"
)


@dataclass(frozen=True)
class PowerRequest:
    """A validated ``power`` request: ``sd`` given, or ``pilot`` (an experiment's slug)."""

    metric: str  # a hash of one of the design's metrics
    effect: float
    alpha: float = ALPHA
    power: float = POWER
    sd: float | None = None
    pilot: str | None = None


@dataclass(frozen=True)
class PilotSpread:
    """The paired differences' sd read from a pilot: the arm pair it came from, its pairs."""

    sd: float
    arm: str
    control: str
    pairs: int
    others: tuple[tuple[str, float], ...] = ()  # every treatment arm's sd, when there are several


def pilot_spread(
    control: str, arms: Mapping[str, Sequence[float | None]], *, slug: str
) -> PilotSpread | str:
    """The largest sd of treatment - control over complete pairs among the pilot's treatment
    arms (``arms[label][i]``: replicate i+1's world value, None when missing), or why there is
    none (fewer than 2 complete pairs in every arm, no spread)."""
    if not any(label != control for label in arms):
        return f"experiment {slug!r} has a single arm: no paired differences"
    base = arms[control]
    spreads: list[tuple[float, str, int]] = []
    most_pairs = 0
    for label, values in arms.items():
        if label == control:
            continue
        differences = [
            t - c for t, c in zip(values, base, strict=False) if t is not None and c is not None
        ]
        most_pairs = max(most_pairs, len(differences))
        if len(differences) >= 2:
            spreads.append((statistics.stdev(differences), label, len(differences)))
    if not spreads:
        return (
            f"experiment {slug!r} has {most_pairs} complete pair{'s' if most_pairs != 1 else ''} "
            "for this metric; the paired differences' sd needs at least 2"
        )
    sd, arm, pairs = max(spreads)
    if sd == 0:
        return f"the paired differences in experiment {slug!r} do not vary (sd 0): give sd instead"
    others = tuple((label, value) for value, label, _ in spreads) if len(spreads) > 1 else ()
    return PilotSpread(sd, arm, control, pairs, others)


@dataclass(frozen=True)
class PowerMetric:
    hash: Hash
    label: Label


@dataclass(frozen=True)
class PowerEstimate:
    """Replicates (pairs) needed to detect ``effect`` with ``power_target`` at ``alpha``, and the
    power of the design's own replicates."""

    metric: PowerMetric
    type: str = field(metadata=doc("the world value's type: binary, count, ordinal, continuous"))
    effect: float = field(metadata=doc("the paired difference to detect (treatment − control)"))
    alpha: float
    power_target: float
    sd: float = field(metadata=doc(SD_MEANING))
    sd_source: str = field(metadata=doc('"given", or "pilot <slug>: n pairs (<arm> − <control>)…"'))
    replicates: int = field(metadata=doc("the design's replicates per arm"))
    replicates_needed: int | None = field(
        metadata=doc("null: more than the method searches (its note says how many)")
    )
    power_of_design: float | None = field(metadata=doc("the power at the design's replicates"))
    method: str = field(metadata=doc("the method, with its library and version"))
    note: str | None


def power_estimate(
    request: PowerRequest,
    *,
    metric: PowerMetric,
    scale: MetricScale,
    replicates: int,
    sd: float,
    sd_source: str,
) -> PowerEstimate:
    """The answer of ``power_for`` for the world's type; a ValueError (an sd a binary metric
    cannot have) is the caller's 400."""
    answer = power_for(
        scale,
        effect=request.effect,
        sd=sd,
        alpha=request.alpha,
        power=request.power,
        n=replicates,
    )
    return PowerEstimate(
        metric=metric,
        type=scale.type.value,
        effect=request.effect,
        alpha=request.alpha,
        power_target=request.power,
        sd=sd,
        sd_source=sd_source,
        replicates=replicates,
        replicates_needed=answer.n_needed,
        power_of_design=answer.power_of_given,
        method=f"{answer.method}; {answer.library}",
        note=answer.note,
    )


def spread_source(spread: PilotSpread, slug: str) -> str:
    """``pilot <slug>: n pairs (<arm> - <control>)``, and which arm when there were several."""
    text = f"pilot {slug}: {spread.pairs} pairs ({spread.arm} − {spread.control})"
    if spread.others:
        each = ", ".join(f"{label} {value:.4g}" for label, value in spread.others)
        text += f"; the largest sd of its {len(spread.others)} treatment arms ({each})"
    return text
