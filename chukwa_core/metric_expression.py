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
from chukwa_core.metric_values import evaluate
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


def _view_measure(content: Mapping[str, Any]) -> ViewMeasure:
    compiled = compile_expression(content["expression"], "expression")
    return lambda view: evaluate(compiled, view)


EXPRESSION_KIND = MetricKind(
    validate=_validate,
    summary="JMESPath over the turn view: no model is called",
    view_measure=_view_measure,
)
