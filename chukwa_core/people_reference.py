"""How far an arm's worlds are from people (docs/populations.md, "Comparing with people"): the
worlds' values of a metric and the people's observed values are two independent samples; per
arm, the mean difference with Welch's interval, the two-sample Kolmogorov-Smirnov statistic with
its p, and the Wasserstein distance with a percentile bootstrap interval and a permutation
test — each from scipy.

The bootstrap interval alone misleads: the plug-in distance is biased up, so when worlds and
people come from one distribution its interval never covers 0 (0 of 200 simulated runs at 5 to
40 worlds against 50 people, ``bench/people_reference_coverage.py``), and a reader would see a
distance "significantly" above 0 where there is none. Whether the distance exceeds what two
samples of these sizes from one distribution show is the permutation test's question
(``wasserstein_p``), whose A/A rejection rate the same bench measures.

Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from scipy import stats

from chukwa_core.experiment_results_types import PeopleDistance, PeopleReference
from chukwa_core.statistics.libraries import library

BOOTSTRAP_RESAMPLES = 2000
CI_METHOD = "Welch's t interval of the difference in means (scipy.stats.ttest_ind, equal_var=False)"
KS_METHOD = "two-sample Kolmogorov–Smirnov, two-sided (scipy.stats.ks_2samp, method auto)"


def _permutation_method(seed: int) -> str:
    return (
        "permutation test of the Wasserstein distance, one-sided (greater), worlds and people "
        f"exchangeable under the null (scipy.stats.permutation_test, {BOOTSTRAP_RESAMPLES} "
        f"resamples, seed {seed})"
    )


def _wasserstein_method(seed: int) -> str:
    return (
        "scipy.stats.wasserstein_distance; 95% percentile bootstrap over both samples "
        f"(scipy.stats.bootstrap, {BOOTSTRAP_RESAMPLES} resamples, seed {seed})"
    )


def _finite(value: float) -> float | None:
    number = float(value)
    return round(number, 12) if math.isfinite(number) else None


def people_distance(
    arm: str, worlds: Sequence[float], people: Sequence[float], *, seed: int
) -> PeopleDistance:
    """One arm's worlds' values against the people's (both non-empty for any figure)."""
    ours = np.asarray(worlds, dtype=float)
    theirs = np.asarray(people, dtype=float)
    empty = PeopleDistance(
        arm=arm,
        n_worlds=len(ours),
        n_people=len(theirs),
        worlds_mean=_finite(ours.mean()) if len(ours) else None,
        people_mean=_finite(theirs.mean()) if len(theirs) else None,
        difference=None,
        ci_low=None,
        ci_high=None,
        ci_method=CI_METHOD,
        ks_statistic=None,
        ks_p=None,
        ks_method=KS_METHOD,
        wasserstein=None,
        wasserstein_ci_low=None,
        wasserstein_ci_high=None,
        wasserstein_method=_wasserstein_method(seed),
        wasserstein_p=None,
        wasserstein_p_method=_permutation_method(seed),
        library=library("scipy"),
        note=None,
    )
    if not len(ours) or not len(theirs):
        return _with(empty, note="no worlds with a value" if not len(ours) else "no people")
    ks = stats.ks_2samp(ours, theirs)
    distance = stats.wasserstein_distance(ours, theirs)
    found = _with(
        empty,
        difference=_finite(ours.mean() - theirs.mean()),
        ks_statistic=_finite(ks.statistic),
        ks_p=_finite(ks.pvalue),
        wasserstein=_finite(distance),
    )
    if len(ours) < 2 or len(theirs) < 2:
        return _with(found, note="intervals need at least 2 values on each side")
    notes = []
    welch = stats.ttest_ind(ours, theirs, equal_var=False)
    interval = welch.confidence_interval(0.95)
    low, high = _finite(interval.low), _finite(interval.high)
    if low is None or high is None:
        notes.append("no Welch interval: neither sample varies")
    boot = stats.bootstrap(
        (ours, theirs),
        stats.wasserstein_distance,
        paired=False,
        vectorized=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    )
    permuted = stats.permutation_test(
        (ours, theirs),
        stats.wasserstein_distance,
        permutation_type="independent",
        vectorized=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        alternative="greater",
        rng=np.random.default_rng(seed),
    )
    return _with(
        found,
        ci_low=low,
        ci_high=high,
        wasserstein_ci_low=_finite(boot.confidence_interval.low),
        wasserstein_ci_high=_finite(boot.confidence_interval.high),
        wasserstein_p=_finite(permuted.pvalue),
        note="; ".join(notes) or None,
    )


def _with(distance: PeopleDistance, **changes: object) -> PeopleDistance:
    return replace(distance, **changes)  # type: ignore[arg-type]


def people_reference(
    arms: Sequence[tuple[str, Sequence[float]]], people: Sequence[float], *, seed: int
) -> PeopleReference:
    """The people's values of one metric and each arm's distance from them (arms in order,
    each with its worlds' values)."""
    values = np.asarray(people, dtype=float)
    return PeopleReference(
        n=len(values),
        mean=_finite(values.mean()) if len(values) else None,
        sd=_finite(values.std(ddof=1)) if len(values) > 1 else None,
        distances=tuple(people_distance(arm, found, people, seed=seed) for arm, found in arms),
    )
