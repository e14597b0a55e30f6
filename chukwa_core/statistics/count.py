"""Count metrics (non-negative integers): an arm's mean with the exact Poisson (Garwood)
interval, or the quasi-Poisson log-scale t interval when the sample is over-dispersed; a pair of
arms by the mean paired difference, its paired t interval, the sign-flip permutation test and
d_z; power by the paired t test."""

from __future__ import annotations

from collections.abc import Sequence

from chukwa_core.statistics.arm_intervals import count_interval
from chukwa_core.statistics.numeric import MeanDifferenceStatistics, summarize
from chukwa_core.statistics.registry import register
from chukwa_core.statistics.types import ArmSummary, MetricScale, MetricType


class CountStatistics(MeanDifferenceStatistics):
    metric_type = MetricType.COUNT

    def summarize(self, scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
        return summarize(scale, values, count_interval)


register(CountStatistics())
