"""Are the people-reference figures right at the sizes researchers run? (docs/populations.md,
"Comparing with people"). Simulated worlds' values against simulated people, each figure from
the product's own code (``chukwa_core.people_reference.people_distance``), over many runs:

- the Welch interval of the mean difference: how often it covers the true difference;
- the Kolmogorov-Smirnov test: how often it rejects at 0.05 when worlds and people come from the
  same distribution (A/A; target ≤ 0.05);
- the Wasserstein distance's percentile bootstrap interval: how often it covers the true
  distance (0 when the distributions are the same, 1 for a shift by one sd of a normal) — it
  never covers 0, which is why the results also give a permutation test;
- that permutation test (``wasserstein_p``): how often it rejects at 0.05 when the
  distributions are the same (A/A; target ≤ 0.05) and when they differ (its power).

    python bench/people_reference_coverage.py [--runs 200] [--seed 1] [--people 50]

Prints one row per (case, worlds per arm), with Monte Carlo standard errors.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chukwa_core.people_reference import people_distance

CASES = {
    # name: (worlds' shift in sd, true mean difference, true Wasserstein distance)
    "same distribution": (0.0, 0.0, 0.0),
    "shifted by 1 sd": (1.0, 1.0, 1.0),
}


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--people", type=int, default=50)
    parser.add_argument("--worlds", default="5,10,20,40")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sizes = [int(n) for n in args.worlds.split(",")]
    print(f"runs per row {args.runs}, people {args.people}, normal values (sd 1)")
    header = (
        f"{'case':<18} {'worlds':>6}  {'Welch covers':>13}  {'KS rejects':>11}  "
        f"{'W CI covers':>12}  {'W p rejects':>12}  {'W mean':>7}"
    )
    print(header)
    print("-" * len(header))
    started = time.monotonic()
    for name, (shift, true_diff, true_w) in CASES.items():
        for n in sizes:
            welch = ks = w_cover = w_reject = 0
            w_sum = 0.0
            for run in range(args.runs):
                worlds = rng.normal(shift, 1.0, n)
                people = rng.normal(0.0, 1.0, args.people)
                found = people_distance("arm", list(worlds), list(people), seed=run)
                assert found.ci_low is not None and found.ci_high is not None
                welch += found.ci_low <= true_diff <= found.ci_high
                ks += (found.ks_p or 1.0) < 0.05
                low, high = found.wasserstein_ci_low, found.wasserstein_ci_high
                assert low is not None and high is not None
                w_cover += low <= true_w <= high
                w_reject += (found.wasserstein_p or 1.0) < 0.05
                w_sum += found.wasserstein or 0.0
            r = args.runs
            ks_text = f"{ks / r:.3f}±{_se(ks / r, r):.3f}" if true_diff == 0 else "—"
            print(
                f"{name:<18} {n:>6}  {welch / r:>7.3f}±{_se(welch / r, r):.3f}  "
                f"{ks_text:>11}  {w_cover / r:>6.3f}±{_se(w_cover / r, r):.3f}  "
                f"{w_reject / r:>6.3f}±{_se(w_reject / r, r):.3f}  "
                f"{w_sum / r:>7.3f}"
            )
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
