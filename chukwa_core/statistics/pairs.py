"""What every paired comparison shares: forming complete pairs, the paired t interval, the
sign-flip permutation test, and the rule that an interval contradicting its row's p is withheld.

Replicate i of every arm has the same seed, so control[i] and treatment[i] are a pair. The
sign-flip test's input is put in a canonical order (sorted) before any resampling, so the same
pairs listed in another replicate order give the same p, Monte Carlo included.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chukwa_core.statistics.libraries import checked_against, library
from chukwa_core.statistics.sign_sums import count_at_least
from chukwa_core.statistics.types import (
    ALPHA,
    CONFIDENCE,
    Interval,
    IntervalStatus,
    TestResult,
)

# Exact enumeration while the sign patterns number at most this many (2^19 = 524,288 ≤ 10^6 <
# 2^20); Monte Carlo beyond, with this many random patterns.
EXACT_MAX_PATTERNS = 10**6
RESAMPLES = 9999
PAIRED_T = "paired t interval (scipy.stats.t; scipy.stats.ttest_1samp's interval)"
SIGN_FLIP_EXACT = (
    "paired sign-flip permutation test of the mean difference, exact: all 2^m sign patterns of "
    "the m non-zero differences enumerated (numpy; the same p as scipy.stats.permutation_test)"
)
SIGN_FLIP_MONTE_CARLO = (
    "paired sign-flip permutation test of the mean difference, Monte Carlo: {resamples} random "
    "sign patterns of the non-zero differences, seed {seed}, p = (k+1)/(B+1) (numpy)"
)


@dataclass(frozen=True)
class Pairs:
    control: np.ndarray
    treatment: np.ndarray
    n_dropped: int

    @property
    def n(self) -> int:
        return len(self.control)

    @property
    def differences(self) -> np.ndarray:
        return np.asarray(self.treatment - self.control, dtype=float)


@functools.cache
def t_quantile(degrees: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, degrees))


def pair_up(control: Sequence[float | None], treatment: Sequence[float | None]) -> Pairs:
    """Complete pairs only: a replicate missing on either side is dropped and counted."""
    if len(control) != len(treatment):
        raise ValueError("control and treatment must list the same replicates")
    kept = [
        (c, t) for c, t in zip(control, treatment, strict=True) if c is not None and t is not None
    ]
    return Pairs(
        np.array([c for c, _ in kept], dtype=float),
        np.array([t for _, t in kept], dtype=float),
        len(control) - len(kept),
    )


def smallest_exact_p(n: int) -> float:
    """The smallest two-sided p a sign-flip (or signed-rank, or exact McNemar) test of n pairs
    can give: both all-same-sign patterns out of 2^n."""
    return min(1.0, 2.0 ** (1 - n)) if n >= 1 else 1.0


def small_sample_note(n: int) -> str | None:
    if smallest_exact_p(n) < ALPHA:
        return None
    return (
        f"{n} pair{'s' if n != 1 else ''} cannot give p < {ALPHA:g} with this test whatever the "
        f"data: the smallest possible p is {smallest_exact_p(n):.3g} (6 pairs are needed)"
    )


def sign_flip_exact_p(nonzero: np.ndarray) -> float:
    """The exact two-sided p over all 2^m sign patterns, enumerated by doubling (every pattern's
    sum, 2^m floats), as scipy.stats.permutation_test computes it (the same tolerance for ties
    of floating sums, p = 2·min(one-sided p), at most 1) but in milliseconds where scipy's
    generic enumeration takes seconds at m = 19."""
    sums = np.zeros(1)
    for value in nonzero:
        sums = np.concatenate((sums + value, sums - value))
    observed = float(np.sum(nonzero))
    tolerance = abs(observed) * 100 * np.finfo(float).eps
    greater = float(np.mean(sums >= observed - tolerance))
    less = float(np.mean(sums <= observed + tolerance))
    return min(1.0, 2 * min(greater, less))


def sign_flip_monte_carlo_p(nonzero: np.ndarray, *, seed: int, resamples: int) -> float:
    """(k + 1)/(B + 1), k of B random sign patterns giving |sum| at least the observed: a valid
    p (the observed pattern counted), at least 1/(B + 1). The patterns come in batches of
    2000 (2000 x m signs at most in memory); each pattern's sum is compared as the float
    ``signs @ nonzero`` of its batch gives it (``sign_sums``)."""
    observed = abs(float(np.sum(nonzero)))
    tolerance = observed * 100 * np.finfo(float).eps
    hits = count_at_least(nonzero, observed - tolerance, seed=seed, resamples=resamples)
    return (hits + 1) / (resamples + 1)


def sign_flip_test(differences: np.ndarray, *, seed: int, resamples: int = RESAMPLES) -> TestResult:
    """Two-sided sign-flip permutation test of mean difference 0. Zero differences are left out
    of the patterns (flipping a zero changes nothing), so exactness depends on the m non-zero
    differences: exact while 2^m ≤ 10^6, else Monte Carlo."""
    n = len(differences)
    note = small_sample_note(n)
    reach = note is None
    if n == 0:
        lib = checked_against("scipy")
        return TestResult(None, SIGN_FLIP_EXACT, lib, True, reach, note="no complete pairs")
    nonzero = np.sort(differences[differences != 0])
    m = len(nonzero)
    if 2**m <= EXACT_MAX_PATTERNS:  # m = 0 included: every pattern gives 0, as observed
        p = sign_flip_exact_p(nonzero) if m else 1.0
        return TestResult(p, SIGN_FLIP_EXACT, checked_against("scipy"), True, reach, note=note)
    p = sign_flip_monte_carlo_p(nonzero, seed=seed, resamples=resamples)
    return TestResult(
        p,
        SIGN_FLIP_MONTE_CARLO.format(resamples=resamples, seed=seed),
        library("numpy"),
        False,
        reach,
        resamples=resamples,
        seed=seed,
        monte_carlo_se=math.sqrt(p * (1 - p) / resamples),
        at_floor=p <= 1 / (resamples + 1) * (1 + 1e-9),
        note=note,
    )


def paired_t_interval(
    differences: np.ndarray, *, bound: float | None = None, method: str = PAIRED_T
) -> Interval:
    """The paired t interval of the mean difference; with ``bound`` (the most two values of the
    metric can differ by) it is intersected with [-bound, bound], where the true difference
    lies, which cannot lower its coverage."""

    lib = checked_against("scipy")
    n = len(differences)
    if n < 2:
        return Interval(
            None, None, IntervalStatus.UNAVAILABLE, method, lib, reason="fewer than 2 pairs"
        )
    if np.all(differences == differences[0]):
        return Interval(
            None,
            None,
            IntervalStatus.UNINFORMATIVE,
            method,
            lib,
            reason="every pair differs by the same amount: no variation to estimate from",
        )
    # ttest_1samp's confidence_interval, by its formula (its wrapper costs a millisecond a call)
    mean = float(np.mean(differences))
    half = t_quantile(n - 1) * float(np.std(differences, ddof=1)) / math.sqrt(n)
    low, high = mean - half, mean + half
    if bound is not None:
        low, high = max(low, -bound), min(high, bound)
        method = f"{method}, intersected with the possible range ±{bound:g}"
    return Interval(low, high, IntervalStatus.SHOWN, method, lib)


def reconcile(interval: Interval, test: TestResult) -> Interval:
    """Withhold an interval that contradicts its row's p: excluding 0 while p ≥ 0.05, or
    including 0 while p < 0.05."""
    if not interval.shown or test.p_value is None:
        return interval
    assert interval.low is not None and interval.high is not None
    excludes_zero = interval.low > 0 or interval.high < 0
    significant = test.p_value < ALPHA
    if excludes_zero == significant:
        return interval
    says = "excludes 0" if excludes_zero else "includes 0"
    return Interval(
        None,
        None,
        IntervalStatus.WITHHELD,
        interval.method,
        interval.library,
        interval.level,
        reason=(
            f"the interval [{interval.low:.3g}, {interval.high:.3g}] {says} while the row's "
            f"p = {test.display} is {'below' if significant else 'not below'} {ALPHA:g}"
        ),
    )


def mean_or_none(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def d_z(differences: np.ndarray) -> float | None:
    """Cohen's d for paired designs: the mean difference over the differences' sd."""
    if len(differences) < 2:
        return None
    sd = float(np.std(differences, ddof=1))
    return float(np.mean(differences)) / sd if sd > 0 else None
