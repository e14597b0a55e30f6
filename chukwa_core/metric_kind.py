"""What a metric kind is (docs/measurement.md, "Metric kinds"): the parts of the product that
differ from one kind to another, as one typed value a kind module builds and the registry
(:mod:`chukwa_core.metric_kinds`) holds. Everything else that handles metrics — the store's put,
the measure loop, the experiment estimate, agreement with annotations — asks the kind, never
branches on its name. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chukwa_core.metric_values import Outcome
from chukwa_core.statistics.types import MetricScale
from chukwa_core.workflow_refs import RefLookup

# A kind's name, as stored beside each metric (a column of 16 characters).
METRIC_KIND_PATTERN = r"^[a-z][a-z0-9_]{0,15}$"
# Checks a metric's kind-specific keys (the common ones, version, label, kind and aggregate,
# are checked before) and may fill in its defaults: (metric, field, what the store knows of
# the refs it names). Raises ChukwaError naming the field.
Validate = Callable[[dict[str, Any], str, RefLookup], None]
# The value of one turn view, for a kind whose value is a function of the turn view alone.
ViewMeasure = Callable[[Mapping[str, Any]], Outcome]


@dataclass(frozen=True)
class MetricCalls:
    """The LLM calls a metric may make to measure one turn: what the estimate prices."""

    source_hash: str
    calls: int  # at most, before the source's own transport retries
    prompt_chars: int  # the metric's own prompts; the turn view it renders is the world's


def _no_calls(content: Mapping[str, Any], agents: int) -> MetricCalls | None:
    return None


def _no_scale(content: Mapping[str, Any]) -> tuple[float, float] | None:
    return None


def _no_subjects(content: Mapping[str, Any]) -> tuple[str, ...]:
    return ()


def _continuous(content: Mapping[str, Any]) -> MetricScale:
    return MetricScale.continuous()


@dataclass(frozen=True)
class MetricKind:
    """One kind of metric. A kind whose value is a function of the turn view alone (an
    expression) gives ``view_measure`` and is complete here; a kind that needs the database or
    a model (a judge) gives none and binds its evaluator in the worlds app
    (``worlds_app/services/metric_evaluators.py``), which checks every kind has exactly one."""

    validate: Validate
    summary: str  # one line for pages and help: what one measured turn costs or reads
    # Content → the function of one turn view (compiled once per measuring).
    view_measure: Callable[[Mapping[str, Any]], ViewMeasure] | None = None
    # (content, the world's agents) → the LLM calls of one measured turn; None: no call.
    llm_calls: Callable[[Mapping[str, Any], int], MetricCalls | None] = _no_calls
    # The content key naming the LLM source the kind calls (resolved inline at put, stored as
    # the metric's ``source`` edge); None for a kind that calls no model.
    source_key: str | None = None
    # The range of a turn's value when the kind fixes one (a judge's scale).
    scale: Callable[[Mapping[str, Any]], tuple[float, float] | None] = _no_scale
    # The agents the metric asks about, each of which must be an agent of the measured world.
    subjects: Callable[[Mapping[str, Any]], tuple[str, ...]] = _no_subjects
    # The type and range of one turn's value (chukwa_core/metric_types.py): declared by the
    # content or inferred from it; a value outside it is recorded as an error, not a value.
    turn_scale: Callable[[Mapping[str, Any]], MetricScale] = _continuous
