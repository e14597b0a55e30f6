"""An arm's 95% interval for the mean of a count, ordinal or continuous metric, by a method that
keeps it inside the metric's range and never gives a zero-width interval from a finite sample.

- unbounded: the t interval (scipy.stats.ttest_1samp).
- bounded on both sides (an ordinal scale, a bounded continuous metric): the values rescaled to
  [0, 1] and a Wilson score interval on their mean with an effective sample size
  n_eff = m(1-m)/(s²/n) (the n for which a proportion m would have the observed standard error)
  and the t quantile with n-1 degrees of freedom in place of z. Without spread the sample says
  nothing of the variance; n_eff = n is then used (the largest variance a [0, 1] value of mean m
  can have is m(1-m)), a conservative interval.
- bounded on one side (a non-negative continuous metric): a t interval for log(mean - low) by the
  delta method, log(m) ± t·s/(m√n), mapped back: strictly inside the range.
- counts: the exact Poisson (Garwood) interval of the sum when the sample is not over-dispersed
  (variance ≤ mean, all zeros included: statsmodels.stats.rates.confint_poisson, 'exact-c'),
  else the quasi-Poisson log-link interval: the same delta-method log-scale t interval, which is
  the intercept's t interval of statsmodels' Poisson GLM with Pearson scale.
"""

from __future__ import annotations

import math

import numpy as np

from chukwa_core.statistics.libraries import checked_against, library
from chukwa_core.statistics.pairs import t_quantile
from chukwa_core.statistics.types import (
    ALPHA,
    Interval,
    IntervalStatus,
    MetricScale,
)

T_INTERVAL = "t interval (scipy.stats.t; scipy.stats.ttest_1samp's interval)"
RESCALED_WILSON = (
    "Wilson score interval on the mean rescaled to [0, 1], effective n = m(1-m)/(s²/n), with the "
    "t quantile (n-1 df) for z (Wilson's formula as statsmodels' proportion_confint; scipy.stats.t)"
)
RESCALED_WILSON_NO_SPREAD = (
    "Wilson score interval on the mean rescaled to [0, 1] with n_eff = n (no spread in the sample: "
    "the largest variance the scale allows), with the t quantile (n-1 df) for z (Wilson's formula "
    "as statsmodels' proportion_confint; scipy.stats.t)"
)
LOG_T = "t interval of log(mean - low) by the delta method, mapped back (scipy.stats.t)"
GARWOOD = (
    "exact Poisson (Garwood) interval of the sum over n "
    "(statsmodels.stats.rates.confint_poisson, method='exact-c')"
)
QUASI_POISSON = (
    "quasi-Poisson log-link t interval (Pearson dispersion; the intercept interval of "
    "statsmodels' Poisson GLM with scale='X2'), computed with scipy.stats.t"
)


def wilson(successes: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval, by its formula (statsmodels' proportion_confint with
    method='wilson' gives the same, at a millisecond a call); exactly 0 at no successes and 1 at
    n, not 1e-16 away."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (0.0 if successes <= 0 else max(0.0, centre - half)), (
        1.0 if successes >= n else min(1.0, centre + half)
    )


def _unavailable(method: str, lib: str, reason: str) -> Interval:
    return Interval(None, None, IntervalStatus.UNAVAILABLE, method, lib, reason=reason)


def _t_quantile(n: int) -> float:
    return t_quantile(n - 1)


def _no_variation(method: str, lib: str) -> Interval:
    return Interval(
        None,
        None,
        IntervalStatus.UNINFORMATIVE,
        method,
        lib,
        reason="every value is the same: no variation to estimate an interval from",
    )


def t_interval(values: np.ndarray) -> Interval:
    lib = checked_against("scipy")
    if len(values) < 2:
        return _unavailable(T_INTERVAL, lib, "fewer than 2 values")
    if np.all(values == values[0]):
        return _no_variation(T_INTERVAL, lib)
    # ttest_1samp's confidence_interval, by its formula (its wrapper costs a millisecond a call)
    mean = float(values.mean())
    half = _t_quantile(len(values)) * float(values.std(ddof=1)) / math.sqrt(len(values))
    return Interval(mean - half, mean + half, IntervalStatus.SHOWN, T_INTERVAL, lib)


def rescaled_wilson(values: np.ndarray, low: float, high: float) -> Interval:
    lib = checked_against("statsmodels", "scipy")
    n = len(values)
    if n < 2:
        return _unavailable(RESCALED_WILSON, lib, "fewer than 2 values")
    u = (values - low) / (high - low)
    m = float(u.mean())
    variance = float(u.var(ddof=1))
    spread = variance > 0
    n_eff = m * (1 - m) * n / variance if spread else float(n)
    lo, hi = wilson(m * n_eff, n_eff, _t_quantile(n))
    width = high - low
    method = RESCALED_WILSON if spread else RESCALED_WILSON_NO_SPREAD
    return Interval(low + width * lo, low + width * hi, IntervalStatus.SHOWN, method, lib)


def log_t(values: np.ndarray, low: float, method: str = LOG_T) -> Interval:
    """The delta-method t interval of log(mean - low): log(m) ± t·s/(m√n)."""
    lib = checked_against("statsmodels", "scipy")
    n = len(values)
    if n < 2:
        return _unavailable(method, lib, "fewer than 2 values")
    shifted = values - low
    m = float(shifted.mean())
    s = float(shifted.std(ddof=1))
    if s == 0 or m <= 0:
        return _no_variation(method, lib)
    half = _t_quantile(n) * s / (m * math.sqrt(n))
    return Interval(
        low + m * math.exp(-half), low + m * math.exp(half), IntervalStatus.SHOWN, method, lib
    )


def count_interval(values: np.ndarray) -> Interval:
    from statsmodels.stats.rates import confint_poisson

    n = len(values)
    if n < 2:
        return _unavailable(GARWOOD, library("statsmodels"), "fewer than 2 values")
    mean = float(values.mean())
    if float(values.var(ddof=1)) > mean:
        return log_t(values, 0.0, QUASI_POISSON)
    lo, hi = confint_poisson(int(values.sum()), n, method="exact-c", alpha=ALPHA)
    return Interval(float(lo), float(hi), IntervalStatus.SHOWN, GARWOOD, library("statsmodels"))


def range_interval(scale: MetricScale, values: np.ndarray) -> Interval:
    """The interval for a non-count metric by its range."""
    if scale.low is not None and scale.high is not None:
        return rescaled_wilson(values, float(scale.low), float(scale.high))
    if scale.low is not None:
        return log_t(values, float(scale.low))
    if scale.high is not None:  # mirrored: an upper bound is a lower bound of -value
        flipped = log_t(-values, -float(scale.high))
        if not flipped.shown:
            return flipped
        assert flipped.low is not None and flipped.high is not None
        return Interval(
            -flipped.high, -flipped.low, flipped.status, flipped.method, flipped.library
        )
    return t_interval(values)
