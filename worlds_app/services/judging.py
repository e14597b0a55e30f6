"""Measuring turns with a metric's LLM judge (docs/measurement.md, "LLM judges").

Each turn is one judging (``cognition_app.judges``): the turn view rendered into the metric's
prompts — and, with ``subject``, that agent's own view of the turn (an interview in its
context) — a score on the metric's scale with its rationale, and the corrective retry of an LLM
node. The judge's generations are source invocations of kind ``judge`` outside any attempt,
recorded at once through the direct recorder (``cognition_app.recording.DIRECT``); they carry the
world and the turn, count against the world's budget, and a world that replays another is
measured from the other world's judge calls (strictly: without a network call).

Nobody waits for a measurement's judge (a request's or an experiment's): when its source declares
``interface.batch`` the judge call goes through the provider's Batch API, owned by the experiment
(``experiment:<id>``) or the world (``world:<id>``). A judging whose answer is not in yet leaves
its turn unmeasured, not failed, noted as a :class:`~worlds_app.models.PendingJudging`; the world
is measured again once the batch ends (``measure_redrive.batch_answers_redrive``). A try
(:func:`judge_try`), which a person waits for, is always asked live.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

from chukwa_core.metric_values import Outcome, Trial
from chukwa_core.prompt_templates import PLACEHOLDER_RE
from chukwa_core.rendering import environment_rendered, subject_rendered
from chukwa_core.world_state import WorldState, memory_of
from cognition_app.batch_queue import experiment_owner, world_owner
from cognition_app.batches import BatchPending
from cognition_app.budgets import BudgetLedger
from cognition_app.judges import JudgeFailed, judge_turn
from cognition_app.models import InvocationKind, InvocationStatus, SourceInvocation
from cognition_app.sources import REPLAY_STRICT, CallContext, Replay
from cognition_app.sources.context import JUDGE
from worlds_app.models import PendingJudging, World
from worlds_app.selectors import world_budget_limits
from worlds_app.services.experiment_budget import budget_ledger
from worlds_app.turn_view import TurnView, turn_states

# A judge's stored error message is cut to this (a source failure may quote a long body).
MAX_ERROR_MESSAGE = 2000


def _rendered(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def prompt_values(
    view: TurnView, state: Mapping[str, Any] | None, subject: str | None
) -> dict[str, str]:
    """What a judge's placeholders stand for: the turn view, each of its keys, and with a
    subject, that agent's own view as an LLM node's prompt would show it."""
    values = {"turn": _rendered(view), **{f"turn.{k}": _rendered(v) for k, v in view.items()}}
    if subject is not None and state is not None:
        world = WorldState.from_snapshot(dict(state))
        values.update(
            {
                "subject.id": subject,
                "subject.rendered": subject_rendered(world, subject),
                "subject.memory": memory_of(world.entities[subject]) or "(nothing yet)",
                "environment.rendered": environment_rendered(world, subject),
            }
        )
    return values


def _render(template: str, values: Mapping[str, str]) -> str:
    # validated at put: every placeholder is one of the values'
    return PLACEHOLDER_RE.sub(lambda match: values[match.group(1)], template)


# A try's judge calls (``judge_try``) carry this before the metric's label as their node id:
# they are traced and paid for like a measurement's, but no measurement links to them, and
# replay neither serves a try nor is served by one.
TRY_NODE_PREFIX = "try:"


def _judge_replay(world: World) -> Replay | None:
    """A world that replays another is measured from that world's judge calls (their request
    keys: the same prompts about the same turns are asked again)."""
    if world.replay_from is None or world.replay_source_id is None:
        return None
    judges = SourceInvocation.objects.filter(
        kind=InvocationKind.JUDGE, status=InvocationStatus.SUCCEEDED
    ).exclude(node_id__startswith=TRY_NODE_PREFIX)
    return Replay(
        source_world_slug=world.replay_from["world"],
        strict=world.replay_from["mode"] == REPLAY_STRICT,
        recorded=judges.filter(world_id=world.replay_source_id),
        used=judges.filter(world_id=world.pk),
    )


def judge_messages(
    content: Mapping[str, Any], view: TurnView, state: Mapping[str, Any] | None
) -> tuple[str, str]:
    """The system and user messages a judge is sent about one turn view (with ``subject``,
    ``state`` is the turn's world state, from which that agent's own view is rendered)."""
    values = prompt_values(view, state, content.get("subject"))
    return _render(content["system"], values), _render(content["user_template"], values)


def _judge_one(
    *,
    world: World,
    content: Mapping[str, Any],
    number: int,
    messages: tuple[str, str],
    node_id: str,
    ledger: BudgetLedger | None,
    replay: Replay | None,
    batch_owner: str = "",
) -> tuple[Outcome, str | None]:
    """One judging of one turn: its outcome, and the judge's rationale when it scored. With
    ``batch_owner``, a judge whose source declares batch raises BatchPending until answered."""
    counter = itertools.count(1)
    ctx = CallContext(
        lane=JUDGE,
        who=(
            f"{'experiment world' if world.experiment_id else 'world'} {world.slug}'s judge "
            f"{node_id.removeprefix('metric:')}, turn {number}"
        ),
        attempt_id=None,
        world_id=world.pk,
        world_slug=world.slug,
        attempted_turn=number,
        next_seq=lambda: next(counter),
        node_id=node_id,
        subject_id=content.get("subject") or "",
        world_seed=world.seed,
        replay=replay,
        reuse=world.reuse == "exact",
        budget=ledger,
        batch_owner=batch_owner,
    )
    try:
        score = judge_turn(
            ctx=ctx,
            source_hash=content["source"]["hash"],
            system=messages[0],
            user=messages[1],
            low=float(content["scale"]["min"]),
            high=float(content["scale"]["max"]),
            max_generation_attempts=content["max_generation_attempts"],
        )
    except JudgeFailed as exc:
        failed = Outcome(
            error_code=exc.code,
            error_message=exc.message[:MAX_ERROR_MESSAGE],
            llm_call_id=exc.llm_call_id,
        )
        return failed, None
    return Outcome(value=score.score, llm_call_id=score.llm_call_id), score.rationale


def judged(
    *, world: World, metric: Mapping[str, Any], views: Mapping[int, TurnView], turns: list[int]
) -> Iterator[dict[int, Outcome]]:
    """Score each of ``turns`` with the metric's judge, yielding each turn's outcome as soon as
    it is judged (one turn a batch: a judging cut short keeps what it judged); a turn the judge
    could not score has its error (``judge_output``, or the source's failure class) and the last
    generation. The ``llm_judge`` kind's evaluator (``metric_evaluators``)."""
    content = metric["content"]
    states = turn_states(world=world, numbers=turns) if "subject" in content else {}
    ledger = budget_ledger(world_budget_limits(world_id=world.pk), world.experiment_id)
    replay = _judge_replay(world)
    owner = batch_owner_of(world)
    for number in turns:
        try:
            outcome, _ = _judge_one(
                world=world,
                content=content,
                number=number,
                messages=judge_messages(content, views[number], states.get(number)),
                node_id=f"metric:{metric['label']}",
                ledger=ledger,
                replay=replay,
                batch_owner=owner,
            )
        except BatchPending as exc:
            # unmeasured, not failed: measured again once its batch ends
            PendingJudging.objects.update_or_create(
                world=world,
                turn_number=number,
                metric_id=metric["hash"],
                defaults={"request_id": exc.request_id},
            )
            continue
        yield {number: outcome}


def batch_owner_of(world: World) -> str:
    """Who a world's measurement judge calls sent through a provider batch belong to (cancelling
    an experiment cancels its own)."""
    if world.experiment_id is not None:
        return experiment_owner(world.experiment_id)
    return world_owner(world.pk)


def judge_try(*, world: World, metric: Mapping[str, Any], view: TurnView, ask: bool) -> Trial:
    """What the metric's judge is sent about one committed turn, and with ``ask`` its score:
    one live judging traced as a try (node ``try:<label>``), counted against the world's budget,
    linked to no measurement. The ``llm_judge`` kind's trial (``metric_evaluators``)."""
    content = metric["content"]
    number = view["turn"]
    states = turn_states(world=world, numbers=[number]) if "subject" in content else {}
    system, user = judge_messages(content, view, states.get(number))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if not ask:
        return Trial(outcome=None, messages=messages)
    outcome, rationale = _judge_one(
        world=world,
        content=content,
        number=number,
        messages=(system, user),
        node_id=f"{TRY_NODE_PREFIX}{metric['label']}"[:64],  # the column's width
        ledger=budget_ledger(world_budget_limits(world_id=world.pk), world.experiment_id),
        replay=None,  # a try is asked live
    )
    return Trial(outcome=outcome, messages=messages, rationale=rationale)
