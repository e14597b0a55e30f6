"""Holm's step-down adjustment of the p-values of one experiment's (arm, metric) comparisons
(statsmodels.stats.multitest.multipletests, method='holm'); a comparison without a p keeps
None and does not count toward the family."""

from __future__ import annotations

from collections.abc import Sequence

from chukwa_core.statistics.libraries import library
from chukwa_core.statistics.types import ALPHA, Adjustment

HOLM = "Holm step-down adjustment (statsmodels.stats.multitest.multipletests, method='holm')"


def holm(p_values: Sequence[float | None]) -> Adjustment:
    from statsmodels.stats.multitest import multipletests

    present = [p for p in p_values if p is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    if present:
        corrected = iter(multipletests(present, alpha=ALPHA, method="holm")[1])
        adjusted = [None if p is None else float(next(corrected)) for p in p_values]
    return Adjustment(tuple(p_values), tuple(adjusted), HOLM, library("statsmodels"))
