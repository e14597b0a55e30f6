"""The anytime-valid paired test (chukwa_core/statistics/sequential.py): its e-process is the
mixture of betting martingales it says (checked by hand for a binary metric's discordant pairs),
it is valid at every look (A/A rejection rate over many simulated experiments, looking after
every pair, at most alpha plus Monte Carlo error, for skewed and heavy-tailed values too) and
it stops on a real effect."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chukwa_core.statistics import MetricScale
from chukwa_core.statistics.sequential import (
    BETS,
    Decision,
    log_e_process,
    look_schedule,
    sequential_test,
)


def test_binary_is_the_mixture_over_discordant_pairs() -> None:
    control = [0, 1, 0, 0, 1, 0, 0, 1]
    treatment = [1, 1, 1, 0, 0, 1, 1, 1]  # discordant: + + - + + ; concordant pairs bet nothing
    result = sequential_test(
        MetricScale.binary(), control, treatment, looks=[4, 8], max_replicates=8
    )
    by_hand = float(np.mean((1 + BETS) ** 4 * (1 - BETS) ** 1))
    assert result.looks[1].e_value == pytest.approx(by_hand, rel=1e-12)
    assert result.looks[0].e_value == pytest.approx(float(np.mean((1 + BETS) ** 2)), rel=1e-12)
    assert result.decision is Decision.MAX_REACHED and result.stopped_at == 8
    assert result.looks[0].decision is Decision.CONTINUE and result.looks[0].boundary == 20


def test_scale_free_and_sign_symmetric() -> None:
    rng = np.random.default_rng(0)
    d = rng.normal(0.3, 1, 30)
    assert log_e_process(d) == pytest.approx(log_e_process(1000 * d), rel=1e-12)
    assert log_e_process(d) == pytest.approx(log_e_process(-d), rel=1e-12)


@pytest.mark.parametrize(
    "draw",
    [
        lambda rng, shape: rng.normal(0, 1, shape) - rng.normal(0, 1, shape),
        lambda rng, shape: rng.poisson(2, shape) - rng.poisson(2, shape),
        lambda rng, shape: rng.lognormal(0, 1.5, shape) - rng.lognormal(0, 1.5, shape),
        lambda rng, shape: rng.integers(1, 6, shape) - rng.integers(1, 6, shape),
        lambda rng, shape: rng.binomial(1, 0.3, shape) - rng.binomial(1, 0.3, shape),
    ],
    ids=["continuous", "count", "heavy-tailed", "ordinal", "binary"],
)
def test_a_a_rejects_at_most_alpha_looking_after_every_pair(draw) -> None:  # type: ignore[no-untyped-def]
    runs, pairs = 4000, 60
    rng = np.random.default_rng(42)
    rejected = np.any(log_e_process(draw(rng, (runs, pairs))) >= math.log(20), axis=1)
    rate = float(rejected.mean())
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs)


def test_stops_on_a_real_effect_and_takes_no_look_after_stopping() -> None:
    rng = np.random.default_rng(5)
    control = list(rng.normal(0, 1, 40))
    treatment = [c + 1.5 + rng.normal(0, 0.5) for c in control]
    looks = look_schedule(4, 2, 40)
    assert looks[:3] == (4, 6, 8) and looks[-1] == 40
    log_e = log_e_process(np.array(treatment) - np.array(control))[0]
    stop_at = next(n for n in looks if log_e[n - 1] >= math.log(20))
    taken = tuple(n for n in looks if n <= stop_at)
    result = sequential_test(
        MetricScale.continuous(), control, treatment, looks=taken, max_replicates=40
    )
    assert result.decision is Decision.REJECTED and result.stopped_at == stop_at < 20
    assert all(look.decision is Decision.CONTINUE for look in result.looks[:-1])
    assert result.looks[-1].e_value >= 20
    with pytest.raises(ValueError, match="after the rule stopped"):
        sequential_test(
            MetricScale.continuous(), control, treatment, looks=looks, max_replicates=40
        )


def test_missing_sides_are_skipped() -> None:
    result = sequential_test(
        MetricScale.count(), [1, None, 3, 2], [2, 5, None, 4], looks=[4], max_replicates=10
    )
    assert result.looks[0].pairs == 2 and result.decision is Decision.CONTINUE
    assert result.stopped_at is None


def test_schedule_ends_at_the_maximum() -> None:
    assert look_schedule(5, 4, 15) == (5, 9, 13, 15)
    with pytest.raises(ValueError):
        look_schedule(0, 2, 10)
