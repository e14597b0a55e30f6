"""The ``survey`` metric kind (docs/measurement.md, "Surveys"): one question asked of every agent
(or those named in ``subjects``) at every measured turn, each agent in its own view of the turn
(as an interview asks it), the agent replying ``{"answer": …}`` checked against the metric's
answer schema. One measurement row per agent and turn. Its rules and what it costs live here
(pure: no Django); the asking is ``worlds_app/services/surveys.py``."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from chukwa_core.component_validation import check_keys, is_int, require_string, type_name
from chukwa_core.errors import invalid
from chukwa_core.ids import ENTITY_ID_PATTERN
from chukwa_core.metric_kind import MetricCalls, MetricKind
from chukwa_core.metric_types import scale_of_bounds
from chukwa_core.metric_values import Outcome
from chukwa_core.source_validation import LLM_INTERFACE
from chukwa_core.statistics.types import MetricScale
from chukwa_core.workflow_refs import RESPONSE_SOURCE, RefLookup, check_interface, check_ref

SURVEY_KIND_NAME = "survey"
MAX_QUESTION = 2000
LIKERT_POINTS = (2, 11)
MAX_CHOICES = 20
MAX_SUBJECTS = 1000
# What a survey records instead of a value when an agent's reply breaks the answer schema.
SURVEY_ANSWER = "survey_answer"
# ``last`` would keep one agent's answer of the last turn: a survey's world value pools them all.
SURVEY_AGGREGATES = ("mean", "sum", "min", "max", "any", "all")
_CODE = "invalid_metric"
_ENTITY_ID = re.compile(ENTITY_ID_PATTERN)


def _finite(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("invalid_answer", field, f"must be a finite number, got {type_name(value)}")
    return float(value)


def _check_answer(answer: object, field: str) -> None:
    if not isinstance(answer, dict) or len(answer) != 1:
        raise invalid(
            "invalid_answer",
            field,
            'must be one of {"likert": k}, {"choice": [options]}, {"number": {"min", "max"}}',
        )
    ((form, spec),) = answer.items()
    if form == "likert":
        low, high = LIKERT_POINTS
        if not is_int(spec) or not low <= spec <= high:
            raise invalid(
                "invalid_answer",
                f"{field}.likert",
                f"must be an integer {low}…{high}, got {spec!r}",
            )
    elif form == "choice":
        if not isinstance(spec, list) or not 2 <= len(spec) <= MAX_CHOICES:
            raise invalid(
                "invalid_answer", f"{field}.choice", f"must list 2 to {MAX_CHOICES} options"
            )
        for i, option in enumerate(spec):
            require_string(option, f"{field}.choice[{i}]", "invalid_answer")
        if len(set(spec)) != len(spec):
            raise invalid("invalid_answer", f"{field}.choice", "names an option twice")
    elif form == "number":
        if not isinstance(spec, dict):
            raise invalid("invalid_answer", f"{field}.number", "must be an object: {} or min/max")
        check_keys(spec, f"{field}.number", required=(), optional=("min", "max"), code=_CODE)
        bounds = {k: _finite(v, f"{field}.number.{k}") for k, v in spec.items()}
        if "min" in bounds and "max" in bounds and not bounds["min"] < bounds["max"]:
            raise invalid("invalid_answer", f"{field}.number", "min must be less than max")
    else:
        raise invalid(
            "invalid_answer", f"{field}.{form}", "unknown answer form: likert, choice or number"
        )


def _validate(metric: dict[str, Any], field: str, lookup: RefLookup) -> None:
    check_keys(
        metric,
        field,
        required=("version", "label", "kind", "aggregate", "source", "question", "answer"),
        optional=("subjects",),
        code=_CODE,
    )
    if metric["aggregate"] not in SURVEY_AGGREGATES:
        raise invalid(
            "invalid_aggregate",
            f"{field}.aggregate",
            f"a survey pools every agent's answers: one of {', '.join(SURVEY_AGGREGATES)}",
        )
    stored = check_ref(metric["source"], f"{field}.source", RESPONSE_SOURCE, lookup)
    check_interface(stored, f"{field}.source", LLM_INTERFACE)
    question = require_string(metric["question"], f"{field}.question", _CODE)
    if len(question) > MAX_QUESTION:
        raise invalid(_CODE, f"{field}.question", f"must be at most {MAX_QUESTION} characters")
    _check_answer(metric["answer"], f"{field}.answer")
    if "subjects" in metric:
        subjects = metric["subjects"]
        if not isinstance(subjects, list) or not 1 <= len(subjects) <= MAX_SUBJECTS:
            raise invalid(
                "invalid_subjects", f"{field}.subjects", f"must list 1 to {MAX_SUBJECTS} agent ids"
            )
        for i, subject in enumerate(subjects):
            if not isinstance(subject, str) or not _ENTITY_ID.fullmatch(subject):
                raise invalid(
                    "invalid_subject",
                    f"{field}.subjects[{i}]",
                    f"must be an entity id, got {subject!r}",
                )
        if len(set(subjects)) != len(subjects):
            raise invalid("invalid_subjects", f"{field}.subjects", "names an agent twice")


def answer_instruction(answer: Mapping[str, Any]) -> str:
    """How the agent is told to reply, from the answer schema."""
    ((form, spec),) = answer.items()
    if form == "likert":
        what = f"an integer from 1 to {spec}"
    elif form == "choice":
        what = "exactly one of " + ", ".join(json.dumps(o, ensure_ascii=False) for o in spec)
    else:
        ends = [
            f"at least {spec['min']}" if "min" in spec else "",
            f"at most {spec['max']}" if "max" in spec else "",
        ]
        what = "a number" + (" " + " and ".join(e for e in ends if e) if any(ends) else "")
    return f'Reply with JSON only: {{"answer": A}} where A is {what}.'


def answer_value(answer: Mapping[str, Any], text: str) -> Outcome:
    """The value of one agent's reply: the likert point, the chosen option's index (0 for the
    first), or the number; a reply outside the schema is the error ``survey_answer``."""

    def wrong(why: str) -> Outcome:
        shown = text if len(text) <= 200 else text[:197] + "..."
        return Outcome(error_code=SURVEY_ANSWER, error_message=f"{why}; the reply: {shown!r}")

    try:
        parsed = json.loads(text)
    except ValueError:
        return wrong('not JSON {"answer": …}')
    if not isinstance(parsed, dict) or set(parsed) != {"answer"}:
        return wrong('not an object {"answer": …}')
    given = parsed["answer"]
    ((form, spec),) = answer.items()
    if form == "choice":
        if given not in spec:
            return wrong(f"answer {given!r} is none of the options")
        return Outcome(value=float(spec.index(given)))
    if isinstance(given, bool) or not isinstance(given, int | float) or not math.isfinite(given):
        return wrong(f"answer {given!r} is not a number")
    if form == "likert":
        if not float(given).is_integer() or not 1 <= given <= spec:
            return wrong(f"answer {given!r} is outside the likert scale 1…{spec}")
        return Outcome(value=float(given))
    if ("min" in spec and given < spec["min"]) or ("max" in spec and given > spec["max"]):
        return wrong(f"answer {given!r} is outside {spec.get('min', '-∞')}…{spec.get('max', '∞')}")
    return Outcome(value=float(given))


def _llm_calls(content: Mapping[str, Any], agents: int) -> MetricCalls:
    """One call per asked agent and measured turn."""
    asked = len(content["subjects"]) if "subjects" in content else agents
    return MetricCalls(
        source_hash=content["source"]["hash"],
        calls=asked,
        prompt_chars=len(content["question"]) * max(asked, 1),
    )


def _scale(content: Mapping[str, Any]) -> tuple[float, float] | None:
    ((form, spec),) = content["answer"].items()
    if form == "likert":
        return 1, spec
    if form == "choice":
        return 0, len(spec) - 1
    if "min" in spec and "max" in spec:
        return spec["min"], spec["max"]
    return None


def _turn_scale(content: Mapping[str, Any]) -> MetricScale:
    """Ordinal for a likert scale (1…k) and a choice (the option's index), continuous for a
    number (inside its range, when given)."""
    ((form, spec),) = content["answer"].items()
    if form in ("likert", "choice"):
        low, high = _scale(content)  # type: ignore[misc]
        return scale_of_bounds(low, high)
    low_n = float(spec["min"]) if "min" in spec else None
    high_n = float(spec["max"]) if "max" in spec else None
    return MetricScale.continuous(low_n, high_n)


def _subjects(content: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(content.get("subjects", ()))


SURVEY_KIND = MetricKind(
    validate=_validate,
    summary="one traced call per agent and turn, each agent in its own view; a row per agent",
    llm_calls=_llm_calls,
    source_key="source",
    scale=_scale,
    subjects=_subjects,
    turn_scale=_turn_scale,
)
