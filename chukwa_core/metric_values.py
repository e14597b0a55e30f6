"""What a metric's expression says of one turn view, and what a world's per-turn values come to
(its ``aggregate``). Pure: no Django."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import jmespath
from jmespath.exceptions import JMESPathError

from chukwa_core.component_validation import type_name

# Error codes a measurement may record instead of a value.
METRIC_NULL = "metric_null"  # the expression's result is null
METRIC_TYPE = "metric_type"  # … neither a number nor a boolean
METRIC_ERROR = "metric_error"  # … failed (a function given the wrong type, say)
SUBJECT_NOT_AGENT = "subject_not_agent"  # a judge's subject is no agent of the world

# JMESPath's own functions only: no custom function can run code.
_OPTIONS = jmespath.Options()


@dataclass(frozen=True)
class Outcome:
    """A measurement's result: a value, or an error code with its message."""

    value: float | None = None
    error_code: str = ""
    error_message: str = ""
    llm_call_id: UUID | None = None  # a judge's (accepted, or last) generation
    subject: str = ""  # the agent a survey asked (one row per agent); "" for the turn's row


@dataclass(frozen=True)
class Trial:
    """What trying a metric on one turn answers (nothing is written): the outcome it would
    record — None when it was not asked (a judge tried without ``ask``) —, and for a kind that
    calls a model the messages it sends and the model's rationale."""

    outcome: Outcome | None
    messages: list[dict[str, str]] | None = None
    rationale: str | None = None


def typed_result(result: Any) -> Outcome:
    """A number or a boolean (true = 1) is a value; null and anything else are errors."""
    if result is None:
        return Outcome(error_code=METRIC_NULL, error_message="the expression's result is null")
    if isinstance(result, bool):
        return Outcome(value=1.0 if result else 0.0)
    if isinstance(result, int | float):
        value = float(result)
        if math.isfinite(value):
            return Outcome(value=value)
    shown = repr(result)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return Outcome(
        error_code=METRIC_TYPE,
        error_message=f"the result must be a number or a boolean, got {type_name(result)}: {shown}",
    )


def evaluate(compiled: Any, view: Any) -> Outcome:
    """One compiled expression over one turn view."""
    try:
        result = compiled.search(view, options=_OPTIONS)
    except JMESPathError as exc:
        return Outcome(error_code=METRIC_ERROR, error_message=" ".join(str(exc).split()))
    return typed_result(result)


def aggregate(kind: str, values: Sequence[float]) -> float | None:
    """A world's value from its per-turn values (turns in order, errors left out); None when
    there is none. ``any``/``all`` read a value as true when it is not 0 and answer 1 or 0."""
    if not values:
        return None
    if kind == "any":
        return 1.0 if any(v != 0 for v in values) else 0.0
    if kind == "all":
        return 1.0 if all(v != 0 for v in values) else 0.0
    if kind == "sum":
        return math.fsum(values)
    if kind == "mean":
        return math.fsum(values) / len(values)
    if kind == "min":
        return min(values)
    if kind == "max":
        return max(values)
    if kind == "last":
        return values[-1]
    raise ValueError(f"unknown aggregate {kind!r}")
