"""Continuous metrics: an arm's mean with an interval chosen by the metric's range (t when
unbounded, log-scale t when bounded on one side, rescaled Wilson when bounded on both); a pair
of arms by the mean paired difference, its paired t interval, the sign-flip permutation test
and d_z; power by the paired t test."""

from __future__ import annotations

from collections.abc import Sequence

from chukwa_core.statistics.arm_intervals import range_interval
from chukwa_core.statistics.numeric import compare_means, d_z_size, summarize, t_power
from chukwa_core.statistics.pairs import sign_flip_test
from chukwa_core.statistics.registry import register
from chukwa_core.statistics.types import (
    ArmSummary,
    MetricScale,
    MetricType,
    PairedEffect,
    PowerAnswer,
)


class ContinuousStatistics:
    metric_type = MetricType.CONTINUOUS

    def summarize(self, scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
        return summarize(scale, values, lambda present: range_interval(scale, present))

    def compare(
        self,
        scale: MetricScale,
        control: Sequence[float | None],
        treatment: Sequence[float | None],
        *,
        seed: int,
    ) -> PairedEffect:
        return compare_means(
            scale,
            control,
            treatment,
            test=lambda differences: sign_flip_test(differences, seed=seed),
            effect_sizes=d_z_size,
        )

    def power(
        self, *, effect: float, sd: float, alpha: float, power: float, n: int | None
    ) -> PowerAnswer:
        return t_power(effect=effect, sd=sd, alpha=alpha, power=power, n=n)


register(ContinuousStatistics())
