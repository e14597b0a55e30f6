"""The statistics of an experiment's results: what one arm's worlds say about a metric, and how a
treatment arm differs from the control arm, pair by pair.

- Per arm: the worlds' values of a metric (a world whose value is missing — it failed, or the
  metric erred on every turn it ran — counts in ``n_missing``), their mean, standard deviation
  and a 95% t-interval (``scipy.stats.ttest_1samp``'s ``confidence_interval``).
- Per treatment arm: replicate i of every arm has the same seed, so arms are paired; the
  difference is taken pair by pair (a pair with either side missing is left out), with a 95%
  percentile bootstrap interval over the pairs (``scipy.stats.bootstrap``, paired) and a
  two-sided p-value from the paired sign-flip permutation test (``scipy.stats.permutation_test``
  with ``permutation_type="samples"``): exact up to ``EXACT_MAX_PAIRS`` pairs (every one of the
  2ⁿ sign assignments), else Monte Carlo.

Resampling is seeded (the experiment's seed), so the same data always gives the same numbers.
Pure: scipy and numpy only, imported when first used (they take a second to load).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95
EXACT_MAX_PAIRS = 16
RESAMPLES = 9999
T_INTERVAL = "t interval (scipy.stats.t, as scipy.stats.ttest_1samp gives it)"
BOOTSTRAP = (
    f"percentile bootstrap over replicate pairs, {RESAMPLES} resamples (scipy.stats.bootstrap)"
)
SIGN_FLIP_EXACT = "paired sign-flip permutation test, exact (scipy.stats.permutation_test)"
SIGN_FLIP_MONTE_CARLO = (
    f"paired sign-flip permutation test, {RESAMPLES} random sign assignments "
    "(scipy.stats.permutation_test)"
)


@dataclass(frozen=True)
class ArmSummary:
    n: int
    n_missing: int
    mean: float | None
    sd: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str = T_INTERVAL


@dataclass(frozen=True)
class PairedDifference:
    n_pairs: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str
    p_value: float | None
    p_method: str


def _finite(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


@functools.cache
def _t_quantile(degrees: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, degrees))


def arm_summary(values: Sequence[float | None]) -> ArmSummary:
    """One arm's values of a metric (None: missing)."""
    import numpy as np

    present = np.array([v for v in values if v is not None], dtype=float)
    n, missing = len(present), len(values) - len(present)
    if n == 0:
        return ArmSummary(0, missing, None, None, None, None)
    mean = float(present.mean())
    if n == 1:
        return ArmSummary(1, missing, mean, None, None, None)
    sd = float(present.std(ddof=1))
    if sd == 0:  # every world agrees: the interval is the value itself
        return ArmSummary(n, missing, mean, 0.0, mean, mean)
    # ttest_1samp's confidence_interval, without building a test result each time (an
    # experiment's results summarise every arm on every turn): mean ± t(0.975, n-1) · sd/√n
    half = _t_quantile(n - 1) * sd / math.sqrt(n)
    return ArmSummary(n, missing, mean, sd, _finite(mean - half), _finite(mean + half))


def paired_difference(
    control: Sequence[float | None], treatment: Sequence[float | None], *, seed: int
) -> PairedDifference:
    """Treatment minus control, replicate by replicate (the two lists in replicate order)."""
    import numpy as np
    from scipy import stats

    if len(control) != len(treatment):
        raise ValueError("control and treatment must list the same replicates")
    pairs = [
        (c, t) for c, t in zip(control, treatment, strict=True) if c is not None and t is not None
    ]
    n = len(pairs)
    exact = n <= EXACT_MAX_PAIRS
    p_method = SIGN_FLIP_EXACT if exact else SIGN_FLIP_MONTE_CARLO
    if n == 0:
        return PairedDifference(0, None, None, None, BOOTSTRAP, None, p_method)
    x = np.array([c for c, _ in pairs], dtype=float)
    y = np.array([t for _, t in pairs], dtype=float)

    def mean_difference(a: Any, b: Any, axis: int = -1) -> Any:
        return np.mean(b - a, axis=axis)

    mean = float(np.mean(y - x))
    low = high = None
    if n >= 2:
        with np.errstate(invalid="ignore", divide="ignore"):
            boot = stats.bootstrap(
                (x, y),
                mean_difference,
                paired=True,
                vectorized=True,
                confidence_level=CONFIDENCE,
                n_resamples=RESAMPLES,
                method="percentile",
                rng=np.random.default_rng(seed),
            )
        low, high = _finite(boot.confidence_interval.low), _finite(boot.confidence_interval.high)
    if n < 2:  # scipy tests need two pairs; one pair has neither an interval nor a p-value
        return PairedDifference(n, mean, None, None, BOOTSTRAP, None, p_method)
    test = stats.permutation_test(
        (x, y),
        mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf if exact else RESAMPLES,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return PairedDifference(n, mean, low, high, BOOTSTRAP, _finite(test.pvalue), p_method)
