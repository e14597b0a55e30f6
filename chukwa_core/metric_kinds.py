"""The registry of metric kinds: one entry per kind, each built by its own module. A new kind
is one module and one line here (and, when its value needs the database or a model, one line
in ``worlds_app/services/metric_evaluators.py``); nothing that handles metrics branches on a
kind's name. Pure: no Django."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chukwa_core.errors import invalid
from chukwa_core.metric_expression import EXPRESSION_KIND
from chukwa_core.metric_judge import LLM_JUDGE_KIND
from chukwa_core.metric_kind import MetricKind
from chukwa_core.metric_survey import SURVEY_KIND
from chukwa_core.metric_types import world_scale
from chukwa_core.statistics.types import MetricScale

METRIC_KINDS: dict[str, MetricKind] = {
    "expression": EXPRESSION_KIND,
    "llm_judge": LLM_JUDGE_KIND,
    "survey": SURVEY_KIND,
}
# The kinds the API documents (its OpenAPI enum); the registry above is what is checked.
BUILT_IN_METRIC_KINDS = tuple(METRIC_KINDS)


def registered_kind(name: object) -> MetricKind | None:
    """The registered kind ``name`` (any JSON value); None when there is none."""
    return METRIC_KINDS.get(name) if isinstance(name, str) else None


def metric_kind(name: object, field: str = "kind") -> MetricKind:
    """The registered kind ``name``; 400 ``invalid_metric_kind`` naming the field otherwise."""
    kind = registered_kind(name)
    if kind is None:
        raise invalid(
            "invalid_metric_kind",
            field,
            f"must be one of {', '.join(METRIC_KINDS)}, got {name!r}",
        )
    return kind


def turn_scale(content: Mapping[str, Any]) -> MetricScale:
    """The type and range of one turn's value of a stored metric."""
    return metric_kind(content["kind"]).turn_scale(content)


def world_scale_of(content: Mapping[str, Any]) -> MetricScale:
    """The type and range of a world's value: the turn's, through the metric's aggregate."""
    return world_scale(turn_scale(content), content["aggregate"])
