"""The registry of metric types' statistics: each type's module registers one object that
summarizes an arm, compares paired arms and answers power, and callers ask through
``summarize_arm``/``compare_pairs``/``power_for`` with no branch per type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chukwa_core.statistics.types import (
    ALPHA,
    ArmSummary,
    MetricScale,
    MetricType,
    PairedEffect,
    PowerAnswer,
)


class MetricStatistics(Protocol):
    metric_type: MetricType

    def summarize(self, scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
        """One arm's values (None: missing) → n, n_missing, mean, sd, 95% interval."""
        ...

    def compare(
        self,
        scale: MetricScale,
        control: Sequence[float | None],
        treatment: Sequence[float | None],
        *,
        seed: int,
    ) -> PairedEffect:
        """Treatment minus control, the lists in replicate order (index i is a pair)."""
        ...

    def power(
        self, *, effect: float, sd: float, alpha: float, power: float, n: int | None
    ) -> PowerAnswer:
        """Pairs needed for ``power`` against ``effect`` (paired differences' sd ``sd``), and
        the power of ``n`` pairs."""
        ...


_REGISTRY: dict[MetricType, MetricStatistics] = {}


def register(statistics: MetricStatistics) -> None:
    if statistics.metric_type in _REGISTRY:
        raise ValueError(f"{statistics.metric_type} statistics are already registered")
    _REGISTRY[statistics.metric_type] = statistics


def statistics_for(metric_type: MetricType) -> MetricStatistics:
    return _REGISTRY[metric_type]


def summarize_arm(scale: MetricScale, values: Sequence[float | None]) -> ArmSummary:
    return statistics_for(scale.type).summarize(scale, values)


def compare_pairs(
    scale: MetricScale,
    control: Sequence[float | None],
    treatment: Sequence[float | None],
    *,
    seed: int,
) -> PairedEffect:
    return statistics_for(scale.type).compare(scale, control, treatment, seed=seed)


def power_for(
    scale: MetricScale,
    *,
    effect: float,
    sd: float,
    alpha: float = ALPHA,
    power: float = 0.8,
    n: int | None = None,
) -> PowerAnswer:
    if not (effect != 0 and sd > 0 and 0 < alpha < 1 and 0 < power < 1):
        raise ValueError("power needs a non-zero effect, sd > 0, 0 < alpha < 1, 0 < power < 1")
    return statistics_for(scale.type).power(effect=effect, sd=sd, alpha=alpha, power=power, n=n)
