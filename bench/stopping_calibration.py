"""Calibration of stopping early (docs/designs.md, "Stopping early"), measured: for each metric
type, the A/A false-positive rate of the anytime-valid stopping rule over many simulated
experiments (looks at 4, 6, …, 40 replicates; every rejection is a false positive), and, on a
known effect, the mean number of replicates the rule uses against the replicates a fixed design
of the same power needs (the statistics layer's ``power_for``), side by side.

Target: false-positive rate ≤ alpha (reported with its Monte Carlo standard error).

    python bench/stopping_calibration.py [--runs 2000] [--seed 1] [--start 4] [--every 2] [--max 40]

The e-values come from the product's own code, ``chukwa_core.statistics.sequential``
(``log_e_process``, vectorized over the simulated experiments); the first runs of every cell
are also put through ``sequential_test`` one experiment at a time, and must agree.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chukwa_core.statistics import MetricScale, power_for
from chukwa_core.statistics.sequential import (
    Decision,
    log_e_process,
    look_schedule,
    sequential_test,
)

ALPHA = 0.05
CHECKED_ONE_BY_ONE = 25


def _likert(latent: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(latent), 1, 5)


@dataclass(frozen=True)
class Scenario:
    name: str
    scale: MetricScale
    effect_label: str
    # (rng, shape, with effect) -> (control, treatment); replicate i of both arms shares a seed
    draw: Callable[[np.random.Generator, tuple[int, int], bool], tuple[np.ndarray, np.ndarray]]


def _continuous(rng: np.random.Generator, shape: tuple[int, int], effect: bool):  # type: ignore[no-untyped-def]
    shared = rng.normal(10, 2, shape)
    return shared + rng.normal(0, 1, shape), shared + rng.normal(0, 1, shape) + (
        1.0 if effect else 0.0
    )


def _count(rng: np.random.Generator, shape: tuple[int, int], effect: bool):  # type: ignore[no-untyped-def]
    rate = rng.gamma(4, 0.75, shape)  # the replicate's seed sets a shared rate, mean 3
    return rng.poisson(rate), rng.poisson(rate * (1.5 if effect else 1.0))


def _ordinal(rng: np.random.Generator, shape: tuple[int, int], effect: bool):  # type: ignore[no-untyped-def]
    shared = rng.normal(3, 0.8, shape)
    return _likert(shared + rng.normal(0, 0.8, shape)), _likert(
        shared + rng.normal(0, 0.8, shape) + (0.8 if effect else 0.0)
    )


def _binary(rng: np.random.Generator, shape: tuple[int, int], effect: bool):  # type: ignore[no-untyped-def]
    shared = rng.normal(0, 1, shape)
    return (shared + rng.normal(0, 1, shape) > 0.7).astype(float), (
        shared + rng.normal(0, 1, shape) > (-0.3 if effect else 0.7)
    ).astype(float)


SCENARIOS = (
    Scenario("continuous", MetricScale.continuous(), "+1.0 (d_z 0.71)", _continuous),
    Scenario("count", MetricScale.count(), "rate x1.5 (mean 3 -> 4.5)", _count),
    Scenario("ordinal", MetricScale.ordinal(1, 5), "latent +0.8 on 1..5", _ordinal),
    Scenario("binary", MetricScale.binary(), "P 0.31 -> 0.62", _binary),
)


@dataclass(frozen=True)
class Outcome:
    rejected: np.ndarray  # per run
    used: np.ndarray  # replicates when it stopped (the max when it never rejected)


def run_rule(
    scenario: Scenario, control: np.ndarray, treatment: np.ndarray, looks: tuple[int, ...]
) -> Outcome:
    log_e = log_e_process(treatment - control)[:, np.array(looks) - 1]
    crossed = log_e >= math.log(1 / ALPHA)
    rejected = crossed.any(axis=1)
    used = np.where(rejected, np.array(looks)[crossed.argmax(axis=1)], looks[-1])
    for i in range(min(CHECKED_ONE_BY_ONE, len(control))):  # the product's one-experiment call
        taken = tuple(n for n in looks if n <= used[i])
        one = sequential_test(
            scenario.scale,
            control[i].tolist(),
            treatment[i].tolist(),
            looks=taken,
            alpha=ALPHA,
            max_replicates=looks[-1],
        )
        assert (one.decision is Decision.REJECTED) == bool(rejected[i]), (scenario.name, i)
        assert one.stopped_at == used[i], (scenario.name, i)
    return Outcome(rejected, used)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=4)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--max", type=int, default=40)
    args = parser.parse_args()
    looks = look_schedule(args.start, args.every, args.max)
    began = time.perf_counter()
    print(
        f"stopping rule: alpha {ALPHA}, looks at {looks[0]}, {looks[1]}, … {looks[-1]} "
        f"replicates ({len(looks)} looks), {args.runs} simulated experiments per cell, "
        f"seed {args.seed}"
    )
    header = (
        f"{'type':<11} {'A/A false pos. ± MC se':>23} {'met':>4} | {'effect':<26} "
        f"{'power':>6} {'mean reps ± se':>15} {'fixed n, same power':>20} {'saved':>6}"
    )
    print(header)
    print("-" * len(header))
    all_met = True
    for k, scenario in enumerate(SCENARIOS):
        rng = np.random.default_rng([args.seed, k])
        shape = (args.runs, looks[-1])
        null = run_rule(scenario, *scenario.draw(rng, shape, False), looks)
        rate = float(null.rejected.mean())
        rate_se = math.sqrt(max(rate * (1 - rate), 1e-12) / args.runs)
        met = rate <= ALPHA
        all_met &= met
        control, treatment = scenario.draw(rng, shape, True)
        hit = run_rule(scenario, control, treatment, looks)
        power = float(hit.rejected.mean())
        used, used_se = float(hit.used.mean()), float(hit.used.std(ddof=1) / math.sqrt(args.runs))
        # the effect and the paired differences' sd, from a large sample of the same draw
        big_c, big_t = scenario.draw(np.random.default_rng([args.seed, k, 9]), (200, 1000), True)
        differences = (big_t - big_c).ravel()
        effect, sd = float(differences.mean()), float(differences.std(ddof=1))
        fixed = power_for(scenario.scale, effect=effect, sd=sd, alpha=ALPHA, power=power)
        n = fixed.n_needed
        saved = f"{1 - used / n:+.0%}" if n else "—"
        print(
            f"{scenario.name:<11} {rate:>10.4f} ± {rate_se:.4f}      {'yes' if met else 'NO':>4} | "
            f"{scenario.effect_label:<26} {power:>6.3f} {used:>8.1f} ± {used_se:.2f} "
            f"{n if n else '—':>20} {saved:>6}"
        )
    print(
        f"\nfixed n: the statistics layer's power_for (paired t power for count/ordinal/"
        f"continuous, exact McNemar for binary) at the rule's own measured power, same effect "
        f"and sd; saved = 1 - mean replicates / fixed n (negative: the rule used more).\n"
        f"target false-positive rate ≤ {ALPHA}: {'met' if all_met else 'NOT met'}; "
        f"{time.perf_counter() - began:.1f} s"
    )


if __name__ == "__main__":
    main()
