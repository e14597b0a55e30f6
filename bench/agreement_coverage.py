"""A judge's agreement with people, measured: how often the 95% intervals by world of
``chukwa_core.agreement.agreement`` (Spearman's rho, quadratic-weighted kappa, Krippendorff's
alpha) cover the true value, and how often the permutation test of rho rejects when the judge is
unrelated to the labels.

Simulated turns: each world has its own level (its turns are alike: intra-world correlation
0.3), each turn a true quality; the judge scores it on 1-5 and each of two reviewers labels it on
1-5, each with their own noise (cut from a latent normal). Rho and kappa are of the judge
against one reviewer (kappa is computed only when each turn's label is a point of the scale),
alpha over the judge and both reviewers. The true values are those of one very large sample of
the same process (``--truth-worlds`` worlds).

Cells: 3, 5, 10, 20 and 40 worlds of 4 turns each; a related judge (its latent is the quality
plus noise) for coverage, and an unrelated one (noise only) for the permutation p's
false-positive rate. Target: coverage ≥ 93% in every cell, false positives ≤ 5%.

    python bench/agreement_coverage.py [--runs 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chukwa_core.agreement import (
    Agreement,
    Unit,
    _alpha,
    _permutation_p,
    agreement,
    fast_kappa,
    fast_rho,
)

CUTS = np.array([-1.2, -0.4, 0.4, 1.2])  # latent normal to 1..5
TURNS = 4
TARGET_COVERAGE = 0.93
WORLD_SD = math.sqrt(0.3)  # intra-world correlation 0.3 of the quality
TURN_SD = math.sqrt(0.7)
JUDGE_NOISE = 0.7
REVIEWER_NOISE = 0.7


def _scale(latent: np.ndarray) -> np.ndarray:
    return 1.0 + (latent[:, None] > CUTS).sum(axis=1)


def _draw(
    rng: np.random.Generator, worlds: int, related: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(world of each turn, judge's score, reviewer 1's label, reviewer 2's label)."""
    world = np.repeat(np.arange(worlds), TURNS)
    quality = rng.normal(size=worlds)[world] * WORLD_SD + rng.normal(size=len(world)) * TURN_SD
    judge_latent = quality if related else rng.normal(size=len(world))
    judge = _scale(judge_latent + JUDGE_NOISE * rng.normal(size=len(world)))
    first = _scale(quality + REVIEWER_NOISE * rng.normal(size=len(world)))
    second = _scale(quality + REVIEWER_NOISE * rng.normal(size=len(world)))
    return world, judge, first, second


def _units(world: np.ndarray, judge: np.ndarray, *reviewers: np.ndarray) -> list[Unit]:
    return [
        Unit(
            world=f"w{world[i]}",
            metric_value=float(judge[i]),
            ratings={f"r{k + 1}": float(r[i]) for k, r in enumerate(reviewers)},
        )
        for i in range(len(world))
    ]


def _truth(rng: np.random.Generator, worlds: int) -> dict[str, float]:
    world, judge, first, second = _draw(rng, worlds, related=True)
    # rho and kappa against one reviewer; alpha over the judge and two reviewers
    rho, kappa = fast_rho(judge, first), fast_kappa(judge, first, (1, 5))
    assert rho is not None and kappa is not None
    sample = slice(0, 40_000)  # Krippendorff on 10,000 worlds' turns
    alpha = _alpha(
        _units(world[sample], judge[sample], first[sample], second[sample]), ["r1", "r2"], "ordinal"
    )
    assert alpha is not None
    return {"rho": rho, "kappa": kappa, "alpha": alpha}


def _se(rate: float, runs: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-12) / runs)


def _cell(covered: dict[str, int], shown: dict[str, int], name: str) -> str:
    n = shown[name]
    if not n:
        return f"{'—':>16}{0:>7}"
    rate = covered[name] / n
    return f"{rate:>10.3f} ±{_se(rate, n):.3f}{n:>7}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worlds", type=int, nargs="+", default=[3, 5, 10, 20, 40])
    parser.add_argument("--truth-worlds", type=int, default=200_000)
    args = parser.parse_args()
    started = time.monotonic()
    truth = _truth(np.random.default_rng([args.seed, 0]), args.truth_worlds)
    print(
        "truth (one sample of "
        f"{args.truth_worlds:,} worlds): rho {truth['rho']:.3f}, kappa {truth['kappa']:.3f} "
        f"(one reviewer), alpha {truth['alpha']:.3f} (judge and two reviewers)"
    )
    header = (
        f"{'worlds':>6}{'turns':>6}{'rho covers':>16}{'shown':>7}{'kappa covers':>16}"
        f"{'shown':>7}{'alpha covers':>16}{'shown':>7}{'perm. p<.05 (null)':>21}"
    )
    print(header)
    print("-" * len(header))
    misses: list[str] = []
    for worlds in args.worlds:
        rng = np.random.default_rng([args.seed, worlds])
        covered = {"rho": 0, "kappa": 0, "alpha": 0}
        shown = {"rho": 0, "kappa": 0, "alpha": 0}
        rejections = 0
        for run in range(args.runs):
            world, judge, first, second = _draw(rng, worlds, related=True)
            # rho and kappa: one reviewer (kappa needs each turn's label on the scale)
            one = _agreement(_units(world, judge, first), run)
            # alpha: the judge and both reviewers
            both = _agreement(_units(world, judge, first, second), run)
            cis = [
                ("rho", one.spearman_rho_ci),
                ("kappa", one.cohen_kappa_ci),
                ("alpha", both.krippendorff_alpha_ci),
            ]
            for name, ci in cis:
                if ci.low is not None and ci.high is not None:
                    shown[name] += 1
                    covered[name] += ci.low <= truth[name] <= ci.high
            # an unrelated judge: the permutation p of rho as the product computes it
            _, j0, a0, _ = _draw(rng, worlds, related=False)
            if fast_rho(j0, a0) is not None:
                p, _, _ = _permutation_p(j0, a0, run)
                rejections += p < 0.05

        null_rate = rejections / args.runs
        print(
            f"{worlds:>6}{worlds * TURNS:>6}{_cell(covered, shown, 'rho')}{_cell(covered, shown, 'kappa')}"
            f"{_cell(covered, shown, 'alpha')}"
            f"{null_rate:>14.3f} ±{_se(null_rate, args.runs):.3f}"
        )
        for name in ("rho", "kappa", "alpha"):
            if shown[name] and covered[name] / shown[name] < TARGET_COVERAGE:
                misses.append(f"{name} at {worlds} worlds: {covered[name] / shown[name]:.3f}")
    print(
        f"({time.monotonic() - started:.0f} s; {args.runs} runs a cell; 'shown': intervals "
        "given, of the runs)"
    )
    print(
        "target NOT met (coverage ≥ 93%): " + "; ".join(misses)
        if misses
        else "target met: every interval covers ≥ 93% of the time"
    )
    return 0


def _agreement(units: list[Unit], seed: int) -> Agreement:
    return agreement(units, scale=(1, 5), flags=False, turn_type="ordinal", seed=seed)


if __name__ == "__main__":
    sys.exit(main())
