"""The next turn of a batch claimed by the task that committed the previous one, in the commit's
transaction (no broker round trip, no gap), within the rules: each attempt is claimed like any
other (its own lease and attempt_started event), and one the task claimed but never ran is
interrupted by the reaper like any attempt of a dead worker."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import delete_queue, experiment_queue, taken_attempt_ids, unread_queue
from worlds_app.models import AttemptEvent, AttemptStatus, Turn, TurnAttempt
from worlds_app.services import (
    attempts,
    dispatch,
    turn_attempt_enqueue,
    turn_attempt_reap,
    turn_attempt_redrive,
    turn_attempt_run,
    world_create,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue() -> Iterator[str]:
    with unread_queue(f"continuation-{os.getpid()}") as name:
        yield name


def _sent(queue: str) -> list[str]:
    return taken_attempt_ids(queue)


def _world(slug: str) -> None:
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})


def _statuses(ids: list[str]) -> list[str]:
    found = dict(TurnAttempt.objects.filter(pk__in=ids).values_list("id", "status"))
    return [found[TurnAttempt._meta.pk.to_python(i)] for i in ids]  # type: ignore[union-attr]


def test_a_task_runs_the_rest_of_its_batch_itself_without_a_kick(queue: str) -> None:
    _world("cont")
    ids = turn_attempt_enqueue(slug="cont", count=3)["attempt_ids"]
    assert _sent(queue) == [ids[0]]  # the kick of the enqueue

    assert turn_attempt_run(attempt_id=ids[0], owner="w1", continue_for=60) == "committed"

    assert _statuses(ids) == ["committed"] * 3
    assert list(Turn.objects.filter(world__slug="cont").values_list("number", flat=True)) == [
        0,
        1,
        2,
        3,
    ]
    # each was claimed on its own (its own lease owner, attempted turn, attempt_started event)
    rows = TurnAttempt.objects.filter(pk__in=ids).order_by("seq")
    assert [(a.lease_owner, a.attempted_turn, a.produced_turn) for a in rows] == [
        ("w1", 1, 1),
        ("w1", 2, 2),
        ("w1", 3, 3),
    ]
    assert AttemptEvent.objects.filter(attempt_id__in=ids, kind="attempt_started").count() == 3
    # no broker message for the continued attempts: only the last commit kicks (nothing queued)
    assert _sent(queue) == []


def test_without_continuation_each_commit_kicks_the_next(queue: str) -> None:
    _world("plain")
    ids = turn_attempt_enqueue(slug="plain", count=2)["attempt_ids"]
    _sent(queue)
    assert turn_attempt_run(attempt_id=ids[0], owner="w1") == "committed"
    assert _statuses(ids) == ["committed", "queued"]
    assert _sent(queue) == [ids[1]]


def test_a_commit_that_does_not_claim_the_next_sends_it_without_a_kick(
    queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit reads the id of its batch's next attempt while it is queued and sends its
    task after the commit, as a kick would, without looking the world's head up again; the
    batch's last attempt, and one whose next is no longer queued, kick as always."""
    from worlds_app.services import turn_commit

    kicks: list[int] = []
    monkeypatch.setattr(turn_commit, "kick_on_commit", kicks.append)
    _world("known")
    ids = turn_attempt_enqueue(slug="known", count=4)["attempt_ids"]
    _sent(queue)
    assert turn_attempt_run(attempt_id=ids[0], owner="w1") == "committed"
    assert (_sent(queue), kicks) == ([ids[1]], [])
    TurnAttempt.objects.filter(pk=ids[2]).update(status=AttemptStatus.CANCELLED)
    assert turn_attempt_run(attempt_id=ids[1], owner="w1") == "committed"
    world = TurnAttempt.objects.get(pk=ids[1]).world_id
    assert (_sent(queue), kicks) == ([], [world])


def test_the_continuation_stops_at_the_end_of_the_batch(queue: str) -> None:
    _world("two")
    first = turn_attempt_enqueue(slug="two", count=2)["attempt_ids"]
    second = turn_attempt_enqueue(slug="two", count=1)["attempt_ids"]
    _sent(queue)
    turn_attempt_run(attempt_id=first[0], owner="w1", continue_for=60)
    # the other batch is not this task's: it is handed out through the broker
    assert _statuses(first + second) == ["committed", "committed", "queued"]
    assert _sent(queue) == [second[0]]


def test_the_commit_claims_the_next_attempt_in_its_own_transaction(queue: str) -> None:
    """No gap between the turns of a batch: the next attempt is running (under this task's
    lease) from the instant the previous one committed, with its attempt_started event."""
    _world("gapless")
    ids = turn_attempt_enqueue(slug="gapless", count=3)["attempt_ids"]
    assert turn_attempt_run(attempt_id=ids[0], owner="w1", continue_for=60) == "committed"
    rows = list(TurnAttempt.objects.filter(pk__in=ids).order_by("seq"))
    for before, after in itertools.pairwise(rows):
        assert after.started_at == before.ended_at
        assert after.lease_owner == "w1"
    # each attempt's own timeline: started first, committed last, numbered from 1
    for row in rows:
        kinds = list(
            AttemptEvent.objects.filter(attempt=row).order_by("seq").values_list("seq", "kind")
        )
        assert kinds[0] == (1, "attempt_started")
        assert kinds[-1] == (len(kinds), "turn_committed")


def test_a_follower_no_longer_queued_is_not_claimed_and_the_commit_stands(
    queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _world("raced")
    ids = turn_attempt_enqueue(slug="raced", count=2)["attempt_ids"]
    _sent(queue)
    commit = attempts.commit_turn

    def follower_gone_first(*args: object, **kwargs: object) -> object:
        TurnAttempt.objects.filter(pk=ids[1]).update(status=AttemptStatus.CANCELLED)
        return commit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(attempts, "commit_turn", follower_gone_first)
    assert turn_attempt_run(attempt_id=ids[0], owner="w1", continue_for=60) == "committed"
    assert _statuses(ids) == ["committed", "cancelled"]
    assert TurnAttempt.objects.get(pk=ids[1]).lease_owner == ""
    # nothing of the world is queued: the kick after the commit hands out nothing
    assert _sent(queue) == []


def test_a_task_that_dies_after_claiming_the_next_attempt_leaves_it_to_the_reaper(
    queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies between the commit (which claimed the next attempt) and running it:
    that attempt is running under the dead task's lease, like any attempt of a dead worker;
    the reaper interrupts it when the lease expires and cancels the rest of the batch."""
    _world("died")
    ids = turn_attempt_enqueue(slug="died", count=3)["attempt_ids"]
    _sent(queue)

    class Died(BaseException):
        pass

    run = attempts._run_claimed

    def die_before_the_follower(claim: Any, *args: Any, **kwargs: Any) -> Any:
        if str(claim.attempt.pk) == ids[1]:
            raise Died
        return run(claim, *args, **kwargs)

    monkeypatch.setattr(attempts, "_run_claimed", die_before_the_follower)
    with pytest.raises(Died):
        turn_attempt_run(attempt_id=ids[0], owner="w1", continue_for=60)
    assert _statuses(ids) == ["committed", "running", "queued"]
    assert _sent(queue) == []
    assert turn_attempt_redrive() == []  # nothing of the world is queued with nothing running
    assert turn_attempt_reap(now=timezone.now() + timedelta(hours=1)) == [ids[1]]
    assert _statuses(ids) == ["committed", "interrupted", "cancelled"]
    assert Turn.objects.filter(world__slug="died").count() == 2  # turn 0 and turn 1


def test_the_queue_check_sees_a_turn_message_waiting_in_either_queue_at_any_priority(
    queue: str,
) -> None:
    from chukwa_site.celery import app

    assert not dispatch.turn_messages_waiting()
    for experiment in (False, True):
        for priority in (None, 9):
            app.send_task(
                dispatch.RUN_TURN_ATTEMPT_TASK,
                args=["00000000-0000-0000-0000-000000000000"],
                queue=dispatch.attempt_queue(experiment=experiment),
                priority=priority,
            )
            assert dispatch.turn_messages_waiting(), (experiment, priority)
            delete_queue(experiment_queue(queue) if experiment else queue)
            assert not dispatch.turn_messages_waiting(), (experiment, priority)
    # another queue's messages are not turns waiting here
    app.send_task(dispatch.MEASURE_WORLD_TASK, args=[1, []], queue=f"{queue}-elsewhere")
    try:
        assert not dispatch.turn_messages_waiting()
    finally:
        delete_queue(f"{queue}-elsewhere")
