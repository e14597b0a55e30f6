"""The content rules of a metric (docs/measurement.md): an ``expression`` (JMESPath over the turn
view) or an ``llm_judge`` (an LLM source asked to score the turn view on a scale), and the
aggregate that turns a world's per-turn values into the world's value. Pure: no Django.

Each failure raises :class:`ChukwaError` naming the field, like every component validator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from chukwa_core.component_validation import (
    check_keys,
    is_int,
    require_label,
    require_object,
    require_string,
    type_name,
)
from chukwa_core.errors import invalid
from chukwa_core.ids import ENTITY_ID_PATTERN
from chukwa_core.source_validation import LLM_INTERFACE
from chukwa_core.workflow_refs import RESPONSE_SOURCE, RefLookup, check_interface, check_ref

EXPRESSION = "expression"
LLM_JUDGE = "llm_judge"
METRIC_KINDS = (EXPRESSION, LLM_JUDGE)
AGGREGATES = ("any", "all", "sum", "mean", "min", "max", "last")
# A judge's corrective retries, as on an LLM node but fewer: a judge scores one turn.
JUDGE_GENERATION_ATTEMPTS = (1, 5)
# Without max_generation_attempts a judge is asked once: no retry unless the author asks for it.
DEFAULT_JUDGE_GENERATION_ATTEMPTS = 1
EXPRESSION_MAX_CHARS = 4096
# The top-level keys of the turn view (worlds_app/turn_view.py), each a placeholder of its own.
TURN_VIEW_KEYS = (
    "world",
    "turn",
    "simulation_time",
    "entities",
    "environments",
    "patches",
    "calls",
    "tokens",
    "cost",
)
# What a judge's prompts may name: the whole turn view, one of its keys, and with ``subject``
# the interviewed agent's own view (the placeholders an LLM node's prompt has for its subject).
TURN_PLACEHOLDERS = frozenset({"turn", *(f"turn.{key}" for key in TURN_VIEW_KEYS)})
SUBJECT_PLACEHOLDERS = frozenset(
    {"subject.id", "subject.rendered", "subject.memory", "environment.rendered"}
)
_PLACEHOLDER_RE = re.compile(r"\{\{(.*?)\}\}")
_ENTITY_ID_RE = re.compile(ENTITY_ID_PATTERN)
_CODE = "invalid_metric"


def compile_expression(text: str, field: str) -> Any:
    """The compiled JMESPath expression; 400 ``invalid_expression`` with the library's message."""
    try:
        return jmespath.compile(text)
    except JMESPathError as exc:
        message = " ".join(str(exc).split())
        raise invalid("invalid_expression", field, message) from None


def _number(value: object, field: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("invalid_scale", field, f"must be a finite number, got {type_name(value)}")
    return value


def _check_prompt(text: str, field: str, *, has_subject: bool) -> None:
    for match in _PLACEHOLDER_RE.finditer(text):
        name = match.group(1)
        if name in TURN_PLACEHOLDERS or (has_subject and name in SUBJECT_PLACEHOLDERS):
            continue
        known = sorted(TURN_PLACEHOLDERS | (SUBJECT_PLACEHOLDERS if has_subject else set()))
        hint = "" if has_subject or name not in SUBJECT_PLACEHOLDERS else " (it needs subject)"
        raise invalid(
            "unknown_placeholder",
            field,
            f"unknown placeholder {{{{{name}}}}}{hint}; known: "
            + ", ".join("{{" + p + "}}" for p in known),
        )


def _validate_judge(metric: dict[str, Any], field: str, lookup: RefLookup) -> None:
    check_keys(
        metric,
        field,
        required=("version", "label", "kind", "aggregate", "source", "system", "user_template"),
        optional=("scale", "subject", "max_generation_attempts"),
        code=_CODE,
    )
    if "scale" not in metric:
        raise invalid("invalid_scale", f"{field}.scale", 'is required: {"min": a, "max": b}')
    stored = check_ref(metric["source"], f"{field}.source", RESPONSE_SOURCE, lookup)
    check_interface(stored, f"{field}.source", LLM_INTERFACE)
    scale = require_object(metric["scale"], f"{field}.scale", "invalid_scale")
    check_keys(scale, f"{field}.scale", required=("min", "max"), code="invalid_scale")
    low = _number(scale["min"], f"{field}.scale.min")
    high = _number(scale["max"], f"{field}.scale.max")
    if not low < high:
        raise invalid(
            "invalid_scale", f"{field}.scale", f"min must be less than max, got {low} and {high}"
        )
    has_subject = "subject" in metric
    if has_subject:
        subject = metric["subject"]
        if not isinstance(subject, str) or not _ENTITY_ID_RE.fullmatch(subject):
            raise invalid(
                "invalid_subject", f"{field}.subject", f"must be an entity id, got {subject!r}"
            )
    for key in ("system", "user_template"):
        text = require_string(metric[key], f"{field}.{key}", _CODE)
        _check_prompt(text, f"{field}.{key}", has_subject=has_subject)
    attempts = metric.setdefault("max_generation_attempts", DEFAULT_JUDGE_GENERATION_ATTEMPTS)
    low_attempts, high_attempts = JUDGE_GENERATION_ATTEMPTS
    if not is_int(attempts) or not low_attempts <= attempts <= high_attempts:
        raise invalid(
            "invalid_max_generation_attempts",
            f"{field}.max_generation_attempts",
            f"must be an integer {low_attempts}…{high_attempts}, got {attempts!r}",
        )


def validate_metric_content(
    content: object, lookup: RefLookup, field: str = "content"
) -> dict[str, Any]:
    """The metric as stored: checked whole, with ``source`` already resolved to ``{"hash"}``
    (``lookup`` holds what the store knows of it) and a judge's defaults filled in, so the
    same metric always has the same hash."""
    metric = dict(require_object(content, field, _CODE))
    if metric.get("version") != 1:
        raise invalid(_CODE, f"{field}.version", f"must be 1, got {metric.get('version')!r}")
    require_label(metric.get("label"), f"{field}.label")
    kind = metric.get("kind")
    if kind not in METRIC_KINDS:
        raise invalid(
            "invalid_metric_kind",
            f"{field}.kind",
            f"must be one of {', '.join(METRIC_KINDS)}, got {kind!r}",
        )
    aggregate = metric.get("aggregate")
    if aggregate not in AGGREGATES:
        raise invalid(
            "invalid_aggregate",
            f"{field}.aggregate",
            f"must be one of {', '.join(AGGREGATES)}, got {aggregate!r}",
        )
    if kind == EXPRESSION:
        check_keys(
            metric,
            field,
            required=("version", "label", "kind", "aggregate", "expression"),
            code=_CODE,
        )
        text = require_string(metric["expression"], f"{field}.expression", "invalid_expression")
        if len(text) > EXPRESSION_MAX_CHARS:
            raise invalid(
                "invalid_expression",
                f"{field}.expression",
                f"is longer than {EXPRESSION_MAX_CHARS} characters",
            )
        compile_expression(text, f"{field}.expression")
    else:
        _validate_judge(metric, field, lookup)
    return metric


def judge_scale(metric: Mapping[str, Any]) -> tuple[float, float] | None:
    """A judge's (min, max); None for an expression."""
    if metric.get("kind") != LLM_JUDGE:
        return None
    return float(metric["scale"]["min"]), float(metric["scale"]["max"])


def integer_scale(metric: Mapping[str, Any]) -> bool:
    """A judge whose scale's ends are integers scores on an integer scale."""
    scale = metric.get("scale") if metric.get("kind") == LLM_JUDGE else None
    return isinstance(scale, dict) and is_int(scale["min"]) and is_int(scale["max"])
