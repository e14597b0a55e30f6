"""Continuous metrics: an arm's mean with an interval chosen by the metric's range (t when
unbounded, log-scale t when bounded on one side, rescaled Wilson when bounded on both); a pair
of arms by the mean paired difference, its paired t interval, the sign-flip permutation test
and d_z; power by the paired t test."""

from __future__ import annotations

from collections.abc import Sequence

from chukwa_core.statistics.arm_intervals import range_interval
from chukwa_core.statistics.numeric import MeanDifferenceStatistics, summarize
from chukwa_core.statistics.registry import register
from chukwa_core.statistics.types import ArmSummary, MetricScale, MetricType


class ContinuousStatistics(MeanDifferenceStatistics):
    metric_type = MetricType.CONTINUOUS

    def summarize(self, scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
        return summarize(scale, values, lambda present: range_interval(scale, present))


register(ContinuousStatistics())
