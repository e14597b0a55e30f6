"""A metric's type and range (docs/measurement.md, "Types"): what one turn's value is — declared
by an expression (``type``, ``range``) or inferred (a boolean expression is ``binary``, a judge on
an integer scale ``ordinal``, anything else ``continuous``) — and what a world's value is once the
metric's aggregate has turned its turns into one (``any`` of booleans is binary, their ``sum`` a
count, their ``mean`` a proportion). The statistics of an experiment's results are chosen by the
world's type and never leave its range. Pure: no Django."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chukwa_core.errors import invalid
from chukwa_core.statistics.types import MetricScale, MetricType

TYPES = tuple(t.value for t in MetricType)
TYPE_FIELDS = ("type", "range")


def _end(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("invalid_range", field, f"must be a finite number, got {value!r}")
    return float(value)


def declared_scale(metric: Mapping[str, Any], field: str) -> MetricScale | None:
    """The turn type a metric declares (``type``, with ``range`` for an ordinal scale or a
    bounded continuous one), checked; None when it declares none. 400 naming the field."""
    if "type" not in metric:
        if "range" in metric:
            raise invalid("invalid_range", f"{field}.range", "needs a type (ordinal or continuous)")
        return None
    name = metric["type"]
    if name not in TYPES:
        raise invalid(
            "invalid_type", f"{field}.type", f"must be one of {', '.join(TYPES)}, got {name!r}"
        )
    kind = MetricType(name)
    bounds = metric.get("range")
    if kind in (MetricType.BINARY, MetricType.COUNT):
        if bounds is not None:
            raise invalid(
                "invalid_range",
                f"{field}.range",
                f"a {name} metric's range is fixed ({'0 or 1' if name == 'binary' else '0, 1, 2, …'})",
            )
        return MetricScale.binary() if kind is MetricType.BINARY else MetricScale.count()
    if bounds is None:
        if kind is MetricType.ORDINAL:
            raise invalid(
                "invalid_range", f"{field}.range", 'an ordinal metric needs {"min": a, "max": b}'
            )
        return MetricScale.continuous()
    if not isinstance(bounds, dict) or set(bounds) - {"min", "max"} or not bounds:
        raise invalid("invalid_range", f"{field}.range", 'must be {"min"?: a, "max"?: b}')
    low = _end(bounds["min"], f"{field}.range.min") if "min" in bounds else None
    high = _end(bounds["max"], f"{field}.range.max") if "max" in bounds else None
    if low is not None and high is not None and not low < high:
        raise invalid(
            "invalid_range", f"{field}.range", f"min must be less than max, got {low} and {high}"
        )
    if kind is MetricType.ORDINAL:
        if low is None or high is None or not (low.is_integer() and high.is_integer()):
            raise invalid(
                "invalid_range", f"{field}.range", "an ordinal scale has two integer ends"
            )
        return MetricScale.ordinal(int(low), int(high))
    return MetricScale.continuous(low, high)


def scale_of_bounds(low: float, high: float) -> MetricScale:
    """A score between two ends: ordinal when both are integers, else continuous."""
    if float(low).is_integer() and float(high).is_integer():
        return MetricScale.ordinal(int(low), int(high))
    return MetricScale.continuous(float(low), float(high))


def world_scale(turn: MetricScale, aggregate: str) -> MetricScale:
    """What a world's value is after ``aggregate`` over its turns' values of type ``turn``."""
    if aggregate in ("any", "all"):
        return MetricScale.binary()
    if aggregate in ("min", "max", "last"):
        return turn
    if aggregate == "mean":
        if turn.type is MetricType.BINARY:
            return MetricScale.continuous(0.0, 1.0)
        if turn.type is MetricType.COUNT:
            return MetricScale.continuous(0.0, None)
        return MetricScale.continuous(turn.low, turn.high)
    if aggregate == "sum":
        if turn.type in (MetricType.BINARY, MetricType.COUNT):
            return MetricScale.count()
        if turn.type is MetricType.ORDINAL and turn.low is not None and turn.low >= 0:
            return MetricScale.count()
        nonnegative = turn.low is not None and turn.low >= 0
        return MetricScale.continuous(0.0 if nonnegative else None, None)
    raise ValueError(f"unknown aggregate {aggregate!r}")


def scale_label(scale: MetricScale) -> str:
    """The type as a reader says it: "binary (0 or 1)", "ordinal 1 to 5" (written with an en dash), "continuous ≥ 0"."""
    if scale.type is MetricType.BINARY:
        return "binary (0 or 1)"
    if scale.type is MetricType.COUNT:
        return "count (0, 1, 2, …)"
    low, high = scale.low, scale.high

    def show(value: float) -> str:
        return str(int(value)) if float(value).is_integer() else f"{value:g}"

    if low is not None and high is not None:
        return f"{scale.type.value} {show(low)}–{show(high)}"
    if low is not None:
        return f"{scale.type.value} ≥ {show(low)}"
    if high is not None:
        return f"{scale.type.value} ≤ {show(high)}"
    return f"{scale.type.value} (unbounded)"
