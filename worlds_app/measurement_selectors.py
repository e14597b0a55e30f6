"""Reads of measurements (docs/measurement.md): a world's list and per-metric series, one turn's,
and a metric's agreement with reviewers' annotations of the same turns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Exists, OuterRef, Q, Subquery
from django.db.models.fields.json import KeyTextTransform, KeyTransform

from chukwa_core.agreement import AgreementMetric, MetricAgreement, Unit, agreement
from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import is_hash, label_problem
from chukwa_core.metric_kinds import turn_scale
from chukwa_core.metric_values import aggregate
from chukwa_core.seeds import agreement_seed
from chukwa_core.statistics.types import MetricType
from scenarios_app.selectors import metric_content, metric_rows
from worlds_app.history import history_owners
from worlds_app.models import (
    Annotation,
    AnnotationTarget,
    AnnotationValueKind,
    Measurement,
    World,
)
from worlds_app.selectors import require_slug, require_turn_number, world_row

# The most turns a world page draws per metric (the newest); the API lists them all.
SERIES_POINTS = 400
_ROW_FIELDS = (
    "turn_number",
    "metric_id",
    "metric__label",
    "metric__kind",
    "subject",
    "value",
    "error_code",
    "error_message",
    "llm_call_id",
    "measured_at",
)


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "turn": row["turn_number"],
        "metric": {
            "hash": row["metric_id"],
            "label": row["metric__label"],
            "kind": row["metric__kind"],
        },
        "subject": row["subject"],
        "value": row["value"],
        "error": (
            {"code": row["error_code"], "message": row["error_message"]}
            if row["error_code"]
            else None
        ),
        "llm_call_id": row["llm_call_id"],
        "measured_at": row["measured_at"],
    }


def _metric_filter(metric: str | None) -> Q:
    if not metric:
        return Q()
    if is_hash(metric):
        return Q(metric_id=metric)
    if label_problem(metric) is None:
        return Q(metric__label=metric)
    raise invalid("invalid_query", "metric", f"{metric!r} is neither a hash nor a metric label")


def _in_history(world: World) -> Q:
    """The measurements of the world's history: its own turns' rows, and for a branch its
    parent's rows of the turns before the branch point (measured once, as the parent's)."""
    found = Q(pk__in=[])
    end: int | None = None
    for owner, start in history_owners(world):
        own = Q(world_id=owner, turn_number__gte=start)
        found |= own & Q(turn_number__lt=end) if end is not None else own
        end = start
    return found


def measurement_list(*, slug: str, metric: str | None) -> dict[str, Any]:
    """A world's measurements (of one metric: a hash, or a label for all its versions), by
    metric, turn and subject (a survey's one row per agent asked; "" for every other kind).
    One query after the world's."""
    world = world_row(slug)
    rows = (
        Measurement.objects.filter(_metric_filter(metric), _in_history(world))
        .order_by("metric__label", "metric_id", "turn_number", "subject")
        .values(*_ROW_FIELDS)
    )
    results = [_row(row) for row in rows]
    return {"world": world.slug, "count": len(results), "results": results}


def turn_measurements(*, slug: str, number: int) -> list[dict[str, Any]]:
    """One turn's measurements, by metric label and subject (a survey's one row per agent); a
    judge's with the rationale of its score."""
    require_slug(slug)
    require_turn_number(number)
    world = World.objects.select_related("branch_parent").filter(slug=slug).first()
    if world is None:
        return []
    rows = (
        Measurement.objects.filter(_in_history(world), turn_number=number)
        .order_by("metric__label", "metric_id", "subject")
        .values(
            *_ROW_FIELDS,
            rationale=KeyTextTransform(
                "rationale", KeyTransform("judge_score", "llm_call__artifacts")
            ),
        )
    )
    return [{**_row(row), "rationale": row["rationale"] or ""} for row in rows]


def world_metric_series(*, slug: str) -> list[dict[str, Any]]:
    """Per metric the world was measured with: its points in turn order (the newest
    SERIES_POINTS), each a value or an error, turn 0 and a branch's turns before its branch
    point marked ``baseline``; and the world's value, the metric's aggregate over the turns the
    world ran (errors and the baseline left out). Two queries after the world's."""
    world = world_row(slug)
    start = world.branched_from_turn or 0
    rows = (
        Measurement.objects.filter(_in_history(world))
        .order_by("metric__label", "metric_id", "turn_number", "subject")
        .values("metric_id", "turn_number", "subject", "value", "error_code", "error_message")
    )
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_metric.setdefault(row["metric_id"], []).append(
            {
                "turn": row["turn_number"],
                "subject": row["subject"],
                "value": row["value"],
                "error": row["error_code"] or None,
                "message": row["error_message"],
                "baseline": row["turn_number"] <= start,
            }
        )
    contents = _metric_contents(set(by_metric))
    series: list[dict[str, Any]] = []
    for metric_hash, points in by_metric.items():
        content = contents[metric_hash]
        ran = [p["value"] for p in points if not p["baseline"] and p["value"] is not None]
        series.append(
            {
                "hash": metric_hash,
                "label": content["label"],
                "kind": content["kind"],
                "aggregate": content["aggregate"],
                "value": aggregate(content["aggregate"], ran),
                "turns": len({p["turn"] for p in points}),
                "error_turns": len({p["turn"] for p in points if p["error"]}),
                "points": points[-SERIES_POINTS:],
            }
        )
    series.sort(key=lambda s: (s["label"], s["hash"]))
    return series


def _metric_contents(hashes: set[str]) -> dict[str, dict[str, Any]]:
    return {row["hash"]: row["content"] for row in metric_rows(hashes=hashes)}


def _require_metric(metric_hash: str) -> dict[str, Any]:
    if not is_hash(metric_hash):
        raise invalid("invalid_hash", "hash", f"{metric_hash!r} is not a lowercase sha256 hex")
    content = metric_content(metric_hash=metric_hash)
    if content is None:
        raise NotFoundError(
            "component_not_found",
            f"hash: no stored metric has hash {metric_hash}",
            {"field": "hash", "hash": metric_hash},
        )
    return content


def _paired_annotations(metric_hash: str) -> Any:
    """Reviewers' numeric or boolean annotations of turns, each with the metric's value on the
    same (world, turn) when it has one (errors have none)."""
    value = Measurement.objects.filter(
        metric_id=metric_hash,
        world_id=OuterRef("turn__world_id"),
        turn_number=OuterRef("turn__number"),
        value__isnull=False,
    ).values("value")[:1]
    return (
        Annotation.objects.filter(
            target_kind=AnnotationTarget.TURN,
            value_kind__in=[AnnotationValueKind.NUMBER, AnnotationValueKind.BOOLEAN],
        )
        .annotate(metric_value=Subquery(value))
        .filter(metric_value__isnull=False)
    )


def metric_agreement(*, metric_hash: str, annotation: str) -> MetricAgreement:
    """The metric's values against reviewers' annotations named ``annotation`` on the same
    turns (``chukwa_core.agreement``): a turn is one unit, its label the mean of its reviewers'
    (a reviewer who labelled it twice: their mean), a boolean read as 1 or 0. One query after
    the metric's."""
    content = _require_metric(metric_hash)
    problem = label_problem(annotation)
    if problem is not None:
        raise invalid("invalid_query", "annotation", f"{annotation!r} {problem}")
    rows = _paired_annotations(metric_hash).filter(name=annotation)
    found: dict[tuple[int, int], tuple[str, float, dict[str, list[float]]]] = {}
    flags = True
    for world_id, number, slug, author, metric_value, kind, value, boolean in rows.values_list(
        "turn__world_id",
        "turn__number",
        "turn__world__slug",
        "author__username",
        "metric_value",
        "value_kind",
        "value_number",
        "value_boolean",
    ).order_by("turn__world_id", "turn__number", "created_at", "id"):
        flags = flags and kind == AnnotationValueKind.BOOLEAN
        label = value if kind == AnnotationValueKind.NUMBER else float(bool(boolean))
        unit = found.setdefault((world_id, number), (slug, metric_value, {}))
        unit[2].setdefault(author, []).append(label)
    units = [
        Unit(slug, value, {who: sum(v) / len(v) for who, v in ratings.items()})
        for slug, value, ratings in found.values()
    ]
    turn = turn_scale(content)
    scale = (
        (int(turn.low), int(turn.high))
        if turn.type in (MetricType.BINARY, MetricType.ORDINAL)
        and turn.low is not None
        and turn.high is not None
        else None
    )
    answer = agreement(
        units,
        scale=scale,
        flags=flags and bool(units),
        turn_type=turn.type.value,
        seed=agreement_seed(metric_hash, annotation),
    )
    return MetricAgreement.of(
        answer,
        metric=AgreementMetric(metric_hash, content["label"], content["kind"]),
        annotation=annotation,
        scale=scale,
    )


def agreement_names(*, metric_hash: str) -> list[str]:
    """The annotation names (numbers or booleans, on turns) that can be compared with the
    metric: those on a turn it measured with a value. One query."""
    measured = Measurement.objects.filter(
        metric_id=metric_hash,
        world_id=OuterRef("turn__world_id"),
        turn_number=OuterRef("turn__number"),
        value__isnull=False,
    )
    return list(
        Annotation.objects.filter(
            Exists(measured),
            target_kind=AnnotationTarget.TURN,
            value_kind__in=[AnnotationValueKind.NUMBER, AnnotationValueKind.BOOLEAN],
        )
        .order_by("name")
        .values_list("name", flat=True)
        .distinct()
    )
