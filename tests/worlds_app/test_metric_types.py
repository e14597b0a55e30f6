"""A metric's type and range (docs/measurement.md, "Types"): declared by an expression or
inferred, checked at put (400 naming the field), shown by the API, and enforced when measuring
(a value outside a declared type is the error ``metric_range``, not a value)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from chukwa_core.metric_kinds import turn_scale, world_scale_of
from chukwa_core.metric_types import scale_label
from scenarios_app.models import Metric
from scenarios_app.services import metric_put
from tests.support.worlds import create_world, run_turn
from worlds_app.models import Measurement, World
from worlds_app.services.measurements import world_measure

pytestmark = pytest.mark.django_db


def _expression(expression: str, aggregate: str = "mean", **extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "label": "m",
        "kind": "expression",
        "aggregate": aggregate,
        "expression": expression,
        **extra,
    }


@pytest.mark.parametrize(
    ("content", "turn", "world"),
    [
        (_expression("turn > `1`", "any"), "binary (0 or 1)", "binary (0 or 1)"),
        (_expression("turn > `1`", "sum"), "binary (0 or 1)", "count (0, 1, 2, …)"),
        (_expression("turn > `1`", "mean"), "binary (0 or 1)", "continuous 0–1"),
        (_expression("turn"), "continuous (unbounded)", "continuous (unbounded)"),
        (_expression("turn", "last", type="count"), "count (0, 1, 2, …)", "count (0, 1, 2, …)"),
        (
            _expression("turn", "max", type="ordinal", range={"min": 1, "max": 5}),
            "ordinal 1–5",
            "ordinal 1–5",
        ),
        (
            _expression("tokens", "mean", type="continuous", range={"min": 0}),
            "continuous ≥ 0",
            "continuous ≥ 0",
        ),
    ],
)
def test_a_metrics_type_is_declared_or_inferred_and_follows_its_aggregate(
    content: dict[str, Any], turn: str, world: str
) -> None:
    assert (scale_label(turn_scale(content)), scale_label(world_scale_of(content))) == (turn, world)


@pytest.mark.parametrize(
    ("extra", "code", "field"),
    [
        ({"type": "fuzzy"}, "invalid_type", "content.type"),
        ({"type": "binary", "range": {"min": 0, "max": 1}}, "invalid_range", "content.range"),
        ({"type": "ordinal"}, "invalid_range", "content.range"),
        ({"type": "ordinal", "range": {"min": 1.5, "max": 5}}, "invalid_range", "content.range"),
        ({"type": "continuous", "range": {"min": 3, "max": 1}}, "invalid_range", "content.range"),
        ({"type": "continuous", "range": {"min": "a"}}, "invalid_range", "content.range.min"),
        ({"range": {"min": 0}}, "invalid_range", "content.range"),
    ],
)
def test_a_bad_type_is_refused_naming_the_field(
    operator_client: APIClient, extra: dict[str, Any], code: str, field: str
) -> None:
    answer = operator_client.post(
        "/api/metrics/", {"content": _expression("turn", **extra)}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert not Metric.objects.exists()


def test_a_value_outside_its_declared_type_is_recorded_as_an_error() -> None:
    create_world("ant_on_plate_rules", "typed")
    run_turn("typed")
    run_turn("typed")
    binary = metric_put(content=_expression("turn", "any", type="binary"))["hash"]
    counted = metric_put(content={**_expression("turn", "sum", type="count"), "label": "n"})["hash"]
    world = World.objects.get(slug="typed")
    world_measure(world_id=world.pk, metric_hashes=[binary, counted])
    rows = {
        (m.metric_id, m.turn_number): (m.value, m.error_code)
        for m in Measurement.objects.filter(world=world)
    }
    # turn 0 and 1 fit a binary type; turn 2 does not
    assert rows[(binary, 0)] == (0.0, "") and rows[(binary, 1)] == (1.0, "")
    assert rows[(binary, 2)] == (None, "metric_range")
    message = Measurement.objects.get(world=world, metric_id=binary, turn_number=2).error_message
    assert "declared type: binary (0 or 1)" in message
    assert [rows[(counted, n)] for n in (0, 1, 2)] == [(0.0, ""), (1.0, ""), (2.0, "")]
