"""Measuring turns with a survey metric (docs/measurement.md, "Surveys"): the metric's question
asked of every agent of the turn (or those it names), each in its own view of the turn — the
system message and traced context of an interview (``interviews``) — the reply checked against
the answer schema (``chukwa_core.metric_survey``). One outcome per agent, each with its
``subject``; a reply outside the schema is the error ``survey_answer`` with the reason, a source
failure its class. The calls are traced as kind ``interview`` with node ``metric:<label>``,
count against the world's budget, and write nothing of the world."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from chukwa_core.metric_survey import answer_instruction, answer_value
from chukwa_core.metric_values import Outcome, Trial
from chukwa_core.world_state import WorldState
from cognition_app.budgets import BudgetLedger
from cognition_app.models import InvocationKind
from cognition_app.sources import SourceFailure, invoke_llm
from worlds_app.models import World
from worlds_app.selectors import world_budget_limits
from worlds_app.services.experiment_budget import budget_ledger
from worlds_app.services.interviews import subject_context, subject_system
from worlds_app.turn_view import TurnView, turn_states

MAX_ERROR_MESSAGE = 2000
PREAMBLE = (
    "You are answering a survey about the simulated world you live in, in character, from what "
    "you know and remember. The survey happens outside the world: nothing you say changes it."
)


def _subjects(content: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    if "subjects" in content:
        return list(content["subjects"])
    return [e["id"] for e in state["entities"] if isinstance(e.get("kind"), dict)]


def survey_messages(
    content: Mapping[str, Any], state: Mapping[str, Any], subject: str
) -> list[dict[str, str]]:
    """What one agent is sent about one turn: its own view, the question, how to reply."""
    view = WorldState.from_snapshot(dict(state))
    return [
        {"role": "system", "content": subject_system(view, subject, PREAMBLE)},
        {
            "role": "user",
            "content": f"{content['question']}\n\n{answer_instruction(content['answer'])}",
        },
    ]


def _ask(
    *,
    world: World,
    content: Mapping[str, Any],
    number: int,
    subject: str,
    messages: list[dict[str, str]],
    node_id: str,
    ledger: BudgetLedger | None,
) -> Outcome:
    ctx = subject_context(world, number, subject, ledger, node_id=node_id)
    try:
        gen = invoke_llm(
            source_hash=content["source"]["hash"],
            messages=messages,
            ctx=ctx,
            response_schema=None,
            kind=InvocationKind.INTERVIEW,
        )
    except SourceFailure as exc:
        return Outcome(
            error_code=exc.failure_class,
            error_message=exc.message[:MAX_ERROR_MESSAGE],
            subject=subject,
        )
    outcome = answer_value(content["answer"], gen.text)
    return Outcome(
        value=outcome.value,
        error_code=outcome.error_code,
        error_message=outcome.error_message,
        llm_call_id=gen.call.pk,
        subject=subject,
    )


def surveyed(
    *, world: World, metric: Mapping[str, Any], views: Mapping[int, TurnView], turns: list[int]
) -> Iterator[dict[int, Outcome | tuple[Outcome, ...]]]:
    """Ask each of ``turns``' agents the metric's question, yielding each turn's outcomes (one
    per agent) as soon as they are all asked: a measuring cut short keeps whole turns. The
    ``survey`` kind's evaluator (``metric_evaluators``)."""
    content = metric["content"]
    states = turn_states(world=world, numbers=turns)
    ledger = budget_ledger(world_budget_limits(world_id=world.pk), world.experiment_id)
    for number in turns:
        state = states[number]
        yield {
            number: tuple(
                _ask(
                    world=world,
                    content=content,
                    number=number,
                    subject=subject,
                    messages=survey_messages(content, state, subject),
                    node_id=f"metric:{metric['label']}"[:64],
                    ledger=ledger,
                )
                for subject in _subjects(content, state)
            )
        }


def survey_try(*, world: World, metric: Mapping[str, Any], view: TurnView, ask: bool) -> Trial:
    """What the survey sends its first agent about one committed turn, and with ``ask`` that
    agent's answer (traced with node ``try:<label>``, counted against the world's budget,
    linked to no measurement). The ``survey`` kind's trial."""
    content = metric["content"]
    number = view["turn"]
    state = turn_states(world=world, numbers=[number])[number]
    subjects = _subjects(content, state)
    if not subjects:
        return Trial(outcome=Outcome(error_code="survey_answer", error_message="no agent to ask"))
    messages = survey_messages(content, state, subjects[0])
    if not ask:
        return Trial(outcome=None, messages=messages)
    outcome = _ask(
        world=world,
        content=content,
        number=number,
        subject=subjects[0],
        messages=messages,
        node_id=f"try:{metric['label']}"[:64],
        ledger=budget_ledger(world_budget_limits(world_id=world.pk), world.experiment_id),
    )
    return Trial(outcome=outcome, messages=messages)
