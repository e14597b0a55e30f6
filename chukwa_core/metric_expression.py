"""The ``expression`` metric kind (docs/measurement.md, "Expressions"): a JMESPath expression
over the turn view, compiled at put, whose result is a number or a boolean. No model is
called. Pure: no Django."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from chukwa_core.component_validation import check_keys, require_string
from chukwa_core.errors import invalid
from chukwa_core.metric_kind import MetricKind, ViewMeasure
from chukwa_core.metric_types import TYPE_FIELDS, declared_scale
from chukwa_core.metric_values import evaluate
from chukwa_core.statistics.types import MetricScale
from chukwa_core.workflow_refs import RefLookup

EXPRESSION_MAX_CHARS = 4096


def compile_expression(text: str, field: str) -> Any:
    """The compiled JMESPath expression; 400 ``invalid_expression`` with the library's message."""
    try:
        return jmespath.compile(text)
    except JMESPathError as exc:
        message = " ".join(str(exc).split())
        raise invalid("invalid_expression", field, message) from None


def _validate(metric: dict[str, Any], field: str, lookup: RefLookup) -> None:
    check_keys(
        metric,
        field,
        required=("version", "label", "kind", "aggregate", "expression"),
        optional=TYPE_FIELDS,
        code="invalid_metric",
    )
    text = require_string(metric["expression"], f"{field}.expression", "invalid_expression")
    if len(text) > EXPRESSION_MAX_CHARS:
        raise invalid(
            "invalid_expression",
            f"{field}.expression",
            f"is longer than {EXPRESSION_MAX_CHARS} characters",
        )
    compile_expression(text, f"{field}.expression")
    declared_scale(metric, field)


def _view_measure(content: Mapping[str, Any]) -> ViewMeasure:
    compiled = compile_expression(content["expression"], "expression")
    return lambda view: evaluate(compiled, view)


# JMESPath nodes whose value is always a boolean (or null, recorded as metric_null)
_BOOLEAN_NODES = frozenset({"comparator", "not_expression"})
_BOOLEAN_FUNCTIONS = frozenset({"contains", "starts_with", "ends_with"})


def _is_boolean(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    if kind in _BOOLEAN_NODES:
        return True
    if kind == "function_expression":
        return node.get("value") in _BOOLEAN_FUNCTIONS
    if kind in ("and_expression", "or_expression"):  # the value of an operand: both booleans
        return all(_is_boolean(child) for child in node.get("children", []))
    return False


def _turn_scale(content: Mapping[str, Any]) -> MetricScale:
    """Declared, or inferred: a boolean expression is binary, anything else continuous."""
    declared = declared_scale(content, "content")
    if declared is not None:
        return declared
    parsed = compile_expression(content["expression"], "expression").parsed
    return MetricScale.binary() if _is_boolean(parsed) else MetricScale.continuous()


EXPRESSION_KIND = MetricKind(
    validate=_validate,
    summary="JMESPath over the turn view: no model is called",
    view_measure=_view_measure,
    turn_scale=_turn_scale,
)
