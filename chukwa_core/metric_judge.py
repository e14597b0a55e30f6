"""The ``llm_judge`` metric kind (docs/measurement.md, "LLM judges"): an LLM source asked to
score the turn view on a scale — with ``subject``, in that agent's own view (an interview) —
with the corrective retry of an LLM node. Its rules and what it costs live here (pure: no
Django); the judging itself is ``worlds_app/services/judging.py``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from chukwa_core.component_validation import (
    check_keys,
    is_int,
    require_object,
    require_string,
    type_name,
)
from chukwa_core.errors import invalid
from chukwa_core.ids import ENTITY_ID_PATTERN
from chukwa_core.metric_kind import MetricCalls, MetricKind
from chukwa_core.metric_types import scale_of_bounds
from chukwa_core.source_validation import LLM_INTERFACE
from chukwa_core.statistics.types import MetricScale
from chukwa_core.workflow_refs import RESPONSE_SOURCE, RefLookup, check_interface, check_ref

# A judge's corrective retries, as on an LLM node but fewer: a judge scores one turn.
JUDGE_GENERATION_ATTEMPTS = (1, 5)
# Without max_generation_attempts a judge is asked once: no retry unless the author asks for it.
DEFAULT_JUDGE_GENERATION_ATTEMPTS = 1
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


def _validate(metric: dict[str, Any], field: str, lookup: RefLookup) -> None:
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


def _llm_calls(content: Mapping[str, Any], agents: int) -> MetricCalls:
    """One judging per measured turn, whatever the agents: up to its generation attempts."""
    return MetricCalls(
        source_hash=content["source"]["hash"],
        calls=content["max_generation_attempts"],
        prompt_chars=len(content["system"]) + len(content["user_template"]),
    )


def _scale(content: Mapping[str, Any]) -> tuple[float, float]:
    # as stored: an integer scale's ends stay integers (agreement's kappa reads them)
    return content["scale"]["min"], content["scale"]["max"]


def _turn_scale(content: Mapping[str, Any]) -> MetricScale:
    """Ordinal on an integer scale (1 to 5), continuous between other ends."""
    low, high = _scale(content)
    return scale_of_bounds(low, high)


def _subjects(content: Mapping[str, Any]) -> tuple[str, ...]:
    return (content["subject"],) if "subject" in content else ()


LLM_JUDGE_KIND = MetricKind(
    validate=_validate,
    summary="one traced judge call per turn, its rationale on the turn's page",
    llm_calls=_llm_calls,
    source_key="source",
    scale=_scale,
    subjects=_subjects,
    turn_scale=_turn_scale,
)
