"""The lease heartbeat survives a transient database error (its connection killed by the server)
and keeps renewing; it reports a lost lease, and follows the attempts a task runs in a row."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import delete_queue, routed_to
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_claim, turn_attempt_enqueue, world_create
from worlds_app.services.claims import Heartbeat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claimed(settings: Any) -> Iterator[TurnAttempt]:
    """A running attempt of a fresh world (its dispatch goes to a queue nobody reads)."""
    settings.CHUKWA_ATTEMPT_LEASE_SECONDS = 3  # a beat every second
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    world_create(
        data={
            "slug": "beat",
            "scenario_ref": {"hash": scenario_assemble(data=body)["scenario_hash"]},
        }
    )
    queue = f"heartbeat-{os.getpid()}"
    with routed_to(queue):
        attempt_id = turn_attempt_enqueue(slug="beat")["attempt_ids"][0]
    attempt = turn_attempt_claim(attempt_id=attempt_id, owner="heartbeat-test")
    assert attempt is not None
    try:
        yield attempt
    finally:
        delete_queue(queue)


def _lease(attempt: TurnAttempt) -> datetime:
    value = TurnAttempt.objects.values_list("lease_expires_at", flat=True).get(pk=attempt.pk)
    assert value is not None
    return value


def _renewed_after(attempt: TurnAttempt, since: datetime, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _lease(attempt) > since:
            return True
        time.sleep(0.1)
    return False


def _kill_heartbeat_connection() -> int:
    """The server ends the heartbeat thread's session (as a restart or a network cut would):
    the backend whose last statement renewed a lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            'AND query LIKE \'UPDATE "worlds_app_turnattempt" SET "lease_expires_at"%%\''
        )
        return len(cursor.fetchall())


def test_heartbeat_keeps_renewing_after_its_connection_is_killed(
    claimed: TurnAttempt, caplog: pytest.LogCaptureFixture
) -> None:
    with Heartbeat(claimed) as heartbeat:
        assert _renewed_after(claimed, _lease(claimed))  # it beats
        assert _kill_heartbeat_connection() == 1
        killed_at = _lease(claimed)
        # The next beat fails on the dead connection; the one after reconnects and renews.
        assert _renewed_after(claimed, killed_at)
        assert not heartbeat.lost
    assert "lease renewal failed (OperationalError)" in caplog.text
    assert TurnAttempt.objects.get(pk=claimed.pk).status == AttemptStatus.RUNNING


def test_heartbeat_reports_a_lost_lease(claimed: TurnAttempt) -> None:
    with Heartbeat(claimed) as heartbeat:
        TurnAttempt.objects.filter(pk=claimed.pk).update(lease_owner="the-reaper-took-it")
        deadline = time.monotonic() + 30
        while not heartbeat.lost and time.monotonic() < deadline:
            time.sleep(0.1)
        assert heartbeat.lost


def test_one_heartbeat_follows_the_attempts_a_task_runs_in_a_row(claimed: TurnAttempt) -> None:
    """The next attempt of a batch (claimed by the commit of the one before) is renewed by the
    same thread; the lost lease of the attempt it followed before is not the new one's."""
    with Heartbeat(claimed) as heartbeat:
        assert _renewed_after(claimed, _lease(claimed))
        # the attempt committed: the lease of whatever the heartbeat renews next is the follower's
        TurnAttempt.objects.filter(pk=claimed.pk).update(status=AttemptStatus.COMMITTED)
        with routed_to(f"heartbeat-{os.getpid()}"):
            follower_id = turn_attempt_enqueue(slug="beat")["attempt_ids"][0]
        follower = turn_attempt_claim(attempt_id=follower_id, owner="heartbeat-test")
        assert follower is not None
        heartbeat.follow(follower)
        assert _renewed_after(follower, _lease(follower))
        assert not heartbeat.lost
        committed_lease = _lease(claimed)
    assert _lease(claimed) == committed_lease
