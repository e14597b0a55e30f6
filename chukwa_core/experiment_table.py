"""An experiment's results (``ExperimentResults``, read by attribute) as a plain-text table (the
`run_experiment` command and the demo print it): per metric and arm n, missing, mean and 95%
interval (or why there is none); per treatment arm the complete pairs, both arms' means over them,
the paired difference with its interval, p and Holm's p, notes and effect sizes; then the methods
paragraph. Pure: no Django.

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


def _interval_cell(status: str, low: float | None, high: float | None) -> str:
    return interval(low, high) if status == "shown" else status


def results_table(results: ExperimentResults) -> str:
    """The results of ``experiment_results`` as text, one block per metric, then the notes of
    rows that need one and the methods paragraph."""
    blocks = []
    for result in results.results:
        metric = result.metric
        flags = " [primary]" if metric.primary else ""
        flags += " [added after creation]" if metric.added_after_creation else ""
        lines = [
            f"metric {metric.label}{flags} (aggregate: {metric.aggregate}; {metric.type_label})"
        ]
        arm_rows = [["  arm", "n", "missing", "mean", "95% CI"]]
        for arm in result.arms:
            arm_rows.append(
                [
                    f"  {arm.arm}",
                    str(arm.n),
                    str(arm.n_missing),
                    number(arm.mean),
                    _interval_cell(arm.ci_status, arm.ci_low, arm.ci_high),
                ]
            )
        lines += _columns(arm_rows, right={1, 2, 3})
        lines.append(f"  CI: {result.arms[0].ci_method}" if result.arms else "")
        if result.effects:
            effect_rows = [["  effect", "pairs", "means", "difference", "95% CI", "p", "p (Holm)"]]
            notes = []
            for effect in result.effects:
                effect_rows.append(
                    [
                        f"  {effect.arm} - {effect.control}",
                        str(effect.n_pairs),
                        f"{number(effect.control_mean)} / {number(effect.treatment_mean)}",
                        number(effect.difference),
                        _interval_cell(effect.ci_status, effect.ci_low, effect.ci_high),
                        effect.p_display,
                        p_value(effect.p_holm),
                    ]
                )
                if effect.note:
                    notes.append(f"  note ({effect.arm}): {effect.note}")
                sizes = ", ".join(
                    f"{s.name} {number(s.value)}"
                    for s in effect.effect_sizes
                    if s.value is not None
                )
                if sizes:
                    notes.append(f"  effect size ({effect.arm}): {sizes}")
            lines += _columns(effect_rows, right={1, 3, 5, 6})
            lines += notes
            methods = {(e.ci_method, e.p_method) for e in result.effects}
            for ci, p in sorted(methods):
                lines += [f"  CI: {ci}", f"  p: {p}"]
        blocks.append("\n".join(line for line in lines if line))
    blocks.append(f"methods: {results.methods}")
    return "\n\n".join(blocks)
