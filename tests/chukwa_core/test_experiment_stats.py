"""An experiment's statistics (chukwa_core/experiment_stats.py), checked against scipy.stats
called directly on the same data: the constructed example of the experiments guide (control
always 0, treatment always 1, 3 pairs: difference 1, CI [1, 1], exact p 0.25), missing values,
the exact and Monte-Carlo sign-flip tests, and determinism for the same seed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from chukwa_core.experiment_stats import (
    EXACT_MAX_PAIRS,
    SIGN_FLIP_EXACT,
    SIGN_FLIP_MONTE_CARLO,
    arm_summary,
    paired_difference,
)


def test_the_constructed_example_gives_difference_1_ci_1_1_and_exact_p_one_quarter() -> None:
    result = paired_difference([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], seed=7)
    assert (result.n_pairs, result.mean) == (3, 1.0)
    assert (result.ci_low, result.ci_high) == (1.0, 1.0)
    assert result.p_value == pytest.approx(0.25)  # 2 of the 2³ sign assignments reach |1|
    assert result.p_method == SIGN_FLIP_EXACT
    # scipy's own answer on the same data
    own = stats.permutation_test(
        (np.zeros(3), np.ones(3)),
        lambda x, y, axis: np.mean(y - x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
    )
    assert result.p_value == own.pvalue


def test_an_arm_is_summarised_as_scipy_summarises_it() -> None:
    values = [2.0, None, 3.5, 1.0, 4.0, None]
    summary = arm_summary(values)
    present = np.array([2.0, 3.5, 1.0, 4.0])
    interval = stats.ttest_1samp(present, 0.0).confidence_interval(0.95)
    assert (summary.n, summary.n_missing) == (4, 2)
    assert summary.mean == pytest.approx(present.mean())
    assert summary.sd == pytest.approx(present.std(ddof=1))
    assert (summary.ci_low, summary.ci_high) == (
        pytest.approx(interval.low),
        pytest.approx(interval.high),
    )
    assert arm_summary([None, None]) == arm_summary([None, None])
    assert (arm_summary([None]).n, arm_summary([None]).mean) == (0, None)
    one = arm_summary([5.0])
    assert (one.mean, one.sd, one.ci_low) == (5.0, None, None)
    same = arm_summary([1.0, 1.0, 1.0])
    assert (same.sd, same.ci_low, same.ci_high) == (0.0, 1.0, 1.0)


def test_a_pair_with_a_missing_side_is_left_out() -> None:
    control = [1.0, None, 2.0, 3.0, 0.5]
    treatment = [2.0, 5.0, None, 4.5, 1.0]
    result = paired_difference(control, treatment, seed=1)
    x, y = np.array([1.0, 3.0, 0.5]), np.array([2.0, 4.5, 1.0])
    assert result.n_pairs == 3 and result.mean == pytest.approx(np.mean(y - x))
    own = stats.bootstrap(
        (x, y),
        lambda a, b, axis: np.mean(b - a, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=9999,
        method="percentile",
        rng=np.random.default_rng(1),
    )
    assert (result.ci_low, result.ci_high) == (
        pytest.approx(own.confidence_interval.low),
        pytest.approx(own.confidence_interval.high),
    )
    with pytest.raises(ValueError, match="same replicates"):
        paired_difference([1.0], [1.0, 2.0], seed=1)
    empty = paired_difference([None], [1.0], seed=1)
    assert (empty.n_pairs, empty.mean, empty.p_value) == (0, None, None)
    # one replicate: a difference, but scipy needs two pairs for an interval or a test
    single = paired_difference([0.0], [1.0], seed=1)
    assert (single.n_pairs, single.mean, single.ci_low, single.p_value) == (1, 1.0, None, None)


def test_beyond_16_pairs_the_test_is_monte_carlo_seeded_and_deterministic() -> None:
    rng = np.random.default_rng(3)
    control = list(rng.normal(0, 1, EXACT_MAX_PAIRS + 4))
    treatment = [c + 0.8 + e for c, e in zip(control, rng.normal(0, 1, len(control)), strict=True)]
    first = paired_difference(control, treatment, seed=11)
    again = paired_difference(control, treatment, seed=11)
    assert first == again  # the same data and seed: the same numbers
    assert first.p_method == SIGN_FLIP_MONTE_CARLO and 0 < first.p_value < 0.05
    own = stats.permutation_test(
        (np.array(control), np.array(treatment)),
        lambda x, y, axis: np.mean(y - x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=9999,
        rng=np.random.default_rng(11),
    )
    assert first.p_value == own.pvalue
    assert first.ci_low is not None and first.ci_low < first.mean < first.ci_high  # type: ignore[operator]
    assert not math.isnan(first.ci_high or math.nan)
