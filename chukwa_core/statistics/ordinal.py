"""Ordinal metrics (a judge's integer scale): an arm's mean with the rescaled Wilson interval
(inside the scale); a pair of arms by the Wilcoxon signed-rank test (exact at any number of
pairs, ties included) and the matched-pairs rank-biserial correlation, beside the mean difference and its paired t interval (inside ± the scale's width);
power by the paired t test."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chukwa_core.statistics.arm_intervals import range_interval
from chukwa_core.statistics.libraries import checked_against, library
from chukwa_core.statistics.numeric import compare_means, summarize, t_power
from chukwa_core.statistics.pairs import small_sample_note
from chukwa_core.statistics.registry import register
from chukwa_core.statistics.types import (
    ArmSummary,
    EffectSize,
    MetricScale,
    MetricType,
    PairedEffect,
    PowerAnswer,
    TestResult,
)

WILCOXON_EXACT = (
    "Wilcoxon signed-rank test, zero differences dropped, ties by average ranks, exact: the null "
    "distribution of the positive-rank sum over all 2^m sign patterns by recursion over the "
    "ranks (numpy; the same p as scipy.stats.wilcoxon, exact or PermutationMethod)"
)

RANK_BISERIAL = (
    "matched-pairs rank-biserial correlation (R+ - R-)/(R+ + R-) over the non-zero differences' "
    "average ranks (scipy.stats.rankdata)"
)


def signed_rank_exact_p(nonzero: np.ndarray) -> float:
    """Two-sided p = 2·min(P(T+ ≤ t), P(T+ ≥ t)) (at most 1), T+ the sum of the positive
    differences' ranks. Doubled average ranks are whole numbers, so the distribution of T+ over
    the 2^m equally likely sign patterns is a convolution over integers: exact at any m, with no
    enumeration of patterns."""
    from scipy import stats

    doubled = np.rint(2 * stats.rankdata(np.abs(nonzero))).astype(int)
    probability = np.zeros(int(doubled.sum()) + 1)
    probability[0] = 1.0
    for rank in doubled:  # each rank is in T+ or not, with probability 1/2
        shifted = np.zeros_like(probability)
        shifted[rank:] = probability[:-rank]
        probability = 0.5 * (probability + shifted)
    observed = int(doubled[nonzero > 0].sum())
    less, greater = probability[: observed + 1].sum(), probability[observed:].sum()
    return float(min(1.0, 2 * min(less, greater)))


def wilcoxon_test(differences: np.ndarray) -> TestResult:
    lib = checked_against("scipy")
    note = small_sample_note(len(differences))
    reach = note is None
    if len(differences) == 0:
        return TestResult(None, WILCOXON_EXACT, lib, True, reach, note="no complete pairs")
    nonzero = differences[differences != 0]
    p = signed_rank_exact_p(nonzero) if len(nonzero) else 1.0
    return TestResult(p, WILCOXON_EXACT, lib, True, reach, note=note)


def rank_biserial(differences: np.ndarray) -> float | None:
    from scipy import stats

    nonzero = differences[differences != 0]
    if len(nonzero) == 0:
        return None
    ranks = stats.rankdata(np.abs(nonzero))
    positive, negative = ranks[nonzero > 0].sum(), ranks[nonzero < 0].sum()
    return float((positive - negative) / (positive + negative))


def _rank_biserial_size(differences: np.ndarray) -> tuple[EffectSize, ...]:
    return (
        EffectSize(
            "matched-pairs rank-biserial",
            rank_biserial(differences),
            RANK_BISERIAL,
            library("scipy"),
        ),
    )


class OrdinalStatistics:
    metric_type = MetricType.ORDINAL

    def summarize(self, scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
        return summarize(scale, values, lambda present: range_interval(scale, present))

    def compare(
        self,
        scale: MetricScale,
        control: Sequence[float | None],
        treatment: Sequence[float | None],
        *,
        seed: int,
    ) -> PairedEffect:
        return compare_means(
            scale,
            control,
            treatment,
            test=wilcoxon_test,
            effect_sizes=_rank_biserial_size,
        )

    def power(
        self, *, effect: float, sd: float, alpha: float, power: float, n: int | None
    ) -> PowerAnswer:
        return t_power(effect=effect, sd=sd, alpha=alpha, power=power, n=n)


register(OrdinalStatistics())
