"""People as a reference (docs/populations.md, "Comparing with people"): observed values of an
experiment's metrics, uploaded as CSV (``unit,metric,value``) or JSON rows, checked whole before
one transaction writes them (any bad row is a 400 naming it, and nothing is written)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from chukwa_core.errors import ConflictError, invalid
from scenarios_app.models import Metric
from worlds_app.experiment_selectors import experiment_row
from worlds_app.models import ReferenceValue

MAX_ROWS = 100_000
MAX_UNIT = 200
COLUMNS = ("unit", "metric", "value")


def rows_from_csv(text: str) -> list[dict[str, Any]]:
    """The rows of a CSV upload: a header naming ``unit``, ``metric`` and ``value`` (in any
    order, no other column), then one row per observation; values stay text until checked."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise invalid(
            "empty_upload", "rows", "the CSV is empty (expected a header unit,metric,value)"
        )
    names = [h.strip().lower() for h in header]
    if sorted(names) != sorted(COLUMNS):
        raise invalid(
            "invalid_header",
            "csv",
            f"expected the columns unit, metric, value (in any order), got {', '.join(header)}",
        )
    rows: list[dict[str, Any]] = []
    for line, cells in enumerate(reader, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(names):
            raise invalid(
                "invalid_row",
                f"rows[{len(rows)}]",
                f"CSV line {line} has {len(cells)} cells, expected {len(names)}",
            )
        rows.append({**dict(zip(names, (c.strip() for c in cells), strict=True)), "_line": line})
    return rows


def _value(raw: Any, field: str) -> float:
    if isinstance(raw, bool) or raw is None:
        raise invalid("invalid_value", field, "must be a number")
    if isinstance(raw, str):
        try:
            raw = float(raw)
        except ValueError:
            raise invalid("invalid_value", field, f"{raw!r} is not a number") from None
    if not isinstance(raw, int | float) or not math.isfinite(float(raw)):
        raise invalid("invalid_value", field, "must be a finite number")
    return float(raw)


def _where(row: dict[str, Any]) -> str:
    return f" (CSV line {row['_line']})" if "_line" in row else ""


def _checked(rows: Sequence[Any], labels: dict[str, int]) -> list[tuple[str, str, float]]:
    if not isinstance(rows, list | tuple) or not rows:
        raise invalid("invalid_rows", "rows", "must be a non-empty list of {unit, metric, value}")
    if len(rows) > MAX_ROWS:
        raise invalid("too_many_rows", "rows", f"at most {MAX_ROWS} rows per upload")
    seen: dict[tuple[str, str], int] = {}
    found = []
    for i, row in enumerate(rows):
        at = f"rows[{i}]"
        if not isinstance(row, dict):
            raise invalid("invalid_row", at, "must be an object {unit, metric, value}")
        extra = sorted(set(row) - {*COLUMNS, "_line"})
        if extra:
            raise invalid("unknown_field", f"{at}.{extra[0]}", "unknown field")
        for name in COLUMNS:
            if name not in row:
                raise invalid("missing_field", f"{at}.{name}", f"required{_where(row)}")
        unit, metric = row["unit"], row["metric"]
        if not isinstance(unit, str) or not unit.strip() or len(unit) > MAX_UNIT:
            raise invalid(
                "invalid_unit",
                f"{at}.unit",
                f"must be a non-empty string of at most {MAX_UNIT} characters{_where(row)}",
            )
        if not isinstance(metric, str) or metric not in labels:
            raise invalid(
                "unknown_metric",
                f"{at}.metric",
                f"{metric!r} is not a metric of this experiment{_where(row)} "
                f"(its metrics: {', '.join(sorted(labels)) or 'none'})",
            )
        if labels[metric] > 1:
            raise invalid(
                "ambiguous_metric",
                f"{at}.metric",
                f"{metric!r} labels {labels[metric]} metrics of this experiment",
            )
        value = _value(row["value"], f"{at}.value")
        key = (metric, unit.strip())
        if key in seen:
            raise invalid(
                "duplicate_reference",
                at,
                f"unit {key[1]!r} already has a value of {metric!r} in rows[{seen[key]}]"
                f"{_where(row)}",
            )
        seen[key] = i
        found.append((key[1], metric, value))
    return found


def references_upload(*, slug: str, rows: Any, uploaded_by: str = "") -> int:
    """Check every row, then write them in one transaction; answers how many were written. A
    (unit, metric) already stored is a 409 naming the row: nothing is replaced silently."""
    experiment = experiment_row(slug)
    labels: dict[str, int] = {}
    for label in Metric.objects.filter(pk__in=list(experiment.typed_design.metrics)).values_list(
        "label", flat=True
    ):
        labels[label] = labels.get(label, 0) + 1
    found = _checked(rows, labels)
    with transaction.atomic():
        stored = set(
            ReferenceValue.objects.filter(experiment=experiment).values_list("metric_label", "unit")
        )
        for i, (unit, metric, _) in enumerate(found):
            if (metric, unit) in stored:
                raise ConflictError(
                    "reference_exists",
                    f"rows[{i}]: unit {unit!r} already has a stored value of {metric!r} "
                    "(delete the experiment's references to upload them again)",
                    {"field": f"rows[{i}]"},
                )
        ReferenceValue.objects.bulk_create(
            ReferenceValue(
                experiment=experiment,
                unit=unit,
                metric_label=metric,
                value=value,
                uploaded_by=uploaded_by,
            )
            for unit, metric, value in found
        )
    return len(found)


def references_delete(*, slug: str) -> int:
    """Delete every people's value of the experiment; answers how many."""
    experiment = experiment_row(slug)
    deleted, _ = ReferenceValue.objects.filter(experiment=experiment).delete()
    return deleted
