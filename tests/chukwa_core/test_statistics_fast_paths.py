"""The results' fast paths give what the plain ones give, to the bit: the sign-flip test's coin
flips read from PCG64's raw outputs equal numpy's own ``integers`` draws call after call, and a
scale's ``check_all`` raises what checking the values one by one raises."""

from __future__ import annotations

import numpy as np
import pytest

from chukwa_core.statistics.multiplicity import holm, holm_adjusted
from chukwa_core.statistics.pairs import sign_flip_monte_carlo_p
from chukwa_core.statistics.sign_sums import CoinFlips, count_at_least
from chukwa_core.statistics.types import MetricScale


@pytest.mark.parametrize("columns", [1, 3, 5, 7, 20, 21, 4999, 5000])
@pytest.mark.parametrize("rows", [[2000, 2000, 2000, 2000, 1999], [7, 3, 5, 1], [1], [0, 3]])
def test_coin_flips_are_numpys_integers_draws_call_after_call(
    rows: list[int], columns: int
) -> None:
    numpy_rng = np.random.default_rng(20261128)
    flips = CoinFlips(20261128)
    for count in rows:
        expected = numpy_rng.integers(0, 2, size=(count, columns), dtype=np.int8)
        drawn = flips.draw(count, columns)
        assert drawn.dtype == expected.dtype and drawn.shape == expected.shape
        assert np.array_equal(drawn, expected)


def _numpy_monte_carlo_p(nonzero: np.ndarray, *, seed: int, resamples: int) -> float:
    """The sign-flip p with numpy's own draws (the code before CoinFlips)."""
    rng = np.random.default_rng(seed)
    observed = abs(float(np.sum(nonzero)))
    tolerance = observed * 100 * np.finfo(float).eps
    hits = 0
    for start in range(0, resamples, 2000):
        size = min(2000, resamples - start)
        signs = rng.integers(0, 2, size=(size, len(nonzero)), dtype=np.int8) * 2 - 1
        hits += int(np.sum(np.abs(signs @ nonzero) >= observed - tolerance))
    return (hits + 1) / (resamples + 1)


@pytest.mark.parametrize("m", [21, 37, 501])
def test_the_monte_carlo_p_is_the_one_numpys_draws_give(m: int) -> None:
    nonzero = np.sort(np.random.default_rng(m).normal(0.15, 1.0, size=m))
    for seed in (1, 42, 987654321):
        fast = sign_flip_monte_carlo_p(nonzero, seed=seed, resamples=9999)
        assert fast == _numpy_monte_carlo_p(nonzero, seed=seed, resamples=9999)
    # integer differences: sums land exactly on the observed one, ties counted the same
    counts = np.sort(np.random.default_rng(m).integers(-3, 4, size=m).astype(float))
    counts = counts[counts != 0]
    assert sign_flip_monte_carlo_p(counts, seed=7, resamples=4001) == _numpy_monte_carlo_p(
        counts, seed=7, resamples=4001
    )


def test_the_monte_carlo_p_of_a_large_experiment_is_the_one_numpys_draws_give() -> None:
    # 5,000 pairs (a 2 x 5000 design), a small effect: p away from its floor, so the sums'
    # comparisons with the observed one decide it
    nonzero = np.sort(np.random.default_rng(5000).normal(0.01, 1.0, size=5000))
    fast = sign_flip_monte_carlo_p(nonzero, seed=42, resamples=9999)
    assert 0.05 < fast < 0.95
    assert fast == _numpy_monte_carlo_p(nonzero, seed=42, resamples=9999)


@pytest.mark.parametrize(
    "differences",
    [
        pytest.param(np.random.default_rng(1).normal(0.0, 1.0, 3001), id="continuous"),
        pytest.param(np.random.default_rng(2).integers(-3, 4, 3001) / 20, id="twentieths"),
        pytest.param(np.random.default_rng(3).integers(-3, 4, 2999) / 4, id="quarters"),
        pytest.param(np.random.default_rng(4).normal(0.0, 1e-9, 77), id="tiny"),
        pytest.param(np.array([1e300, -1e300, 3.0, 0.5]), id="huge"),
    ],
)
def test_the_table_counts_what_the_product_counts(differences: np.ndarray) -> None:
    # discrete differences put many sums on the threshold (ties the bound cannot call, so
    # their batch is counted from the product); quarters are exact, summed either way
    nonzero = np.sort(differences[differences != 0])
    for threshold in (abs(float(np.sum(nonzero))), float(np.sum(np.abs(nonzero))) / 40, 0.0):
        rng = np.random.default_rng(99)
        expected = 0
        for start in range(0, 9999, 2000):
            size = min(2000, 9999 - start)
            signs = rng.integers(0, 2, size=(size, len(nonzero)), dtype=np.int8) * 2 - 1
            expected += int(np.sum(np.abs(signs @ nonzero) >= threshold))
        assert count_at_least(nonzero, threshold, seed=99, resamples=9999) == expected


def _first_error(scale: MetricScale, values: list[float]) -> str | None:
    try:
        for value in values:
            scale.check(value)
    except ValueError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("scale", "values"),
    [
        (MetricScale.count(), [0.0, 3.0, 2.0]),
        (MetricScale.count(), [0.0, 2.5, -1.0]),
        (MetricScale.count(), [1.0, -1.0, 2.5]),
        (MetricScale.ordinal(1, 5), [1.0, 5.0, 6.0, 0.0]),
        (MetricScale.binary(), [0.0, 1.0, 1.0]),
        (MetricScale.binary(), [0.0, 0.5]),
        (MetricScale.continuous(0, 1), [0.25, 1.0, 1.0000001]),
        (MetricScale.continuous(), [1e300, -2.5, float("inf")]),
        (MetricScale.continuous(), [float("nan"), 1.0]),
        (MetricScale.continuous(None, 2), [2.0, 3.0]),
        (MetricScale.continuous(), []),
    ],
)
def test_check_all_raises_what_checking_one_by_one_raises(
    scale: MetricScale, values: list[float]
) -> None:
    expected = _first_error(scale, values)
    for given in (values, np.array(values, dtype=float)):
        try:
            scale.check_all(given)
            found = None
        except ValueError as exc:
            found = str(exc)
        assert found == expected


@pytest.mark.parametrize(
    "p_values",
    [
        [0.01, 0.04, 0.03, 0.2],
        [0.5, 0.5, 0.5],
        [0.001, 0.3, 0.3, 0.9, 0.02, 0.0001, 0.049, 0.05],
        [0.7],
        list(np.random.default_rng(5).uniform(0, 0.2, size=40)),
    ],
)
def test_holm_gives_statsmodels_floats_exactly(p_values: list[float]) -> None:
    from statsmodels.stats.multitest import multipletests

    expected = multipletests(p_values, alpha=0.05, method="holm")[1]
    assert holm_adjusted(p_values).tolist() == expected.tolist()
    assert list(holm(p_values).adjusted) == expected.tolist()
