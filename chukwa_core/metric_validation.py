"""The content rules every metric shares (docs/measurement.md): its version, label, kind and
the aggregate that turns a world's per-turn values into the world's value; the rest is its
kind's (:mod:`chukwa_core.metric_kinds`). Pure: no Django.

Each failure raises :class:`ChukwaError` naming the field, like every component validator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chukwa_core.component_validation import is_int, require_label, require_object
from chukwa_core.errors import invalid
from chukwa_core.metric_kinds import metric_kind
from chukwa_core.workflow_refs import RefLookup

AGGREGATES = ("any", "all", "sum", "mean", "min", "max", "last")
_CODE = "invalid_metric"


def validate_metric_content(
    content: object, lookup: RefLookup, field: str = "content"
) -> dict[str, Any]:
    """The metric as stored: checked whole, with ``source`` already resolved to ``{"hash"}``
    (``lookup`` holds what the store knows of it) and its kind's defaults filled in, so the
    same metric always has the same hash."""
    metric = dict(require_object(content, field, _CODE))
    if metric.get("version") != 1:
        raise invalid(_CODE, f"{field}.version", f"must be 1, got {metric.get('version')!r}")
    require_label(metric.get("label"), f"{field}.label")
    kind = metric_kind(metric.get("kind"), f"{field}.kind")
    aggregate = metric.get("aggregate")
    if aggregate not in AGGREGATES:
        raise invalid(
            "invalid_aggregate",
            f"{field}.aggregate",
            f"must be one of {', '.join(AGGREGATES)}, got {aggregate!r}",
        )
    kind.validate(metric, field, lookup)
    return metric


def integer_scale(metric: Mapping[str, Any]) -> tuple[int, int] | None:
    """The scale of a metric whose kind fixes one with integer ends (a judge scoring 1…5)."""
    scale = metric_kind(metric["kind"]).scale(metric)
    if scale is None or not (is_int(scale[0]) and is_int(scale[1])):
        return None
    return int(scale[0]), int(scale[1])
