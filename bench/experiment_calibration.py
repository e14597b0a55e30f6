"""Calibration of an experiment's statistics, measured: A/A comparisons (an arm against an
identical copy: every rejection is a false positive) and known-effect comparisons for each
metric type at 3, 5, 10 and 20 pairs, on simulated values whose true means are known. Prints,
per cell, the rate of p < 0.05 (the false-positive rate under A/A, the power under an effect),
the coverage of the per-arm 95% intervals and of the paired-difference interval (of the
intervals shown; the share shown beside it), each with its Monte Carlo standard error.

Target: false positives ≤ 5% (plus Monte Carlo error) and coverage ≥ 93% at every n ≥ 5.

    python bench/experiment_calibration.py [--runs 2000] [--seed 1] [--pairs 3 5 10 20]

One comparison is one call of the product's own results code,
``chukwa_core.experiment_analysis.metric_result`` — what ``GET /api/experiments/<slug>/results/``
computes from the worlds' values (the missing-data rule, the type's fitting scale, both arms'
summaries, the paired effect with its withholding rule) — on simulated worlds.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chukwa_core.experiment_analysis import MetricInput, WorldInput, metric_result
from chukwa_core.experiment_results_types import ArmResult, Effect
from chukwa_core.statistics import MetricScale, MetricType
from chukwa_core.statistics.binary import newcombe_paired
from chukwa_core.statistics.pairs import paired_t_interval

Values = list[float | None]
Comparison = tuple[ArmResult, ArmResult, Effect]


def compare_one(scale: MetricScale, control: Values, treatment: Values, seed: int) -> Comparison:
    """One comparison as the results API makes it: the product's ``metric_result`` on two arms
    of simulated worlds (replicate i of each arm paired)."""
    metric = MetricInput(
        hash="0" * 64,
        label="simulated",
        aggregate="last",
        turn_scale=scale,
        world_scale=scale,
        type_basis="declared",
        primary=True,
        added_after_creation=False,
    )
    worlds = {
        arm: [WorldInput(i + 1, f"w-{arm}-{i + 1}", v, None) for i, v in enumerate(values)]
        for arm, values in (("control", control), ("treated", treatment))
    }
    result = metric_result(
        metric,
        arms=["control", "treated"],
        control="control",
        worlds=worlds,
        by_turn={},
        turns=range(0),
        seed=seed,
        registered_replicates=len(control),
    )
    return result.arms[0], result.arms[1], result.effects[0]


COMPARE: Callable[[MetricScale, Values, Values, int], Comparison] = compare_one


@dataclass(frozen=True)
class Scenario:
    name: str
    scale: MetricScale
    # (rng, pairs, with effect) -> (control, treatment)
    draw: Callable[[np.random.Generator, int, bool], tuple[np.ndarray, np.ndarray]]
    # with effect -> (true control mean, true treatment mean)
    truth: Callable[[bool], tuple[float, float]]


# binary: a 2x2 table of pairs (both, control only, treatment only, neither)
BINARY_AA = (0.2, 0.1, 0.1, 0.6)
BINARY_EFFECT = (0.25, 0.05, 0.35, 0.35)


def _binary(rng: np.random.Generator, n: int, effect: bool) -> tuple[np.ndarray, np.ndarray]:
    cell = rng.choice(4, size=n, p=BINARY_EFFECT if effect else BINARY_AA)
    control = np.isin(cell, (0, 1)).astype(float)
    treatment = np.isin(cell, (0, 2)).astype(float)
    return control, treatment


def _binary_truth(effect: bool) -> tuple[float, float]:
    both, control_only, treatment_only, _ = BINARY_EFFECT if effect else BINARY_AA
    return both + control_only, both + treatment_only


# count: a replicate's shared frailty u ~ Gamma(2, 1/2) (mean 1): over-dispersed, paired counts
COUNT_MEAN, COUNT_RATIO = 3.0, 2.0


def _count(rng: np.random.Generator, n: int, effect: bool) -> tuple[np.ndarray, np.ndarray]:
    frailty = rng.gamma(2.0, 0.5, size=n)
    ratio = COUNT_RATIO if effect else 1.0
    control = rng.poisson(COUNT_MEAN * frailty).astype(float)
    return control, rng.poisson(COUNT_MEAN * ratio * frailty).astype(float)


def _count_truth(effect: bool) -> tuple[float, float]:
    return COUNT_MEAN, COUNT_MEAN * (COUNT_RATIO if effect else 1.0)


# ordinal 1-5: a shared latent normal plus each world's own, cut at fixed points
CUTS = np.array([-1.5, -0.5, 0.5, 1.5])
ORDINAL_SHIFT = 1.0


def _ordinal(rng: np.random.Generator, n: int, effect: bool) -> tuple[np.ndarray, np.ndarray]:
    shared = rng.normal(size=n)
    shift = ORDINAL_SHIFT if effect else 0.0
    control = shared + rng.normal(size=n)
    treatment = shared + rng.normal(size=n) + shift
    to_scale = lambda latent: 1.0 + (latent[:, None] > CUTS).sum(axis=1)  # noqa: E731
    return to_scale(control), to_scale(treatment)


def _ordinal_truth(effect: bool) -> tuple[float, float]:
    from scipy import stats

    def mean(shift: float) -> float:
        return 1.0 + float(stats.norm.sf(CUTS, loc=shift, scale=math.sqrt(2)).sum())

    return mean(0.0), mean(ORDINAL_SHIFT if effect else 0.0)


NORMAL_SHIFT = 0.8


def _normal(rng: np.random.Generator, n: int, effect: bool) -> tuple[np.ndarray, np.ndarray]:
    shared = rng.normal(size=n)
    shift = NORMAL_SHIFT if effect else 0.0
    return shared + rng.normal(size=n), shared + rng.normal(size=n) + shift


def _normal_truth(effect: bool) -> tuple[float, float]:
    return 0.0, NORMAL_SHIFT if effect else 0.0


# a non-negative, skewed continuous metric: log-normal, sd 0.5 on the log scale per world plus a
# shared 0.5
LOG_SHIFT = 0.4


def _lognormal(rng: np.random.Generator, n: int, effect: bool) -> tuple[np.ndarray, np.ndarray]:
    shared = 0.5 * rng.normal(size=n)
    shift = LOG_SHIFT if effect else 0.0
    control = np.exp(shared + 0.5 * rng.normal(size=n))
    return control, np.exp(shared + 0.5 * rng.normal(size=n) + shift)


def _lognormal_truth(effect: bool) -> tuple[float, float]:
    return math.exp(0.25), math.exp(0.25 + (LOG_SHIFT if effect else 0.0))


SCENARIOS = [
    Scenario("binary p=.3 (effect .3→.6)", MetricScale.binary(), _binary, _binary_truth),
    Scenario("count NB mean 3 (effect ×2)", MetricScale.count(), _count, _count_truth),
    Scenario("ordinal 1-5 (effect +1 latent)", MetricScale.ordinal(1, 5), _ordinal, _ordinal_truth),
    Scenario("continuous normal (effect +.8)", MetricScale.continuous(), _normal, _normal_truth),
    Scenario(
        "continuous ≥0 lognormal (×1.5)",
        MetricScale.continuous(low=0),
        _lognormal,
        _lognormal_truth,
    ),
]


def _interval_before_withholding(
    scale: MetricScale, pairs: tuple[np.ndarray, np.ndarray]
) -> tuple[float, float] | None:
    """The paired interval as its method computes it, before the rule that withholds one
    contradicting the row's p: its coverage is the method's, which the coverage of the intervals
    shown (conditional on agreeing with the test) is not."""
    control, treatment = pairs
    if scale.type is MetricType.BINARY:
        both = int(np.sum((control == 1) & (treatment == 1)))
        only_t = int(np.sum((control == 0) & (treatment == 1)))
        only_c = int(np.sum((control == 1) & (treatment == 0)))
        return newcombe_paired(both, only_t, only_c, len(control) - both - only_t - only_c)
    interval = paired_t_interval(treatment - control, bound=scale.width)
    if interval.low is None or interval.high is None:
        return None
    return interval.low, interval.high


@dataclass
class Tally:
    runs: int = 0
    rejected: int = 0
    arm_shown: int = 0
    arm_covered: int = 0
    arm_total: int = 0
    pair_shown: int = 0
    pair_covered: int = 0
    method_computed: int = 0
    method_covered: int = 0

    def add(
        self,
        comparison: Comparison,
        truth: tuple[float, float],
        scale: MetricScale,
        pairs: tuple[np.ndarray, np.ndarray],
    ) -> None:
        control, treatment, effect = comparison
        self.runs += 1
        p = effect.p_value
        self.rejected += p is not None and p < 0.05
        for arm, mean in ((control, truth[0]), (treatment, truth[1])):
            self.arm_total += 1
            if arm.ci_status == "shown" and arm.ci_low is not None and arm.ci_high is not None:
                self.arm_shown += 1
                self.arm_covered += arm.ci_low <= mean <= arm.ci_high
        raw = _interval_before_withholding(scale, pairs)
        if raw is not None:
            self.method_computed += 1
            self.method_covered += raw[0] <= truth[1] - truth[0] <= raw[1]
        low, high = effect.ci_low, effect.ci_high
        if effect.ci_status == "shown" and low is not None and high is not None:
            self.pair_shown += 1
            self.pair_covered += low <= truth[1] - truth[0] <= high


def _rate(hits: int, total: int) -> str:
    if total == 0:
        return "     —      "
    rate = hits / total
    return f"{100 * rate:5.1f}±{100 * math.sqrt(rate * (1 - rate) / total):3.1f}%"


def run(runs: int, seed: int, pair_counts: Sequence[int]) -> list[str]:
    lines = [
        f"{'metric':32} {'n':>3} {'cell':6} {'p<.05':>11} {'arm cover':>11} {'arm shown':>7}"
        f" {'diff cover':>11} {'diff shown':>7} {'method cover':>12}"
    ]
    print(lines[0])
    for scenario in SCENARIOS:
        for n in pair_counts:
            for effect in (False, True):
                rng = np.random.default_rng([seed, n, int(effect), len(scenario.name)])
                truth = scenario.truth(effect)
                tally = Tally()
                for run_index in range(runs):
                    control, treatment = scenario.draw(rng, n, effect)
                    comparison = COMPARE(scenario.scale, list(control), list(treatment), run_index)
                    tally.add(comparison, truth, scenario.scale, (control, treatment))
                lines.append(
                    f"{scenario.name:32} {n:3d} {'effect' if effect else 'A/A':6}"
                    f" {_rate(tally.rejected, tally.runs):>11}"
                    f" {_rate(tally.arm_covered, tally.arm_shown):>11}"
                    f" {100 * tally.arm_shown / tally.arm_total:6.1f}%"
                    f" {_rate(tally.pair_covered, tally.pair_shown):>11}"
                    f" {100 * tally.pair_shown / tally.runs:6.1f}%"
                    f" {_rate(tally.method_covered, tally.method_computed):>12}"
                )
                print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="simulated experiments per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, nargs="+", default=[3, 5, 10, 20])
    args = parser.parse_args()
    started = time.monotonic()
    print(f"{args.runs} runs per cell; p<.05 is the false-positive rate in A/A cells, the power")
    print("in effect cells; coverage is of the intervals shown (share shown beside it); ± is")
    print("the Monte Carlo standard error. 'method cover' is the paired interval's coverage")
    print("before intervals contradicting the row's p are withheld.")
    run(args.runs, args.seed, args.pairs)
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
