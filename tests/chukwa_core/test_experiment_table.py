"""The results table: columns aligned, numbers to three decimals, a missing value as "-"."""

from __future__ import annotations

from chukwa_core.experiment_table import results_table


def test_a_table_aligns_its_columns_and_marks_what_is_missing() -> None:
    results = {
        "results": [
            {
                "metric": {"label": "eaten", "aggregate": "any"},
                "arms": [
                    {
                        "arm": "control",
                        "n": 12,
                        "n_missing": 0,
                        "mean": 1.0,
                        "ci_low": 1.0,
                        "ci_high": 1.0,
                    },
                    {
                        "arm": "cautious",
                        "n": 0,
                        "n_missing": 12,
                        "mean": None,
                        "ci_low": None,
                        "ci_high": None,
                    },
                ],
                "effects": [
                    {
                        "arm": "cautious",
                        "control": "control",
                        "difference": None,
                        "ci_low": None,
                        "ci_high": None,
                        "p_value": None,
                        "n_pairs": 0,
                        "ci_method": "bootstrap",
                        "p_method": "sign-flip",
                    },
                ],
            }
        ]
    }
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
