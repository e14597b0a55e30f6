"""Coverage of the factorial fit's 95% intervals at few clusters (docs/statistics.md,
docs/designs.md): A/A experiments (no effect anywhere) on a 2x2 design with a shared
replicate effect (the seed: arms of one replicate are a cluster), fitted by the product's own
``fit_factorial``; the share of intervals holding the true 0, per number of replicates, for
the product's method (cluster-robust CR1 covariance, t on G-1 degrees of freedom) and, side by
side, the same covariance with a normal reference (what undercovers at few clusters).

    python bench/factorial_coverage.py [--runs 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chukwa_core.factorial import factorial_design
from chukwa_core.statistics.factorial import Observation, design_matrix, fit_factorial
from chukwa_core.statistics.types import MetricScale

FACTORS = [
    {"name": "a", "levels": [{"label": "no"}, {"label": "yes", "fork": {}}]},
    {"name": "b", "levels": [{"label": "no"}, {"label": "yes", "fork": {}}]},
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import statsmodels.api as sm

    design = factorial_design(FACTORS)
    labels = [arm.label for arm in design.arms]
    rng = np.random.default_rng(args.seed)
    print(f"A/A 2x2, {args.runs} runs per row; share of 95% intervals covering 0 (all 3 terms)")
    print(f"{'replicates':>10} {'t(G-1), CR1 (product)':>22} {'normal, CR1':>12} {'MC se':>6}")
    for g in (3, 5, 10):
        covered_t = covered_z = total = 0
        for _ in range(args.runs):
            cluster = rng.normal(0, 1, g)
            obs = [
                Observation(label, r + 1, float(cluster[r] + rng.normal(0, 1)))
                for label in labels
                for r in range(g)
            ]
            fit = fit_factorial(design, MetricScale.continuous(), obs)
            y = np.array([o.value for o in obs])
            x = design_matrix(design, [o.arm for o in obs])
            groups = np.array([o.replicate for o in obs])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                z = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": groups})
            zb = np.asarray(z.conf_int(0.05))
            for i, term in enumerate(fit.terms, start=1):
                assert term.interval.low is not None and term.interval.high is not None
                covered_t += term.interval.low <= 0 <= term.interval.high
                covered_z += zb[i, 0] <= 0 <= zb[i, 1]
                total += 1
        se = (0.95 * 0.05 / total) ** 0.5
        print(f"{g:>10} {covered_t / total:>22.3f} {covered_z / total:>12.3f} {se:>6.3f}")


if __name__ == "__main__":
    main()
