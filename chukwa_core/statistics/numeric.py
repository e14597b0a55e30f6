"""What the count, ordinal and continuous statistics share: an arm's n, mean and sd beside a
range-respecting interval, the mean paired difference with its paired t interval reconciled
with the row's test, and power by the paired t test."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from chukwa_core.statistics.libraries import library
from chukwa_core.statistics.pairs import (
    d_z,
    mean_or_none,
    pair_up,
    paired_t_interval,
    reconcile,
    sign_flip_test,
    smallest_exact_p,
)
from chukwa_core.statistics.types import (
    ArmSummary,
    EffectSize,
    Interval,
    MetricScale,
    PairedEffect,
    PowerAnswer,
    TestResult,
)

T_POWER = (
    "paired t test power (statsmodels.stats.power.TTestPower, two-sided), normal differences, "
    "as the approximation of the rank or sign-flip test; no fewer than the {minimum} pairs "
    "that test needs to reach p < alpha at all"
)
MAX_POWER_N = 100_000


def present_values(scale: MetricScale, values: Sequence[float | None]) -> np.ndarray:
    present = np.array([v for v in values if v is not None], dtype=float)
    scale.check_all(present)
    return present


def summarize(
    scale: MetricScale,
    values: Sequence[float | None],
    interval: Callable[[np.ndarray], Interval],
) -> ArmSummary:
    present = present_values(scale, values)
    n = len(present)
    return ArmSummary(
        n,
        len(values) - n,
        float(present.mean()) if n else None,
        float(present.std(ddof=1)) if n > 1 else None,
        interval(present),
    )


def compare_means(
    scale: MetricScale,
    control: Sequence[float | None],
    treatment: Sequence[float | None],
    *,
    test: Callable[[np.ndarray], TestResult],
    effect_sizes: Callable[[np.ndarray], tuple[EffectSize, ...]],
) -> PairedEffect:
    pairs = pair_up(control, treatment)
    scale.check_all(np.concatenate((pairs.control, pairs.treatment)))
    differences = pairs.differences
    result = test(differences)
    interval = reconcile(paired_t_interval(differences, bound=scale.width), result)
    return PairedEffect(
        scale.type,
        pairs.n,
        pairs.n_dropped,
        mean_or_none(pairs.control),
        mean_or_none(pairs.treatment),
        mean_or_none(differences),
        interval,
        result,
        effect_sizes(differences) if pairs.n else (),
    )


def smallest_n_reaching(alpha: float) -> int:
    return next(n for n in range(1, 64) if smallest_exact_p(n) < alpha)


def t_power(*, effect: float, sd: float, alpha: float, power: float, n: int | None) -> PowerAnswer:
    from statsmodels.stats.power import TTestPower

    size = effect / sd
    minimum = smallest_n_reaching(alpha)
    analysis = TTestPower()
    needed: int | None = minimum
    # a large effect reaches the power at the smallest usable n, where statsmodels' root finder
    # (searching below it) fails to converge: ask it only when that n does not suffice
    if analysis.power(effect_size=size, nobs=minimum, alpha=alpha) < power:
        solved = analysis.solve_power(
            effect_size=size, alpha=alpha, power=power, alternative="two-sided"
        )
        finite = solved is not None and math.isfinite(float(solved))
        needed = min(MAX_POWER_N, max(minimum, math.ceil(float(solved)))) if finite else None
    of_given: float | None = None
    if n is not None:
        # below `minimum` pairs the exact test cannot reject: its power is 0
        of_given = (
            float(analysis.power(effect_size=size, nobs=n, alpha=alpha, alternative="two-sided"))
            if n >= max(2, minimum)
            else 0.0
        )
    return PowerAnswer(
        effect,
        sd,
        alpha,
        power,
        needed,
        n,
        of_given,
        T_POWER.format(minimum=minimum),
        library("statsmodels"),
    )


def d_z_size(differences: np.ndarray) -> tuple[EffectSize, ...]:
    return (
        EffectSize(
            "d_z",
            d_z(differences),
            "mean paired difference over the differences' sd (ddof=1)",
            library("numpy"),
        ),
    )


class MeanDifferenceStatistics:
    """What count and continuous metrics share: the pair compared by the mean paired difference
    with its paired t interval, the sign-flip permutation test and d_z; power by the paired t
    test. A family gives its arm interval (``summarize``)."""

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
            test=lambda differences: sign_flip_test(differences, seed=seed),
            effect_sizes=d_z_size,
        )

    def power(
        self, *, effect: float, sd: float, alpha: float, power: float, n: int | None
    ) -> PowerAnswer:
        return t_power(effect=effect, sd=sd, alpha=alpha, power=power, n=n)
