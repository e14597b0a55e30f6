"""The statistics of an experiment's results, one registered family per metric type (binary,
count, ordinal, continuous): ``summarize_arm`` (an arm's n, mean, sd and a 95% interval inside
the metric's range), ``compare_pairs`` (treatment minus control over complete pairs, with the
type's test, interval and effect sizes), ``power_for`` (pairs needed, power of n pairs),
``holm`` (multiplicity) and ``agreement`` (a judge against people). Pure: no Django; scipy and
statsmodels are imported when first used (they take a second or two to load)."""

from chukwa_core.statistics import binary, continuous, count, ordinal
from chukwa_core.statistics.multiplicity import holm
from chukwa_core.statistics.registry import (
    compare_pairs,
    power_for,
    statistics_for,
    summarize_arm,
)
from chukwa_core.statistics.types import (
    Adjustment,
    ArmSummary,
    EffectSize,
    Interval,
    IntervalStatus,
    MetricScale,
    MetricType,
    PairedEffect,
    PowerAnswer,
    TestResult,
)

# the families register themselves when imported; named here so the import is not "unused"
FAMILIES = (binary, count, ordinal, continuous)

__all__ = [
    "Adjustment",
    "ArmSummary",
    "EffectSize",
    "Interval",
    "IntervalStatus",
    "MetricScale",
    "MetricType",
    "PairedEffect",
    "PowerAnswer",
    "TestResult",
    "compare_pairs",
    "holm",
    "power_for",
    "statistics_for",
    "summarize_arm",
]
