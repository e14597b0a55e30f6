"""Ordinal metrics (a judge's integer scale): an arm's mean with the rescaled Wilson interval
(inside the scale); a pair of arms by the Wilcoxon signed-rank test (exact while the non-zero
differences' sign patterns number at most 10^6) and the matched-pairs rank-biserial
correlation, beside the mean difference and its paired t interval (inside ± the scale's width);
power by the paired t test."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from chukwa_core.statistics.arm_intervals import range_interval
from chukwa_core.statistics.libraries import library
from chukwa_core.statistics.numeric import compare_means, summarize, t_power
from chukwa_core.statistics.pairs import EXACT_MAX_PATTERNS, RESAMPLES, small_sample_note
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
    "Wilcoxon signed-rank test, zero differences dropped, exact: all 2^m sign patterns of the m "
    "non-zero differences, ties by average ranks (scipy.stats.wilcoxon, PermutationMethod)"
)
WILCOXON_MONTE_CARLO = (
    "Wilcoxon signed-rank test, zero differences dropped, Monte Carlo: {resamples} random sign "
    "patterns, seed {seed} (scipy.stats.wilcoxon, PermutationMethod)"
)
RANK_BISERIAL = (
    "matched-pairs rank-biserial correlation (R+ - R-)/(R+ + R-) over the non-zero differences' "
    "average ranks (scipy.stats.rankdata)"
)


def wilcoxon_test(differences: np.ndarray, *, seed: int, resamples: int = RESAMPLES) -> TestResult:
    from scipy import stats

    lib = library("scipy")
    note = small_sample_note(len(differences))
    reach = note is None
    if len(differences) == 0:
        return TestResult(None, WILCOXON_EXACT, lib, True, reach, note="no complete pairs")
    nonzero = np.sort(differences[differences != 0])  # canonical order: replicate order is moot
    m = len(nonzero)
    if m == 0:
        return TestResult(1.0, WILCOXON_EXACT, lib, True, reach, note=note)
    exact = 2**m <= EXACT_MAX_PATTERNS
    method = stats.PermutationMethod(
        n_resamples=2**m if exact else resamples, rng=np.random.default_rng(seed)
    )
    p = float(stats.wilcoxon(nonzero, zero_method="wilcox", method=method).pvalue)
    if exact:
        return TestResult(p, WILCOXON_EXACT, lib, True, reach, note=note)
    return TestResult(
        p,
        WILCOXON_MONTE_CARLO.format(resamples=resamples, seed=seed),
        lib,
        False,
        reach,
        resamples=resamples,
        seed=seed,
        monte_carlo_se=math.sqrt(p * (1 - p) / resamples),
        at_floor=p <= 1 / (resamples + 1) * (1 + 1e-9),
        note=note,
    )


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
            test=lambda differences: wilcoxon_test(differences, seed=seed),
            effect_sizes=_rank_biserial_size,
        )

    def power(
        self, *, effect: float, sd: float, alpha: float, power: float, n: int | None
    ) -> PowerAnswer:
        return t_power(effect=effect, sd=sd, alpha=alpha, power=power, n=n)


register(OrdinalStatistics())
