"""The claim and the turn commit as few round trips: a claim is one statement that also
reads the world, the budget in force and turn N-1; a commit is one multi-statement query (one
transaction) whose checks — the lease, the world's turn — refuse the whole of it; a big commit
sends its rows by COPY in the same transaction."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cognition_app.budgets import BudgetLimits
from cognition_app.subject_run import AttemptFailure
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import unread_queue
from worlds_app.models import AttemptEvent, AttemptStatus, PatchTransition, Turn, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, world_budget_set, world_create
from worlds_app.services import turn_commit as commit_module
from worlds_app.services.attempt_recorder import AttemptRecorder
from worlds_app.services.claims import Claim, LeaseLost, claim_attempt
from worlds_app.services.execution import StagedTransition, turn_attempt_execute

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue() -> Iterator[str]:
    with unread_queue(f"turn-commit-{os.getpid()}") as name:
        yield name


def _world(slug: str) -> None:
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})


def _claimed(slug: str, count: int = 1) -> tuple[Claim, list[str]]:
    ids = turn_attempt_enqueue(slug=slug, count=count)["attempt_ids"]
    claim = claim_attempt(attempt_id=ids[0], owner="w1")
    assert claim is not None
    return claim, ids


def _executed(claim: Claim) -> tuple[Any, list[StagedTransition], AttemptRecorder, float]:
    assert claim.previous is not None
    started = time.monotonic()
    recorder = AttemptRecorder(claim.attempt)
    working, staged, _, _ = turn_attempt_execute(
        attempt=claim.attempt, previous=claim.previous, recorder=recorder, limits=claim.limits
    )
    return working, staged, recorder, started


def _kinds(attempt_id: Any) -> list[str]:
    return list(
        AttemptEvent.objects.filter(attempt_id=attempt_id)
        .order_by("seq")
        .values_list("kind", flat=True)
    )


def test_a_claim_is_one_statement_and_brings_the_world_the_budget_and_the_turn(
    queue: str,
) -> None:
    _world("claimed")
    world_budget_set(slug="claimed", budget={"max_tokens_per_turn": 5000})
    ids = turn_attempt_enqueue(slug="claimed")["attempt_ids"]
    with CaptureQueriesContext(connection) as queries:
        claim = claim_attempt(attempt_id=ids[0], owner="w1")
    assert len(queries.captured_queries) == 1
    assert claim is not None
    world = World.objects.get(slug="claimed")
    assert claim.attempt.status == AttemptStatus.RUNNING
    assert (claim.attempt.lease_owner, claim.attempt.attempted_turn) == ("w1", 1)
    assert claim.attempt.world.scenario_snapshot == world.scenario_snapshot
    assert claim.attempt.world.replay_from is None
    assert claim.limits == BudgetLimits(max_tokens_per_turn=5000)
    turn0 = Turn.objects.get(world=world, number=0)
    assert claim.previous is not None
    assert (claim.previous.number, claim.previous.state) == (0, turn0.state)
    assert claim.previous.simulation_time == turn0.simulation_time
    # a second claim of the world claims nothing while this one runs
    assert claim_attempt(attempt_id=ids[0], owner="w2") is None


def test_a_commit_is_one_round_trip_and_claims_the_next_attempt_in_it(queue: str) -> None:
    _world("one-trip")
    claim, ids = _claimed("one-trip", count=2)
    working, staged, recorder, started = _executed(claim)
    with CaptureQueriesContext(connection) as queries:
        turn, follower = commit_module.commit_turn(
            claim, working, staged, recorder, started, owner="w1", claim_next=True
        )
    assert len(queries.captured_queries) == 1
    assert follower is not None
    assert str(follower.attempt.pk) == ids[1]
    assert (follower.attempt.status, follower.attempt.attempted_turn) == ("running", 2)
    # the follower starts from the committed turn, in memory, as the database has it
    stored = Turn.objects.get(world__slug="one-trip", number=1)
    assert follower.previous is turn
    assert (turn.state, turn.state_hash) == (stored.state, stored.state_hash)
    assert turn.simulation_time == stored.simulation_time
    assert follower.attempt.world.current_turn == 1
    first = TurnAttempt.objects.get(pk=ids[0])
    assert (first.status, first.produced_turn) == (AttemptStatus.COMMITTED, 1)
    assert _kinds(ids[0])[-1] == "turn_committed"
    assert PatchTransition.objects.filter(attempt_id=ids[0]).count() == len(staged) > 0


def test_a_commit_whose_lease_was_lost_keeps_nothing(queue: str) -> None:
    _world("lost")
    claim, ids = _claimed("lost", count=2)
    working, staged, recorder, started = _executed(claim)
    # the reaper interrupted the attempt meanwhile
    TurnAttempt.objects.filter(pk=ids[0]).update(status=AttemptStatus.INTERRUPTED)
    with pytest.raises(LeaseLost):
        commit_module.commit_turn(
            claim, working, staged, recorder, started, owner="w1", claim_next=True
        )
    assert World.objects.get(slug="lost").current_turn == 0
    assert not Turn.objects.filter(world__slug="lost", number=1).exists()
    assert not PatchTransition.objects.filter(attempt_id=ids[0]).exists()
    assert "turn_committed" not in _kinds(ids[0])
    assert TurnAttempt.objects.get(pk=ids[1]).status == AttemptStatus.QUEUED
    # the events not yet written are still pending (for the failure to write, were it ours)
    assert recorder.events.discard_pending() > 0


def test_a_commit_after_the_world_moved_fails_the_attempt_and_keeps_nothing(queue: str) -> None:
    _world("moved")
    claim, ids = _claimed("moved")
    working, staged, recorder, started = _executed(claim)
    World.objects.filter(slug="moved").update(current_turn=1)
    with pytest.raises(AttemptFailure) as failure:
        commit_module.commit_turn(claim, working, staged, recorder, started, owner="w1")
    assert failure.value.step == "commit"
    assert "moved past turn 0" in failure.value.message
    assert TurnAttempt.objects.get(pk=ids[0]).status == AttemptStatus.RUNNING
    assert not Turn.objects.filter(world__slug="moved", number=1).exists()
    assert not PatchTransition.objects.filter(attempt_id=ids[0]).exists()


def test_a_lost_lease_is_reported_before_a_moved_world(queue: str) -> None:
    """The reaper interrupted the attempt and the world went on: the outcome is the reaper's."""
    _world("both")
    claim, ids = _claimed("both")
    working, staged, recorder, started = _executed(claim)
    TurnAttempt.objects.filter(pk=ids[0]).update(status=AttemptStatus.INTERRUPTED)
    World.objects.filter(slug="both").update(current_turn=1)
    with pytest.raises(LeaseLost):
        commit_module.commit_turn(claim, working, staged, recorder, started, owner="w1")
    assert not Turn.objects.filter(world__slug="both", number=1).exists()


def test_a_big_commit_sends_its_rows_by_copy_in_the_same_transaction(
    queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_module, "INLINE_PARAMS", 0)
    _world("big")
    claim, ids = _claimed("big", count=2)
    working, staged, recorder, started = _executed(claim)
    turn, follower = commit_module.commit_turn(
        claim, working, staged, recorder, started, owner="w1", claim_next=True
    )
    assert follower is not None and str(follower.attempt.pk) == ids[1]
    assert PatchTransition.objects.filter(attempt_id=ids[0]).count() == len(staged) > 0
    assert _kinds(ids[0])[-1] == "turn_committed"
    assert Turn.objects.get(world__slug="big", number=1).state_hash == turn.state_hash


def test_the_next_attempt_reads_the_budget_in_force_when_it_is_claimed(queue: str) -> None:
    _world("budgeted")
    claim, _ = _claimed("budgeted", count=2)
    assert claim.limits is None
    working, staged, recorder, started = _executed(claim)
    # set while the first attempt runs: it applies from the next attempt
    world_budget_set(slug="budgeted", budget={"max_tokens_total": 9000})
    _, follower = commit_module.commit_turn(
        claim, working, staged, recorder, started, owner="w1", claim_next=True
    )
    assert follower is not None
    assert follower.limits == BudgetLimits(max_tokens_total=9000)
