"""Holm's adjustment and power (chukwa_core/statistics), against statsmodels' own answers and,
for the exact McNemar test's power, against a simulation of the test itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from chukwa_core.statistics import MetricScale, holm, power_for
from chukwa_core.statistics.binary import mcnemar_power


def test_holm_is_statsmodels_holm_and_a_missing_p_stays_missing() -> None:
    raw = [0.01, None, 0.04, 0.03, 0.2]
    adjustment = holm(raw)
    expected = multipletests([0.01, 0.04, 0.03, 0.2], method="holm")[1]
    assert adjustment.raw == tuple(raw)
    assert adjustment.adjusted[1] is None
    present = [p for p in adjustment.adjusted if p is not None]
    assert present == pytest.approx(list(expected))
    assert "statsmodels" in adjustment.library and holm([]).adjusted == ()


def test_paired_t_power_is_statsmodels_ttestpower() -> None:
    answer = power_for(MetricScale.continuous(), effect=0.5, sd=1.0, n=20)
    analysis = TTestPower()
    assert answer.n_needed == math.ceil(
        analysis.solve_power(effect_size=0.5, alpha=0.05, power=0.8)
    )
    assert answer.power_of_given == pytest.approx(
        analysis.power(effect_size=0.5, nobs=20, alpha=0.05)
    )


def test_fewer_than_6_pairs_have_no_power_and_are_never_advised() -> None:
    huge = power_for(MetricScale.ordinal(1, 5), effect=3.0, sd=0.5, n=5)
    assert huge.power_of_given == 0.0 and huge.n_needed == 6
    assert power_for(MetricScale.binary(), effect=0.9, sd=0.3, n=5).power_of_given == 0.0


def test_the_exact_mcnemar_power_agrees_with_a_simulation_of_the_test() -> None:
    effect, sd, n = (
        0.3,
        0.5,
        20,
    )  # discordant share 0.34: P(treatment only) .32, P(control only) .02
    rng = np.random.default_rng(0)
    runs, rejected = 2000, 0
    for _ in range(runs):
        only_t, only_c, _rest = rng.multinomial(n, [0.32, 0.02, 0.66])
        rejected += mcnemar([[0, only_t], [only_c, 0]], exact=True).pvalue < 0.05
    simulated = rejected / runs
    exact = mcnemar_power(n, effect, sd, 0.05)
    assert abs(exact - simulated) < 4 * math.sqrt(exact * (1 - exact) / runs)
    answer = power_for(MetricScale.binary(), effect=effect, sd=sd, power=0.8)
    assert answer.n_needed is not None
    assert mcnemar_power(answer.n_needed, effect, sd, 0.05) >= 0.8
    assert mcnemar_power(answer.n_needed - 1, effect, sd, 0.05) < 0.8


def test_impossible_binary_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="binary"):
        power_for(MetricScale.binary(), effect=0.9, sd=0.9)
    with pytest.raises(ValueError, match="non-zero effect"):
        power_for(MetricScale.count(), effect=0.0, sd=1.0)
