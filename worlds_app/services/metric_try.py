"""Trying a metric before storing it (docs/measurement.md, "Trying a metric"): what it would
record on one committed turn of a world, and the turn view it read, with nothing written — not
the metric, not a measurement. A kind that calls a model (a judge) answers the messages it
would send, and calls the model only when asked: that call is traced as a try and counted
against the world's budget, like a measurement's.
"""

from __future__ import annotations

from typing import Any, TypedDict
from uuid import UUID

from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.metric_kinds import metric_kind
from scenarios_app.selectors import source_interfaces
from scenarios_app.services import metric_draft
from worlds_app.models import World
from worlds_app.selectors import require_slug, require_turn_number
from worlds_app.services.measurements import MetricSummary, subject_problem
from worlds_app.services.metric_evaluators import trial
from worlds_app.turn_view import TurnView, turn_views


class TryError(TypedDict):
    code: str
    message: str


class MetricTryResult(TypedDict):
    world: str
    turn: int
    metric: MetricSummary  # the hash it would be stored under
    value: float | None
    error: TryError | None
    asked: bool  # whether the metric's model was called (a kind that calls none: false)
    messages: list[dict[str, str]] | None  # what a judge is sent; null for a kind with no model
    rationale: str | None  # a judge's, when it scored
    llm_call_id: UUID | None  # a judge's call, when it was asked
    view: TurnView


def _check_source_stored(content: dict[str, Any]) -> None:
    """A model is asked through a stored source: an inline one is only stored by a put."""
    key = metric_kind(content["kind"]).source_key
    if key is None:
        return
    source_hash = content[key]["hash"]
    if source_hash not in source_interfaces(source_hashes={source_hash}):
        raise invalid(
            "unresolved_reference",
            f"content.{key}",
            "asking the model needs a stored source: put the source first (or choose one by "
            "label), then try again",
        )


def metric_try(*, content: Any, world: str, turn: int, ask: bool = False) -> MetricTryResult:
    """What ``content`` would record on turn ``turn`` of ``world``; 400 naming the field when
    the metric would not be stored (the put's own validation), 404 when the world has no such
    committed turn."""
    metric_hash, stored = metric_draft(content)
    require_slug(world, "world")
    require_turn_number(turn, "turn")
    row = World.objects.select_related("branch_parent").filter(slug=world).first()
    if row is None:
        raise NotFoundError("world_not_found", f"world: no world {world!r}", {"field": "world"})
    views = turn_views(world=row, numbers=[turn])
    if turn not in views:
        raise NotFoundError(
            "turn_not_found",
            f"turn: world {world!r} has no committed turn {turn} (current: {row.current_turn})",
            {"field": "turn"},
        )
    view = views[turn]
    if ask:
        _check_source_stored(stored)
    metric = {
        "hash": metric_hash,
        "label": stored["label"],
        "kind": stored["kind"],
        "content": stored,
    }
    problem = subject_problem(metric, views)
    tried = (
        None
        if problem is not None
        else trial(stored["kind"])(world=row, metric=metric, view=view, ask=ask)
    )
    outcome = problem if tried is None else tried.outcome
    failed = outcome is not None and bool(outcome.error_code)
    return {
        "world": row.slug,
        "turn": turn,
        "metric": {"hash": metric_hash, "label": stored["label"], "kind": stored["kind"]},
        "value": outcome.value if outcome is not None and not failed else None,
        "error": (
            {"code": outcome.error_code, "message": outcome.error_message}
            if outcome is not None and failed
            else None
        ),
        "asked": ask and tried is not None and tried.messages is not None,
        "messages": tried.messages if tried is not None else None,
        "rationale": tried.rationale if tried is not None else None,
        "llm_call_id": outcome.llm_call_id if outcome is not None else None,
        "view": view,
    }
