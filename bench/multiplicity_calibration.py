"""Holm's adjustment, measured: the family-wise error rate (FWER: the share of experiments in
which at least one true null is rejected at p < 0.05) of an experiment's raw p-values and of its
Holm-adjusted ones, on simulated experiments whose truth is known.

Each experiment has 3 treatment arms against one control and 2 metrics (6 comparisons): one
continuous (normal, paired by replicate) and one binary (pairs sharing a replicate effect). The
metrics of a world are correlated (one latent quality drives both), as real metrics of one run
are. Cells:

- global null: no arm differs from the control (every rejection is a false one);
- partial null: one arm truly shifts both metrics, the other two do not (false rejections are
  counted among the 4 true nulls only; the power to find the 2 true effects is printed beside).

One experiment is one call of the product's own results code per metric
(``chukwa_core.experiment_analysis.metric_result``) and then ``with_holm`` over the experiment's
comparisons — what ``GET /api/experiments/<slug>/results/`` computes.

Target: Holm's FWER ≤ 5% (plus Monte Carlo error) in every cell; the raw p's FWER is printed to
show what the adjustment is for.

    python bench/multiplicity_calibration.py [--runs 1000] [--seed 1] [--pairs 5 10 20]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chukwa_core.experiment_analysis import MetricInput, WorldInput, metric_result, with_holm
from chukwa_core.statistics import MetricScale

ARMS = ["control", "a", "b", "c"]
ALPHA = 0.05
SHIFT = 0.8  # the true arm's shift of the latent quality, in sd of a world's own noise


def _metric(label: str, scale: MetricScale) -> MetricInput:
    return MetricInput(
        hash=label[0] * 64,
        label=label,
        aggregate="last",
        turn_scale=scale,
        world_scale=scale,
        type_basis="declared",
        primary=label == "quality",
        added_after_creation=False,
    )


METRICS = [
    (_metric("quality", MetricScale.continuous()), False),
    (_metric("success", MetricScale.binary()), True),
]


def _experiment(
    rng: np.random.Generator, pairs: int, true_arms: set[str], seed: int
) -> list[tuple[str, str, float | None, float | None]]:
    """One simulated experiment: (arm, metric, raw p, Holm p) of each comparison."""
    replicate = rng.normal(size=pairs)  # what one replicate's worlds share (same seed)
    latent = {
        arm: replicate + rng.normal(size=pairs) + (SHIFT if arm in true_arms else 0.0)
        for arm in ARMS
    }
    results = []
    for metric, binary in METRICS:
        worlds = {}
        for arm in ARMS:
            # the two metrics of one world share its latent quality, each with its own noise
            value = latent[arm] + 0.5 * rng.normal(size=pairs)
            values = (value > 0.5).astype(float) if binary else value
            worlds[arm] = [
                WorldInput(i + 1, f"w-{arm}-{i + 1}", float(v), None) for i, v in enumerate(values)
            ]
        results.append(
            metric_result(
                metric,
                arms=ARMS,
                control="control",
                worlds=worlds,
                by_turn={},
                turns=range(0),
                seed=seed,
                registered_replicates=pairs,
            )
        )
    adjusted, _ = with_holm(results)
    return [(e.arm, r.metric.label, e.p_value, e.p_holm) for r in adjusted for e in r.effects]


def _se(rate: float, runs: int) -> float:
    return math.sqrt(rate * (1 - rate) / runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, nargs="+", default=[5, 10, 20])
    args = parser.parse_args()
    started = time.monotonic()
    print(
        f"{len(ARMS) - 1} arms x {len(METRICS)} metrics = {(len(ARMS) - 1) * len(METRICS)} "
        f"comparisons per experiment; {args.runs} experiments a cell; alpha {ALPHA}"
    )
    header = f"{'cell':<14}{'pairs':>6}{'FWER raw':>16}{'FWER Holm':>16}{'power Holm':>12}"
    print(header)
    print("-" * len(header))
    failures = []
    for cell, true_arms in (("global null", set()), ("partial null", {"a"})):
        for pairs in args.pairs:
            rng = np.random.default_rng([args.seed, pairs, len(true_arms)])
            raw_any = holm_any = found = 0
            for run in range(args.runs):
                rows = _experiment(rng, pairs, true_arms, seed=run)
                nulls = [r for r in rows if r[0] not in true_arms]
                raw_any += any(p is not None and p < ALPHA for _, _, p, _ in nulls)
                holm_any += any(p is not None and p < ALPHA for _, _, _, p in nulls)
                found += sum(p is not None and p < ALPHA for a, _, _, p in rows if a in true_arms)
            raw, holm = raw_any / args.runs, holm_any / args.runs
            effects = len(true_arms) * len(METRICS) * args.runs
            power = f"{found / effects:.3f}" if effects else "—"
            print(
                f"{cell:<14}{pairs:>6}{raw:>10.3f} ±{_se(raw, args.runs):.3f}"
                f"{holm:>10.3f} ±{_se(holm, args.runs):.3f}{power:>12}"
            )
            if holm > ALPHA + 2 * _se(ALPHA, args.runs):
                failures.append(f"{cell} at {pairs} pairs: Holm FWER {holm:.3f}")
    print(f"({time.monotonic() - started:.0f} s)")
    if failures:
        print("target NOT met (Holm FWER ≤ 5% + 2 se): " + "; ".join(failures))
    else:
        print("target met: Holm's FWER ≤ 5% (+ 2 Monte Carlo se) in every cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
