"""An experiment's results (``ExperimentResults``, read by attribute) as a plain-text table (the
`run_experiment` command and the demo print it): per metric and arm n, mean and 95% CI; per treatment arm the paired difference from
control with its CI, p-value and number of pairs. Pure: no Django.

Numbers are printed with three decimals (p-values with three significant digits) by
:func:`number` and :func:`p_value`, so a reader can check the table against the results JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

from chukwa_core.experiment_results_types import ExperimentResults

MISSING = "-"


def number(value: float | None) -> str:
    return MISSING if value is None else f"{value:.3f}"


def p_value(value: float | None) -> str:
    return MISSING if value is None else f"{value:.3g}"


def interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return MISSING
    return f"[{number(low)}, {number(high)}]"


def _columns(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """Rows padded to their columns' widths (numbers right-aligned)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]


def results_table(results: ExperimentResults) -> str:
    """The results of ``experiment_results`` as text, one block per metric."""
    blocks = []
    for result in results.results:
        metric = result.metric
        lines = [f"metric {metric.label} (aggregate: {metric.aggregate})"]
        arm_rows = [["  arm", "n", "missing", "mean", "95% CI"]]
        for arm in result.arms:
            arm_rows.append(
                [
                    f"  {arm.arm}",
                    str(arm.n),
                    str(arm.n_missing),
                    number(arm.mean),
                    interval(arm.ci_low, arm.ci_high),
                ]
            )
        lines += _columns(arm_rows, right={1, 2, 3})
        if result.effects:
            effect_rows = [["  effect", "difference", "95% CI", "p", "pairs"]]
            for effect in result.effects:
                effect_rows.append(
                    [
                        f"  {effect.arm} - {effect.control}",
                        number(effect.difference),
                        interval(effect.ci_low, effect.ci_high),
                        p_value(effect.p_value),
                        str(effect.n_pairs),
                    ]
                )
            lines += _columns(effect_rows, right={1, 3, 4})
            methods = {(e.ci_method, e.p_method) for e in result.effects}
            for ci, p in sorted(methods):
                lines += [f"  CI: {ci}", f"  p: {p}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
