"""The typed values of the statistics layer: a metric's type and range, and the frozen results
(an interval, a test, an arm's summary, a paired effect, a power answer, an adjustment), each
naming its method and the library version that computed it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

CONFIDENCE = 0.95
ALPHA = 0.05


class MetricType(StrEnum):
    BINARY = "binary"
    COUNT = "count"
    ORDINAL = "ordinal"
    CONTINUOUS = "continuous"


@dataclass(frozen=True)
class MetricScale:
    """A metric's type and its range: ``low``/``high`` None means unbounded on that side."""

    type: MetricType
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if self.type is MetricType.BINARY and (self.low, self.high) != (0, 1):
            raise ValueError("a binary metric ranges over 0 and 1")
        if self.type is MetricType.COUNT and (self.low != 0 or self.high is not None):
            raise ValueError("a count metric ranges over 0, 1, 2, …")
        if self.type is MetricType.ORDINAL and not (
            self.low is not None
            and self.high is not None
            and float(self.low).is_integer()
            and float(self.high).is_integer()
        ):
            raise ValueError("an ordinal metric has an integer scale with both ends")
        if self.low is not None and self.high is not None and not self.low < self.high:
            raise ValueError("a range's low end must be below its high end")

    @classmethod
    def binary(cls) -> MetricScale:
        return cls(MetricType.BINARY, 0, 1)

    @classmethod
    def count(cls) -> MetricScale:
        return cls(MetricType.COUNT, 0, None)

    @classmethod
    def ordinal(cls, low: int, high: int) -> MetricScale:
        return cls(MetricType.ORDINAL, low, high)

    @classmethod
    def continuous(cls, low: float | None = None, high: float | None = None) -> MetricScale:
        return cls(MetricType.CONTINUOUS, low, high)

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def width(self) -> float | None:
        """How far apart two values can be (the range of a paired difference is ± this)."""
        if self.low is None or self.high is None:
            return None
        return float(self.high) - float(self.low)

    def check(self, value: float) -> None:
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        if (self.low is not None and value < self.low) or (
            self.high is not None and value > self.high
        ):
            raise ValueError(f"{value!r} is outside the {self.type} metric's range")
        if self.type is not MetricType.CONTINUOUS and not float(value).is_integer():
            raise ValueError(f"{value!r} is not a whole number, as a {self.type} value must be")

    def check_all(self, values: Sequence[float] | np.ndarray) -> None:
        """``check`` of every value, at once: the same ValueError, for the first value that
        fails, as checking them one by one."""
        if len(values) == 0:
            return
        array = np.asarray(values, dtype=float)
        fits = bool(np.isfinite(array).all())
        if fits and self.low is not None:
            fits = bool((array >= self.low).all())
        if fits and self.high is not None:
            fits = bool((array <= self.high).all())
        if fits and self.type is not MetricType.CONTINUOUS:
            fits = bool((array == np.trunc(array)).all())
        if not fits:
            for value in values:
                self.check(float(value) if isinstance(values, np.ndarray) else value)


class IntervalStatus(StrEnum):
    SHOWN = "shown"
    # the interval and its row's p disagree about 0 (one says significant, the other not)
    WITHHELD = "withheld"
    # no variation in the data: any interval would be zero-width or made up
    UNINFORMATIVE = "uninformative"
    # too few values for the method (no values, or one where a spread is needed)
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    status: IntervalStatus
    method: str
    library: str
    level: float = CONFIDENCE
    reason: str | None = None

    @property
    def shown(self) -> bool:
        return self.status is IntervalStatus.SHOWN


@dataclass(frozen=True)
class TestResult:
    """A two-sided test of no difference. ``p_value`` is None when no test could be run.
    ``exact`` False means Monte Carlo: ``resamples``, ``seed`` and ``monte_carlo_se`` say how
    the p was estimated and ``at_floor`` that it is the smallest such a run can give (shown as
    ``< 1/(resamples+1)``). ``can_reach_alpha`` False: with this many pairs the test cannot give
    p < 0.05 whatever the data (``note`` says why)."""

    p_value: float | None
    method: str
    library: str
    exact: bool
    can_reach_alpha: bool
    resamples: int | None = None
    seed: int | None = None
    monte_carlo_se: float | None = None
    at_floor: bool = False
    note: str | None = None

    @property
    def display(self) -> str:
        if self.p_value is None:
            return "—"
        if self.at_floor and self.resamples is not None:
            return f"< {1 / (self.resamples + 1):.2g}"
        return f"{self.p_value:.3g}"


@dataclass(frozen=True)
class EffectSize:
    name: str
    value: float | None
    method: str
    library: str


@dataclass(frozen=True)
class ArmSummary:
    n: int
    n_missing: int
    mean: float | None
    sd: float | None
    interval: Interval


@dataclass(frozen=True)
class PairedEffect:
    """Treatment minus control over complete pairs (``n_dropped`` pairs had a side missing)."""

    metric_type: MetricType
    n_pairs: int
    n_dropped: int
    control_mean: float | None
    treatment_mean: float | None
    difference: float | None
    interval: Interval
    test: TestResult
    effect_sizes: tuple[EffectSize, ...]


@dataclass(frozen=True)
class PowerAnswer:
    """Replicates (pairs) needed for ``power`` at ``alpha`` against ``effect`` with the paired
    differences' standard deviation ``sd``, and the power of ``n_given`` pairs."""

    effect: float
    sd: float
    alpha: float
    power: float
    n_needed: int | None
    n_given: int | None
    power_of_given: float | None
    method: str
    library: str
    note: str | None = None


@dataclass(frozen=True)
class Adjustment:
    """p-values adjusted across a family of comparisons, in the order given (None stays None)."""

    raw: tuple[float | None, ...]
    adjusted: tuple[float | None, ...]
    method: str
    library: str
