"""A worker keeps its database connection from one task to the next (Celery's Django fixup would
close it before and after every task: each batch then began on a new PostgreSQL backend, its
statements parsed and planned again), and still recovers when that connection breaks between
tasks (checked before its first use in a task, as Django checks a request's)."""

from __future__ import annotations

import os
import time
from datetime import datetime

import pytest
from django.db import connection

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import routed_to, worker_process
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_enqueue, world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _others() -> dict[int, datetime]:
    """The client backends on this database other than the test's own: pid → started."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return dict(cursor.fetchall())


def _now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]  # type: ignore[index]


def _turn(queue: str, slug: str) -> TurnAttempt:
    with routed_to(queue):
        (attempt_id,) = turn_attempt_enqueue(slug=slug)["attempt_ids"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        attempt = TurnAttempt.objects.get(pk=attempt_id)
        if attempt.status not in (AttemptStatus.QUEUED, AttemptStatus.RUNNING):
            return attempt
        time.sleep(0.05)
    raise AssertionError(f"attempt {attempt_id} did not end in 60 s")


def test_a_worker_keeps_its_connection_between_tasks_and_recovers_when_it_breaks() -> None:
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": "kept", "scenario_ref": {"hash": scenario}})
    queue = f"conn-{os.getpid()}"
    env = {"CHUKWA_DB_NAME": connection.settings_dict["NAME"]}
    with worker_process(queue, env=env, queue=queue, pool="prefork"):
        assert _turn(queue, "kept").status == AttemptStatus.COMMITTED
        before = _others()
        assert before  # the worker's connection, kept open after its task
        second_started = _now()
        assert _turn(queue, "kept").status == AttemptStatus.COMMITTED
        # No new backend: the second task ran on the first one's connection.
        started_since = [pid for pid, at in _others().items() if at >= second_started]
        assert started_since == []

        # PostgreSQL drops the worker's connections (a restart, an administrator): the next
        # task notices before using it and reconnects, instead of failing.
        with connection.cursor() as cursor:
            for pid in _others():
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        third = _turn(queue, "kept")
        assert third.status == AttemptStatus.COMMITTED, third.failure_reason
        assert third.produced_turn == 3
