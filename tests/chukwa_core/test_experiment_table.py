"""The results table: columns aligned, numbers to three decimals, a missing value as "-"."""

from __future__ import annotations

from chukwa_core.experiment_results_types import (
    ArmResult,
    Effect,
    ExperimentResults,
    MetricResult,
    ResultMetric,
)
from chukwa_core.experiment_table import results_table


def _arm(arm: str, n: int, missing: int, mean: float | None) -> ArmResult:
    return ArmResult(
        arm=arm,
        n=n,
        n_missing=missing,
        mean=mean,
        sd=None if mean is None else 0.0,
        ci_low=mean,
        ci_high=mean,
        ci_method="t",
        per_turn=(),
        worlds=(),
    )


def test_a_table_aligns_its_columns_and_marks_what_is_missing() -> None:
    results = ExperimentResults(
        experiment="e",
        control="control",
        results=(
            MetricResult(
                metric=ResultMetric(hash="0" * 64, label="eaten", aggregate="any"),
                arms=(_arm("control", 12, 0, 1.0), _arm("cautious", 0, 12, None)),
                effects=(
                    Effect(
                        arm="cautious",
                        control="control",
                        n_pairs=0,
                        difference=None,
                        ci_low=None,
                        ci_high=None,
                        ci_method="bootstrap",
                        p_value=None,
                        p_method="sign-flip",
                    ),
                ),
            ),
        ),
    )
    assert results_table(results).splitlines() == [
        "metric eaten (aggregate: any)",
        "  arm        n  missing   mean  95% CI",
        "  control   12        0  1.000  [1.000, 1.000]",
        "  cautious   0       12      -  -",
        "  effect              difference  95% CI  p  pairs",
        "  cautious - control           -  -       -      0",
        "  CI: bootstrap",
        "  p: sign-flip",
    ]
