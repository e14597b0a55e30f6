"""Fair queues (docs/operations.md, "Fair queues"): an experiment's attempts go to the
experiments queue and an operator's turn to the default queue, both consumed by every turn
worker, which kombu's Redis transport takes in turn; at most CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT
worlds of one experiment are admitted at a time, so two experiments share the workers; the
re-drive admits and dispatches what the bound held back when a message or an admission is lost.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worker import (
    delete_queue,
    experiment_queue,
    routed_to,
    taken_attempt_ids,
    unread_queue,
    worker_process,
)
from tests.support.worlds import fixture_body
from worlds_app.models import AttemptStatus, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, turn_attempt_redrive
from worlds_app.services.experiments import experiment_cancel, experiment_create
from worlds_app.services.worlds import world_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rules_scenario() -> str:
    """ant_on_plate with the rule policy: no model, an attempt takes milliseconds."""
    return str(scenario_assemble(data=fixture_body("ant_on_plate_rules"))["scenario_hash"])


def _metric() -> str:
    content = {
        "version": 1,
        "label": "turn_number",
        "kind": "expression",
        "aggregate": "last",
        "expression": "turn",
    }
    return str(metric_put(content=content)["hash"])


def _design(slug: str, scenario: str, replicates: int, turns: int) -> dict[str, Any]:
    return {
        "slug": slug,
        "arms": [{"label": "a", "scenario_ref": {"hash": scenario}}],
        "replicates": replicates,
        "turns": turns,
        "metrics": [{"hash": _metric()}],
    }


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _worker_env(**extra: str) -> dict[str, str]:
    return {"CHUKWA_DB_NAME": str(connection.settings_dict["NAME"]), **extra}


@pytest.fixture
def queue() -> Iterator[str]:
    """A fresh queue name for this test's worker (its experiments queue emptied afterwards)."""
    name = f"fair-{os.getpid()}-{time.monotonic_ns()}"
    yield name
    delete_queue(name)
    delete_queue(experiment_queue(name))


# --- routing and admission, without a worker ------------------------------------------------


def _messages(queue_name: str) -> int:
    from chukwa_site.celery import app

    with app.connection_for_read() as conn:
        return int(conn.default_channel.queue_declare(queue=queue_name).message_count)


def test_the_bound_admits_n_worlds_and_the_redrive_dispatches_what_it_held_back(
    rules_scenario: str, settings: Any
) -> None:
    settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = 2
    with unread_queue(f"fair-unread-{os.getpid()}") as name:
        experiment = experiment_create(data=_design("held", rules_scenario, 4, 2))
        worlds = list(World.objects.filter(experiment=experiment).order_by("pk"))
        # the first two worlds admitted and sent to the experiments queue, nothing interactive
        assert [w.admitted_at is not None for w in worlds] == [True, True, False, False]
        assert (_messages(experiment_queue(name)), _messages(name)) == (2, 0)

        # Both messages lost: the re-drive re-sends the admitted worlds' heads only.
        delete_queue(experiment_queue(name))
        heads = {
            str(w.attempts.filter(status=AttemptStatus.QUEUED).order_by("seq").first().pk): w
            for w in worlds
        }
        sent = turn_attempt_redrive()
        assert sorted(heads[a].pk for a in sent) == [worlds[0].pk, worlds[1].pk]

        # The admitted worlds are done, and the admission that should have followed is lost
        # (a bulk update sends nothing): the re-drive admits and dispatches the next two.
        delete_queue(experiment_queue(name))
        TurnAttempt.objects.filter(world__in=worlds[:2]).update(status=AttemptStatus.CANCELLED)
        sent = turn_attempt_redrive()
        assert sorted(heads[a].pk for a in sent) == [worlds[2].pk, worlds[3].pk]
        assert World.objects.filter(experiment=experiment, admitted_at__isnull=True).count() == 0
        assert _messages(experiment_queue(name)) == 2

        # A world of no experiment goes to the default (interactive) queue.
        world_create(data={"slug": "alone", "scenario_ref": {"hash": rules_scenario}})
        turn_attempt_enqueue(slug="alone", count=1)
        assert (_messages(name), _messages(experiment_queue(name))) == (1, 2)


def test_admission_skips_worlds_with_nothing_queued_across_chunks(
    rules_scenario: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worlds waiting for admission are looked at a chunk at a time: the next waiting worlds
    are found past chunks whose worlds have nothing queued, lowest id first, and no more than
    the bound; the worlds in flight are counted among those marked in flight, whose marks are
    cleared once they have nothing active."""
    from worlds_app.services import dispatch

    monkeypatch.setattr(dispatch, "ADMIT_CHUNK", 2)
    settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = 3
    with unread_queue(f"fair-chunks-{os.getpid()}"):
        experiment = experiment_create(data=_design("chunks", rules_scenario, 9, 1))
        worlds = list(World.objects.filter(experiment=experiment).order_by("pk"))
        assert [w.admitted_at is not None for w in worlds] == [True] * 3 + [False] * 6
        # the three in flight (marked) are counted: nothing more is admitted
        assert dispatch.experiment_admit(experiment_id=experiment.pk) == []
        assert World.objects.filter(experiment=experiment, admitted_at__isnull=False).count() == 3
        marked = World.objects.filter(experiment=experiment, in_flight=True)
        assert sorted(marked.values_list("pk", flat=True)) == [w.pk for w in worlds[:3]]
        # the admitted worlds done; of the rest, worlds 4-6 have nothing queued any more
        TurnAttempt.objects.filter(world__in=worlds[:6]).update(status=AttemptStatus.CANCELLED)
        sent = dispatch.experiment_admit(experiment_id=experiment.pk)
        admitted = World.objects.filter(experiment=experiment, admitted_at__isnull=False)
        assert sorted(admitted.values_list("pk", flat=True)) == [w.pk for w in worlds[:3]] + [
            w.pk for w in worlds[6:]
        ]
        heads = TurnAttempt.objects.filter(world__in=worlds[6:], status=AttemptStatus.QUEUED)
        assert sorted(sent) == sorted(str(pk) for pk in heads.values_list("pk", flat=True))
        # the done worlds' marks are cleared, the admitted ones marked
        assert sorted(marked.values_list("pk", flat=True)) == [w.pk for w in worlds[6:]]


def test_worlds_ending_at_once_never_admit_past_the_bound(
    rules_scenario: str, settings: Any
) -> None:
    """Six callers admitting at the same moment (six worlds ending at once, each on its own
    connection): the admission lock serializes them, so exactly the bound's free places are
    filled, each world admitted once, its first attempt sent once."""
    from django.db import close_old_connections

    from worlds_app.services import dispatch

    settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = 4
    with unread_queue(f"fair-race-{os.getpid()}"):
        experiment = experiment_create(data=_design("race", rules_scenario, 12, 1))
        first = list(World.objects.filter(experiment=experiment, admitted_at__isnull=False))
        assert len(first) == 4
        TurnAttempt.objects.filter(world__in=first).update(status=AttemptStatus.CANCELLED)
        start = threading.Barrier(6)

        def admit() -> list[str]:
            try:
                start.wait(10)
                return dispatch.experiment_admit(experiment_id=experiment.pk)
            finally:
                close_old_connections()
                connection.close()

        with ThreadPoolExecutor(6) as pool:
            sent = [a for found in pool.map(lambda _: admit(), range(6)) for a in found]
        admitted = World.objects.filter(experiment=experiment, admitted_at__isnull=False)
        assert admitted.count() == 8  # the first four, done, and four more: not one past
        assert len(sent) == len(set(sent)) == 4
        heads = TurnAttempt.objects.filter(
            world__in=admitted.exclude(pk__in=[w.pk for w in first]), status=AttemptStatus.QUEUED
        )
        assert sorted(sent) == sorted(str(pk) for pk in heads.values_list("pk", flat=True))


@pytest.mark.parametrize("case", ["goes on", "no time to go on", "a turn waits"])
def test_a_task_that_ends_a_world_runs_the_first_turn_of_the_world_admitted_in_its_place(
    rules_scenario: str, settings: Any, case: str
) -> None:
    """No broker message for the next world when the task that freed the slot may go on and
    nothing waits (dispatch.handing_off); otherwise its message goes out as always."""
    from worlds_app.services import turn_attempt_run

    settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = 1
    with unread_queue(f"fair-handoff-{os.getpid()}") as name:
        experiment = experiment_create(data=_design("handoff", rules_scenario, 2, 1))
        first, second = World.objects.filter(experiment=experiment).order_by("pk")
        (head,) = taken_attempt_ids(experiment_queue(name))  # the first world's, sent on creation
        if case == "a turn waits":  # an operator's turn waits in the interactive queue
            world_create(data={"slug": "operator", "scenario_ref": {"hash": rules_scenario}})
            turn_attempt_enqueue(slug="operator", count=1)
        going_on = 0 if case == "no time to go on" else 60
        assert turn_attempt_run(attempt_id=head, owner="w1", continue_for=going_on) == "committed"
        next_head = str(second.attempts.get().pk)
        if case == "goes on":
            assert second.attempts.get().status == AttemptStatus.COMMITTED
            assert second.attempts.get().lease_owner == "w1"
            assert taken_attempt_ids(experiment_queue(name)) == []
        else:
            assert second.attempts.get().status == AttemptStatus.QUEUED
            assert taken_attempt_ids(experiment_queue(name)) == [next_head]
        assert first.attempts.get().status == AttemptStatus.COMMITTED


# --- real workers ---------------------------------------------------------------------------


def _started(attempts: Any) -> list[datetime]:
    return sorted(attempts.exclude(started_at=None).values_list("started_at", flat=True))


@pytest.mark.slow
@pytest.mark.integration
def test_an_operator_turn_starts_within_one_attempt_behind_a_1000_attempt_experiment(
    rules_scenario: str, settings: Any, queue: str
) -> None:
    # Every world admitted at once: the experiments queue holds one message per world, and the
    # worker's batches never go on in their task (messages wait), so the turns of the 100
    # worlds interleave in the queue. One process consumes both queues.
    settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = 100
    env = _worker_env(CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT="100")
    world_create(data={"slug": "operator", "scenario_ref": {"hash": rules_scenario}})
    with worker_process(f"{queue}-w", env=env, queue=queue), routed_to(queue):
        experiment = experiment_create(data=_design("flood", rules_scenario, 100, 10))
        flood = TurnAttempt.objects.filter(world__experiment=experiment)
        assert flood.count() == 1000
        _wait(lambda: flood.exclude(started_at=None).count() >= 30, 40, "the experiment to run")
        mine = TurnAttempt.objects.get(pk=turn_attempt_enqueue(slug="operator")["attempt_ids"][0])
        _wait(lambda: TurnAttempt.objects.get(pk=mine.pk).started_at is not None, 20, "my turn")
        mine.refresh_from_db()
    # (after the worker stopped: cancelling races a claim of the same attempt otherwise)
    experiment_cancel(slug="flood")
    assert mine.started_at is not None
    between = [t for t in _started(flood) if mine.queued_at < t < mine.started_at]
    # The attempt running when the turn was queued, then (at most) one more: kombu rotates the
    # queue that just delivered to the back of its BRPOP order.
    print(f"{len(between)} experiment attempt(s) started in {mine.started_at - mine.queued_at}")
    assert len(between) <= 1, (len(between), mine.started_at - mine.queued_at)
    assert flood.filter(status=AttemptStatus.COMMITTED).count() < 1000  # queued behind many


@pytest.mark.slow
@pytest.mark.integration
def test_two_experiments_share_the_worker(rules_scenario: str, settings: Any, queue: str) -> None:
    settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = 2
    env = _worker_env(CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT="2")
    with worker_process(f"{queue}-w", env=env, queue=queue), routed_to(queue):
        first = experiment_create(data=_design("first", rules_scenario, 8, 4))
        a = TurnAttempt.objects.filter(world__experiment=first)
        _wait(lambda: a.exclude(started_at=None).exists(), 30, "the first experiment to run")
        second = experiment_create(data=_design("second", rules_scenario, 8, 4))
        b = TurnAttempt.objects.filter(world__experiment=second)
        done = (AttemptStatus.COMMITTED, AttemptStatus.FAILED, AttemptStatus.CANCELLED)
        _wait(
            lambda: a.filter(status__in=done).count() + b.filter(status__in=done).count() == 64,
            50,
            "both experiments to finish",
        )
    assert set(a.values_list("status", flat=True)) | set(b.values_list("status", flat=True)) == {
        AttemptStatus.COMMITTED
    }
    b_first = _started(b)[0]
    admitted = min(World.objects.filter(experiment=second).values_list("admitted_at", flat=True))
    # The second did not wait for the first to drain: its first turn started after at most
    # the attempts of the first's admitted worlds already in the queue, and the first went on.
    assert len([t for t in _started(a) if admitted < t < b_first]) <= 2
    assert len([t for t in _started(a) if t > b_first]) >= 8
    # Never more than 2 worlds of one experiment between their first start and last end.
    for attempts in (a, b):
        edges: list[tuple[datetime, int]] = []
        for world in World.objects.filter(pk__in=attempts.values("world")):
            times = world.attempts.values_list("started_at", "ended_at")
            edges += [(min(s for s, _ in times), 1), (max(e for _, e in times), -1)]
        running, peak = 0, 0
        for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
            running += step
            peak = max(peak, running)
        assert peak <= 2, peak
