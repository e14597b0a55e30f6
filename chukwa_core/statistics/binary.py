"""Binary metrics (values 0/1): an arm's proportion with the Wilson score interval; a pair of
arms by the risk difference with Newcombe's paired interval (his method 10), the exact McNemar
test (binomial on the discordant pairs) and the risk ratio; power of the exact McNemar test by
exact enumeration."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from chukwa_core.statistics.arm_intervals import wilson
from chukwa_core.statistics.libraries import checked_against, library
from chukwa_core.statistics.pairs import (
    mean_or_none,
    pair_up,
    reconcile,
    small_sample_note,
)
from chukwa_core.statistics.registry import register
from chukwa_core.statistics.types import (
    ArmSummary,
    EffectSize,
    Interval,
    IntervalStatus,
    MetricScale,
    MetricType,
    PairedEffect,
    PowerAnswer,
    TestResult,
)

WILSON = (
    "Wilson score interval (its formula, as statsmodels.stats.proportion.proportion_confint "
    "with method='wilson' gives it)"
)
NEWCOMBE = (
    "Newcombe's paired square-and-add interval (method 10: Wilson limits of each arm, "
    "continuity-corrected phi)"
)
MCNEMAR = (
    "exact McNemar test: two-sided binomial test on the discordant pairs "
    "(statsmodels.stats.contingency_tables.mcnemar, exact=True)"
)
RISK_RATIO = "treatment proportion over control proportion (complete pairs)"
POWER_METHOD = (
    "power of the two-sided exact McNemar test at alpha, by exact enumeration over the number "
    "of discordant pairs (scipy.stats.binom); discordant share = sd² + effect²"
)
MAX_POWER_N = 5000
Z = 1.959963984540054  # scipy.stats.norm.ppf(0.975)


def _wilson(count: float, n: int) -> tuple[float, float]:
    return wilson(count, n, Z)


def _check(values: np.ndarray) -> None:
    if not np.all((values == 0) | (values == 1)):
        raise ValueError("a binary metric's values are 0 or 1")


def newcombe_paired(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """Newcombe's method 10 for p1 - p2 from a paired 2x2 table: ``a`` both 1, ``b`` first 1
    only, ``c`` second 1 only, ``d`` both 0 (p1 = (a+b)/n, p2 = (a+c)/n)."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = _wilson(a + b, n)
    l2, u2 = _wilson(a + c, n)
    product = (a + b) * (c + d) * (a + c) * (b + d)
    phi = 0.0
    if product > 0:
        cross = a * d - b * c
        # Newcombe's continuity correction of phi: shrunk toward 0 when positive
        corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = corrected / math.sqrt(product)
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, p1 - p2 - delta), min(1.0, p1 - p2 + epsilon)


def mcnemar_exact(b: int, c: int) -> float:
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar([[0, b], [c, 0]], exact=True).pvalue)


class BinaryStatistics:
    metric_type = MetricType.BINARY

    def summarize(self, scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
        present = np.array([v for v in values if v is not None], dtype=float)
        _check(present)
        n, missing = len(present), len(values) - len(present)
        lib = checked_against("statsmodels")
        if n == 0:
            none = Interval(None, None, IntervalStatus.UNAVAILABLE, WILSON, lib, reason="no values")
            return ArmSummary(0, missing, None, None, none)
        low, high = _wilson(float(present.sum()), n)
        sd = float(present.std(ddof=1)) if n > 1 else None
        shown = Interval(low, high, IntervalStatus.SHOWN, WILSON, lib)
        return ArmSummary(n, missing, float(present.mean()), sd, shown)

    def compare(
        self,
        scale: MetricScale,
        control: Sequence[float | None],
        treatment: Sequence[float | None],
        *,
        seed: int,
    ) -> PairedEffect:
        pairs = pair_up(control, treatment)
        _check(pairs.control)
        _check(pairs.treatment)
        n = pairs.n
        note = small_sample_note(n)
        if n == 0:
            test = TestResult(None, MCNEMAR, library("statsmodels"), True, False, note=note)
            interval = Interval(
                None, None, IntervalStatus.UNAVAILABLE, NEWCOMBE, checked_against("statsmodels"),
                reason="no complete pairs",
            )  # fmt: skip
            return PairedEffect(
                MetricType.BINARY, 0, pairs.n_dropped, None, None, None, interval, test, ()
            )
        t, c = pairs.treatment.astype(int), pairs.control.astype(int)
        both = int(np.sum((t == 1) & (c == 1)))
        only_t = int(np.sum((t == 1) & (c == 0)))
        only_c = int(np.sum((t == 0) & (c == 1)))
        neither = n - both - only_t - only_c
        p = mcnemar_exact(only_t, only_c)
        test = TestResult(
            p, MCNEMAR, library("statsmodels", "scipy"), True, note is None, note=note
        )
        low, high = newcombe_paired(both, only_t, only_c, neither)
        interval = reconcile(
            Interval(low, high, IntervalStatus.SHOWN, NEWCOMBE, checked_against("statsmodels")),
            test,
        )
        p_t, p_c = float(t.mean()), float(c.mean())
        ratio = EffectSize("risk ratio", p_t / p_c if p_c > 0 else None, RISK_RATIO, "numpy")
        return PairedEffect(
            MetricType.BINARY,
            n,
            pairs.n_dropped,
            mean_or_none(pairs.control),
            mean_or_none(pairs.treatment),
            p_t - p_c,
            interval,
            test,
            (ratio,),
        )

    def power(
        self, *, effect: float, sd: float, alpha: float, power: float, n: int | None
    ) -> PowerAnswer:
        discordant = sd**2 + effect**2
        if not 0 < discordant <= 1 or abs(effect) > discordant:
            raise ValueError(
                "for a binary metric the paired differences (-1, 0, 1) need "
                "|effect| ≤ sd² + effect² ≤ 1"
            )
        needed = next(
            (k for k in range(1, MAX_POWER_N + 1) if mcnemar_power(k, effect, sd, alpha) >= power),
            None,
        )
        return PowerAnswer(
            effect,
            sd,
            alpha,
            power,
            needed,
            n,
            mcnemar_power(n, effect, sd, alpha) if n is not None else None,
            POWER_METHOD,
            library("scipy"),
            note=None if needed is not None else f"more than {MAX_POWER_N} pairs",
        )


def mcnemar_power(n: int, effect: float, sd: float, alpha: float) -> float:
    """P(exact McNemar p < alpha) with n pairs, P(discordant) = sd² + effect² and
    P(treatment-only) - P(control-only) = effect."""
    from scipy import stats

    discordant = sd**2 + effect**2
    share = (discordant + effect) / (2 * discordant)  # P(treatment-only | discordant)
    d = np.arange(n + 1)
    # the largest k with 2·P(X ≤ k) < alpha under X ~ Binomial(d, 1/2); the region is symmetric
    k_low = stats.binom.ppf(alpha / 2, d, 0.5) - 1
    k_low = np.where(2 * stats.binom.cdf(k_low + 1, d, 0.5) < alpha, k_low + 1, k_low)
    reject = stats.binom.cdf(k_low, d, share) + stats.binom.sf(d - k_low - 1, d, share)
    reject = np.where(k_low >= 0, reject, 0.0)
    return float(np.sum(stats.binom.pmf(d, n, discordant) * reject))


register(BinaryStatistics())
