"""How each metric kind measures a world's turns (docs/measurement.md, "Metric kinds"). A kind
whose value is a function of the turn view alone (``MetricKind.view_measure``: an expression)
needs nothing here; a kind that needs the database or a model (a judge) binds its evaluator
below. ``evaluator`` answers the one function the measure loop calls for every kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from chukwa_core.metric_kinds import METRIC_KINDS
from chukwa_core.metric_values import Outcome
from worlds_app.models import World
from worlds_app.services.judging import judged
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
    ) -> Iterator[dict[int, Outcome]]: ...


# The kinds whose value needs more than the turn view, each with its evaluator.
EVALUATORS: dict[str, Evaluate] = {
    "llm_judge": judged,
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
