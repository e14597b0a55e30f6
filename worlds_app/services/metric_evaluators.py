"""How each metric kind measures a world's turns (docs/measurement.md, "Metric kinds"), and how
it is tried on one turn before it is stored ("Trying a metric"). A kind whose value is a function
of the turn view alone (``MetricKind.view_measure``: an expression) needs nothing here; a kind
that needs the database or a model (a judge) binds its evaluator and its trial below.
``evaluator`` and ``trial`` answer the one function the measure loop and a try call for every
kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from chukwa_core.metric_kinds import METRIC_KINDS
from chukwa_core.metric_values import Outcome, Trial
from worlds_app.models import World
from worlds_app.services.judging import judge_try, judged
from worlds_app.services.surveys import survey_try, surveyed
from worlds_app.turn_view import TurnView


class Evaluate(Protocol):
    """The outcomes of some turns of a world for one metric (a row of ``metric_rows``), in
    batches: each batch is written in one transaction as soon as it is yielded, so a measuring
    cut short (a worker killed) keeps what it measured and asks again only the rest."""

    def __call__(
        self,
        *,
        world: World,
        metric: Mapping[str, Any],
        views: Mapping[int, TurnView],
        turns: list[int],
    ) -> Iterator[Mapping[int, Outcome | tuple[Outcome, ...]]]: ...


class Try(Protocol):
    """What one metric (a row of ``metric_rows``' shape) would record on one committed turn,
    writing nothing; a kind that calls a model calls it only when ``ask``."""

    def __call__(
        self, *, world: World, metric: Mapping[str, Any], view: TurnView, ask: bool
    ) -> Trial: ...


# The kinds whose value needs more than the turn view, each with its evaluator and its trial.
EVALUATORS: dict[str, Evaluate] = {
    "llm_judge": judged,
    "survey": surveyed,
}
TRIALS: dict[str, Try] = {
    "llm_judge": judge_try,
    "survey": survey_try,
}


def _by_view(
    *, world: World, metric: Mapping[str, Any], views: Mapping[int, TurnView], turns: list[int]
) -> Iterator[dict[int, Outcome]]:
    view_measure = METRIC_KINDS[metric["kind"]].view_measure
    assert view_measure is not None  # evaluator() chose this function for that reason
    measure = view_measure(metric["content"])  # compiled once for all the turns
    yield {number: measure(views[number]) for number in turns}


def evaluator(kind: str) -> Evaluate:
    """The evaluator of a registered kind: its own, or the turn view's for a kind that
    measures the view alone. A kind with both or neither is a programming error."""
    bound = EVALUATORS.get(kind)
    by_view = METRIC_KINDS[kind].view_measure is not None
    if (bound is None) == (not by_view):
        raise RuntimeError(
            f"metric kind {kind!r} must have exactly one evaluator: a view_measure in its "
            "chukwa_core module or an entry in worlds_app/services/metric_evaluators.py"
        )
    return bound if bound is not None else _by_view


def _try_by_view(*, world: World, metric: Mapping[str, Any], view: TurnView, ask: bool) -> Trial:
    (outcomes,) = _by_view(
        world=world, metric=metric, views={view["turn"]: view}, turns=[view["turn"]]
    )
    return Trial(outcome=outcomes[view["turn"]])


def trial(kind: str) -> Try:
    """The trial of a registered kind: its own, or the turn view's (the same function its
    measuring calls) for a kind that measures the view alone."""
    evaluator(kind)  # a kind with both or neither evaluator is refused here too
    if (kind in TRIALS) != (kind in EVALUATORS):
        raise RuntimeError(f"metric kind {kind!r} has an evaluator and no trial, or the reverse")
    return TRIALS.get(kind, _try_by_view)
