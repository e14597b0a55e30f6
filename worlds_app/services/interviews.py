"""Interviews (docs/populations.md, "Interviewing without disturbing"): agents asked questions
about a committed turn, each in its own view of that turn (as a judge with a ``subject`` sees
it), one conversation per agent holding every question. The request checks and queues the
interview; a worker runs it (``interview_runs``) on a throwaway branch of the turn. Nothing of
the world is written — no turn, event, memory or state — and every answer is a traced generation
of kind ``interview`` outside any attempt, counted against the world's budget. The hash of the
world's latest committed state is read before and after and stored with the answers, so a reader
sees that nothing moved.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from django.db import transaction

from chukwa_core.errors import invalid
from chukwa_core.ids import is_hash
from chukwa_core.rendering import environment_rendered, subject_rendered
from chukwa_core.world_state import WorldState, memory_of
from cognition_app.budgets import BudgetLedger
from cognition_app.models import InvocationKind
from cognition_app.sources import CallContext, SourceFailure, invoke_llm
from scenarios_app.models import ResponseSource
from worlds_app.models import Interview, Turn, World
from worlds_app.selectors import world_budget_limits, world_row
from worlds_app.services.dispatch import interview_send_on_commit
from worlds_app.services.experiment_budget import budget_ledger
from worlds_app.turn_view import turn_states

MAX_QUESTIONS = 20
MAX_QUESTION = 2000
PREAMBLE = (
    "You are being interviewed about the simulated world you live in. Answer in the first "
    "person, in character, briefly and honestly, from what you know and remember. This "
    "interview happens outside the world: nothing you say here changes it."
)
SYSTEM = (
    "{preamble}\n\n"
    "Who you are now:\n{subject}\n\nWhere you are:\n{environment}\n\nWhat you remember:\n{memory}"
)


def subject_system(view: WorldState, subject: str, preamble: str = PREAMBLE) -> str:
    """The system message of an agent asked about a turn in its own view (who it is, where it
    is, what it remembers): an interview's, and a survey metric's (``surveys``)."""
    return SYSTEM.format(
        preamble=preamble,
        subject=subject_rendered(view, subject),
        environment=environment_rendered(view, subject),
        memory=memory_of(view.entities[subject]) or "(nothing yet)",
    )


def subject_context(
    world: World, turn: int, subject: str, ledger: BudgetLedger | None, *, node_id: str
) -> CallContext:
    """The traced context of one agent's conversation about turn ``turn``, outside any attempt
    and counted against the world's budget."""
    counter = itertools.count(1)
    return CallContext(
        attempt_id=None,
        world_id=world.pk,
        world_slug=world.slug,
        attempted_turn=turn,
        next_seq=lambda: next(counter),
        node_id=node_id,
        subject_id=subject,
        world_seed=world.seed,
        replay=None,
        budget=ledger,
    )


def latest_hash(world: World) -> tuple[int, str]:
    world.refresh_from_db(fields=["current_turn"])
    found = (
        Turn.objects.filter(world=world, number=world.current_turn)
        .values_list("state_hash", flat=True)
        .first()
    )
    return world.current_turn, found or ""


def _checked(world: World, data: Any) -> tuple[int, list[str], list[str], str, dict[str, Any]]:
    if not isinstance(data, dict):
        raise invalid("invalid_interview", "body", "must be an object")
    turn = data.get("turn")
    if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn <= world.current_turn:
        raise invalid(
            "invalid_turn",
            "turn",
            f"must be a committed turn of {world.slug}: 0…{world.current_turn}",
        )
    states = turn_states(world=world, numbers=[turn])
    if turn not in states:
        raise invalid("invalid_turn", "turn", f"turn {turn} of {world.slug} is not readable")
    state = states[turn]
    agents = [e["id"] for e in state["entities"] if isinstance(e.get("kind"), dict)]
    subjects = data.get("subjects")
    if subjects == "all":
        chosen = agents
    elif isinstance(subjects, list) and subjects and all(isinstance(s, str) for s in subjects):
        for i, subject in enumerate(subjects):
            if subject not in agents:
                raise invalid(
                    "unknown_subject",
                    f"subjects[{i}]",
                    f"{subject!r} is not an agent of {world.slug} at turn {turn} "
                    f"(agents: {', '.join(agents[:20])}{'…' if len(agents) > 20 else ''})",
                )
        if len(set(subjects)) != len(subjects):
            raise invalid("invalid_subjects", "subjects", "names an agent twice")
        chosen = list(subjects)
    else:
        raise invalid("invalid_subjects", "subjects", 'must be "all" or a non-empty list of ids')
    questions = data.get("questions")
    if not isinstance(questions, list) or not 1 <= len(questions) <= MAX_QUESTIONS:
        raise invalid("invalid_questions", "questions", f"must list 1 to {MAX_QUESTIONS} questions")
    for i, question in enumerate(questions):
        if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUESTION:
            raise invalid(
                "invalid_questions",
                f"questions[{i}]",
                f"must be non-empty text of at most {MAX_QUESTION} characters",
            )
    source = data.get("source")
    if not isinstance(source, dict) or set(source) != {"hash"} or not is_hash(source["hash"]):
        raise invalid("invalid_source", "source", 'must be {"hash": H} of a stored LLM source')
    interface = (
        ResponseSource.objects.filter(pk=source["hash"]).values_list("interface", flat=True).first()
    )
    if interface != "llm_chat_completions":
        raise invalid(
            "invalid_source",
            "source.hash",
            "no stored llm_chat_completions source has this hash",
        )
    unknown = sorted(set(data) - {"turn", "subjects", "questions", "source"})
    if unknown:
        raise invalid("unknown_field", unknown[0], "unknown field")
    return turn, chosen, list(questions), source["hash"], state


def interview_create(*, slug: str, data: Any, created_by: str = "") -> Interview:
    """Check the request (400 naming the field, nothing written) and store the interview
    ``queued``; after commit a worker is asked to run it (``interview_runs``). A message the
    broker cannot take is logged and the row stays queued: the periodic re-drive sends it
    (the database is the queue of record), so an accepted interview is always carried out."""
    world = world_row(slug)
    turn, subjects, questions, source_hash, _state = _checked(world, data)
    with transaction.atomic():
        made = Interview.objects.create(
            world=world,
            turn_number=turn,
            subjects=subjects,
            questions=questions,
            source_hash=source_hash,
            answers=[],
            status="queued",
            created_by=created_by,
        )
        interview_send_on_commit(made.pk)
    return made


def interview_answers(
    world: World,
    turn: int,
    subjects: list[str],
    questions: list[str],
    source_hash: str,
    state: dict[str, Any],
    *,
    on_answer: Callable[[list[dict[str, Any]]], None],
) -> tuple[list[dict[str, Any]], tuple[str, str] | None]:
    """Ask every chosen agent every question in its own view of ``state`` (the throwaway
    branch's first state), one traced conversation per agent; ``on_answer`` sees the answers so
    far after each one. A source failure stops the asking: (its class, its message)."""
    view = WorldState.from_snapshot(dict(state))
    ledger = budget_ledger(world_budget_limits(world_id=world.pk), world.experiment_id)
    answers: list[dict[str, Any]] = []
    for subject in subjects:
        ctx = subject_context(world, turn, subject, ledger, node_id="interview")
        messages = [{"role": "system", "content": subject_system(view, subject)}]
        for question in questions:
            messages.append({"role": "user", "content": question})
            try:
                gen = invoke_llm(
                    source_hash=source_hash,
                    messages=list(messages),
                    ctx=ctx,
                    response_schema=None,
                    kind=InvocationKind.INTERVIEW,
                )
            except SourceFailure as exc:
                return answers, (exc.failure_class, exc.message[:2000])
            messages.append({"role": "assistant", "content": gen.text})
            answers.append(
                {
                    "subject": subject,
                    "question": question,
                    "answer": gen.text,
                    "llm_call": str(gen.call.pk),
                }
            )
            on_answer(answers)
    return answers, None
