"""A queued attempt always runs: the periodic re-drive re-sends the next attempt of
every world left with queued attempts and nothing running, on the real Redis; the kick after
commit never fails a request when Redis is down."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from chukwa_site import embedded
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import control_queue, delete_queue, routed_to
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import (
    turn_attempt_claim,
    turn_attempt_enqueue,
    turn_attempt_redrive,
    turn_attempt_run,
    world_create,
)
from worlds_app.tasks import reap_expired_attempts

pytestmark = pytest.mark.django_db(transaction=True)
FINISHED = {"committed", "failed", "interrupted", "cancelled"}


def _scenario() -> str:
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    return scenario_assemble(data=body)["scenario_hash"]


def _queued_task_args(queue: str) -> list[str]:
    """The attempt ids of the run_turn_attempt messages waiting in ``queue`` (in Redis)."""
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        raw = conn.default_channel.client.lrange(queue, 0, -1)
    messages = [json.loads(m) for m in raw]
    assert {m["headers"]["task"] for m in messages} <= {"worlds.run_turn_attempt"}
    return sorted(json.loads(m["headers"]["argsrepr"].replace("'", '"'))[0] for m in messages)


@pytest.fixture
def private_queue() -> Iterator[str]:
    """Attempt tasks go to a queue no worker reads (a lost dispatch); deleted afterwards."""
    queue = f"redrive-{os.getpid()}"
    delete_queue(queue)
    try:
        with routed_to(queue):
            yield queue
    finally:
        delete_queue(queue)


def _purge(queue: str) -> None:
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)


def test_redrive_sends_the_next_attempt_of_idle_worlds_only(private_queue: str) -> None:
    scenario = _scenario()
    for slug in ("idle", "busy", "done"):
        world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
    idle = turn_attempt_enqueue(slug="idle", count=3)["attempt_ids"]
    busy = turn_attempt_enqueue(slug="busy", count=2)["attempt_ids"]
    done = turn_attempt_enqueue(slug="done", count=1)["attempt_ids"]
    assert turn_attempt_claim(attempt_id=busy[0], owner="someone") is not None
    assert turn_attempt_run(attempt_id=done[0], owner="test") == AttemptStatus.COMMITTED
    _purge(private_queue)  # the kicks sent at enqueue: pretend they were lost

    assert turn_attempt_redrive() == [idle[0]]
    # only the head of the idle world: not its later attempts, not a world that is running
    assert _queued_task_args(private_queue) == [idle[0]]


def test_redrive_is_bounded_and_serves_the_longest_waiting_first(private_queue: str) -> None:
    scenario = _scenario()
    heads = []
    for slug in ("first", "second", "third"):
        world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
        heads.append(turn_attempt_enqueue(slug=slug)["attempt_ids"][0])
    _purge(private_queue)

    assert turn_attempt_redrive(limit=2) == heads[:2]
    # the next period: the first two are still waiting (nobody ran them), so they come first
    # again; a duplicate is harmless because a claim is a conditional update
    assert turn_attempt_redrive(limit=5) == heads
    assert turn_attempt_run(attempt_id=heads[0], owner="test") == AttemptStatus.COMMITTED
    assert turn_attempt_run(attempt_id=heads[0], owner="test") is None  # the duplicate
    assert TurnAttempt.objects.get(pk=heads[0]).produced_turn == 1


def _wait(attempt_ids: list[str], timeout: float = 90.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        statuses = {
            str(k): v
            for k, v in TurnAttempt.objects.filter(pk__in=attempt_ids).values_list("id", "status")
        }
        if len(statuses) == len(attempt_ids) and set(statuses.values()) <= FINISHED:
            return statuses
        time.sleep(0.1)
    raise AssertionError(f"attempts not finished after {timeout}s: {statuses}")


@pytest.mark.integration
def test_lost_dispatch_runs_once_the_periodic_task_comes_by(
    celery_worker: str, private_queue: str
) -> None:
    world_create(data={"slug": "lost", "scenario_ref": {"hash": _scenario()}})
    ids = turn_attempt_enqueue(slug="lost", count=2)["attempt_ids"]  # sent where nobody reads
    assert _queued_task_args(private_queue) == [ids[0]]
    with routed_to(celery_worker):
        # the periodic task, on the control queue the test worker consumes
        reap_expired_attempts.apply_async(queue=control_queue(celery_worker))
        assert _wait(ids) == {ids[0]: "committed", ids[1]: "committed"}


@contextmanager
def _redis_stopped() -> Iterator[None]:
    """The embedded Redis is stopped for the duration, then started again (same data)."""
    if os.environ.get("REDIS_URL"):
        pytest.skip("stops the embedded Redis; REDIS_URL points elsewhere")
    assert embedded.redis_stop()
    try:
        yield
    finally:
        embedded.redis_ensure()


@pytest.mark.fault
@pytest.mark.integration
def test_enqueue_while_redis_is_down_is_accepted_and_runs_after_the_restart(
    celery_worker: str, operator_user: User, caplog: pytest.LogCaptureFixture
) -> None:
    world_create(data={"slug": "offline", "scenario_ref": {"hash": _scenario()}})
    client = APIClient()
    client.force_authenticate(operator_user)
    with _redis_stopped():
        response = client.post("/api/worlds/offline/turns/", {"count": 2}, format="json")
        # the attempts are committed: the database is the queue of record
        assert response.status_code == 202, response.json()
        ids = response.json()["attempt_ids"]
        assert client.get("/api/worlds/offline/").status_code == 200
    statuses = set(TurnAttempt.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {AttemptStatus.QUEUED}
    assert "world 'offline': attempt" in caplog.text
    assert "not dispatched, broker unavailable" in caplog.text
    # Redis is back; the worker reconnects by itself; the periodic task re-drives the world.
    reap_expired_attempts.apply_async(queue=control_queue(celery_worker))
    assert _wait(ids) == {ids[0]: "committed", ids[1]: "committed"}
