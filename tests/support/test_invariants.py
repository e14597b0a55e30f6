"""The invariant checker finds what it is meant to find: a clean history passes, and each kind
of damage a crash could leave is reported under its rule."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import connection
from django.utils import timezone

from cognition_app.models import InvocationStatus, SourceInvocation
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.invariants import check_invariants
from tests.support.worker import delete_queue, routed_to
from worlds_app.models import AttemptStatus, Turn, TurnAttempt, World
from worlds_app.services import (
    turn_attempt_claim,
    turn_attempt_enqueue,
    turn_attempt_run,
    world_create,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world() -> Iterator[World]:
    """A world with two committed turns and nothing queued (dispatches go nowhere)."""
    queue = f"invariants-{os.getpid()}"
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    try:
        with routed_to(queue):
            world_create(
                data={
                    "slug": "inv",
                    "scenario_ref": {"hash": scenario_assemble(data=body)["scenario_hash"]},
                }
            )
            for attempt_id in turn_attempt_enqueue(slug="inv", count=2)["attempt_ids"]:
                assert turn_attempt_run(attempt_id=attempt_id, owner="t") == "committed"
            yield World.objects.get(slug="inv")
    finally:
        delete_queue(queue)


def _rules(world: World) -> set[str]:
    return {v.rule for v in check_invariants() if v.world == world.slug}


def test_a_clean_history_has_no_violation(world: World) -> None:
    assert world.current_turn == 2
    assert check_invariants() == []


def test_a_missing_turn_is_reported(world: World) -> None:
    # Turns are immutable (a trigger rejects UPDATE) but may be deleted: a gap at turn 2.
    Turn.objects.filter(world=world, number=2).delete()
    assert {"contiguous_turns", "committed_has_turn"} <= _rules(world)


def test_a_committed_attempt_without_its_turn_event_is_reported(world: World) -> None:
    attempt = TurnAttempt.objects.get(world=world, produced_turn=1)
    attempt.events.filter(kind="turn_committed").delete()
    assert _rules(world) == {"committed_has_turn"}


def test_a_failed_attempt_that_left_a_turn_behind_is_reported(world: World) -> None:
    TurnAttempt.objects.filter(world=world, produced_turn=2).update(status=AttemptStatus.FAILED)
    assert {"turn_from_attempt", "no_partial_turn", "committed_has_turn"} <= _rules(world)


def test_a_world_with_queued_attempts_and_nothing_running_is_stranded(world: World) -> None:
    with routed_to(f"invariants-{os.getpid()}"):
        turn_attempt_enqueue(slug=world.slug)
    assert _rules(world) == {"no_stranded_world"}
    # not settled yet: a queued attempt is fine while dispatch may still be on its way
    assert [v for v in check_invariants(settled=False) if v.world == world.slug] == []


def test_a_running_attempt_and_invocation_left_behind_are_reported(world: World) -> None:
    with routed_to(f"invariants-{os.getpid()}"):
        attempt_id = turn_attempt_enqueue(slug=world.slug)["attempt_ids"][0]
    attempt = turn_attempt_claim(attempt_id=attempt_id, owner="dead")
    assert attempt is not None
    SourceInvocation.objects.create(
        attempt=attempt,
        world=world,
        attempted_turn=3,
        seq=1,
        source_hash="0" * 64,
        kind="llm_generation",
        status=InvocationStatus.RUNNING,
        started_at=timezone.now(),
    )
    violations = [v for v in check_invariants() if v.world == world.slug]
    assert [v.rule for v in violations] == ["nothing_left_running"] * 2
    # an attempt that ended while its invocation still runs is wrong even mid-run
    TurnAttempt.objects.filter(pk=attempt_id).update(status=AttemptStatus.FAILED)
    assert [v.rule for v in check_invariants(settled=False)] == ["nothing_left_running"]


def test_a_batch_that_ran_on_after_a_failure_is_reported(world: World) -> None:
    with routed_to(f"invariants-{os.getpid()}"):
        ids = turn_attempt_enqueue(slug=world.slug, count=2)["attempt_ids"]
    TurnAttempt.objects.filter(pk=ids[0]).update(status=AttemptStatus.FAILED)
    TurnAttempt.objects.filter(pk=ids[1]).update(status=AttemptStatus.FAILED)
    assert _rules(world) == {"batch_stops_at_failure"}


def test_a_corrupt_snapshot_is_reported(world: World) -> None:
    with connection.cursor() as cursor:  # the immutability trigger guards UPDATE; bypass it
        cursor.execute("ALTER TABLE worlds_app_turn DISABLE TRIGGER USER")
        try:
            Turn.objects.filter(world=world, number=1).update(state_hash="f" * 64)
        finally:
            cursor.execute("ALTER TABLE worlds_app_turn ENABLE TRIGGER USER")
    assert _rules(world) == {"turn_snapshot"}
