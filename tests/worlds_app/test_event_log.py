"""The event log writes an attempt's pending events with the rows a source call opens, in one
round trip (events readable as they happen, before the call's own row), and only
while the attempt still runs under its worker's lease: once it is lost, nothing of the call is
written (the call is not sent)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cognition_app.models import InvocationKind, SourceInvocation
from cognition_app.rows import insert_statement
from cognition_app.subject_run import StagedEvent
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import delete_queue, routed_to
from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_claim, turn_attempt_enqueue, world_create
from worlds_app.services.claims import LeaseLost
from worlds_app.services.events import EventLog

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claimed() -> Iterator[TurnAttempt]:
    """A running attempt of a fresh world (its dispatch goes to a queue nobody reads)."""
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    world_create(
        data={
            "slug": "log",
            "scenario_ref": {"hash": scenario_assemble(data=body)["scenario_hash"]},
        }
    )
    queue = f"event-log-{os.getpid()}"
    with routed_to(queue):
        attempt_id = turn_attempt_enqueue(slug="log")["attempt_ids"][0]
    attempt = turn_attempt_claim(attempt_id=attempt_id, owner="event-log-test")
    assert attempt is not None
    try:
        yield attempt
    finally:
        delete_queue(queue)


def _invocation(attempt: TurnAttempt, seq: int) -> SourceInvocation:
    return SourceInvocation(
        attempt_id=attempt.pk,
        world_id=attempt.world_id,
        attempted_turn=attempt.attempted_turn,
        seq=seq,
        source_hash="0" * 64,
        kind=InvocationKind.AMBIENT_CONTEXT,
        request={"hostile": 'a "quote" \\ and é'},
        request_key="1" * 64,
        started_at=timezone.now(),
    )


def _events(attempt: TurnAttempt) -> list[tuple[Any, ...]]:
    return list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("seq", "kind", "subject_id", "payload", "invocation_id", "patch_seq")
    )


def test_pending_events_and_a_calls_row_are_written_in_one_round_trip(
    claimed: TurnAttempt,
) -> None:
    log = EventLog(claimed)
    linked = uuid.uuid4()
    log.append(StagedEvent("node_output", {"text": 'hostile " \\ é 😀'}, subject_id="bob"))
    log.append(
        StagedEvent("world_patch_applied", {}, subject_id="bob", patch_seq=1, invocation_id=linked)
    )
    inv = _invocation(claimed, 1)
    with CaptureQueriesContext(connection) as queries:
        results = log.write_with([insert_statement(inv)])
    assert len(queries.captured_queries) == 1
    assert results == [None]
    assert _events(claimed) == [
        (1, "node_output", "bob", {"text": 'hostile " \\ é 😀'}, None, None),
        (2, "world_patch_applied", "bob", {}, linked, 1),
    ]
    assert SourceInvocation.objects.filter(pk=inv.pk).exists()
    assert not log.lease_lost


def test_with_nothing_pending_only_the_calls_rows_are_written(claimed: TurnAttempt) -> None:
    log = EventLog(claimed)
    inv = _invocation(claimed, 1)
    log.write_with([insert_statement(inv)])
    assert SourceInvocation.objects.filter(pk=inv.pk).exists()
    assert _events(claimed) == []


def test_an_opening_commits_durably(claimed: TurnAttempt) -> None:
    """Its request goes out once it returns, so it must not be committed with
    ``synchronous_commit`` off as other trace writes are (an immediate stop of PostgreSQL then
    lost openings whose requests had gone out)."""
    log = EventLog(claimed)
    log.append(StagedEvent("attempt_started", {}))
    with CaptureQueriesContext(connection) as queries:
        log.write_with([insert_statement(_invocation(claimed, 1))])
    (opening,) = [q["sql"] for q in queries.captured_queries]
    assert "synchronous_commit" not in opening


@pytest.mark.parametrize("pending", [True, False])
@pytest.mark.parametrize("taken", ["interrupted", "another lease"])
def test_after_the_lease_is_lost_neither_the_events_nor_the_calls_row_are_written(
    claimed: TurnAttempt, pending: bool, taken: str
) -> None:
    log = EventLog(claimed)
    if pending:
        log.append(StagedEvent("node_output", {"n": 1}, subject_id="bob"))
    if taken == "interrupted":  # the reaper interrupted the attempt (its lease expired)
        TurnAttempt.objects.filter(pk=claimed.pk).update(status=AttemptStatus.INTERRUPTED)
    else:
        TurnAttempt.objects.filter(pk=claimed.pk).update(lease_owner="another-worker")
    inv = _invocation(claimed, 1)
    with pytest.raises(LeaseLost):
        log.write_with([insert_statement(inv)])
    assert log.lease_lost
    assert _events(claimed) == []
    assert not SourceInvocation.objects.filter(pk=inv.pk).exists()
    # Known lost: the next call is refused without a round trip.
    with CaptureQueriesContext(connection) as queries, pytest.raises(LeaseLost):
        log.write_with([insert_statement(_invocation(claimed, 2))])
    assert queries.captured_queries == []


def test_events_the_database_refuses_are_written_apart_and_the_row_still_opens(
    claimed: TurnAttempt,
) -> None:
    log = EventLog(claimed)
    log.append(StagedEvent("node_output", {"n": 1}, subject_id="bob"))
    log.append(StagedEvent("node_output", {"n": 2}, subject_id="NUL \x00 here"))
    inv = _invocation(claimed, 1)
    log.write_with([insert_statement(inv)])
    assert [row[0] for row in _events(claimed)] == [1]  # the refused one is lost alone
    assert "could not be stored" in log.failure
    assert SourceInvocation.objects.filter(pk=inv.pk).exists()


@pytest.mark.parametrize("lost", [False, True])
def test_a_flush_is_one_statement_and_writes_nothing_once_the_lease_is_lost(
    claimed: TurnAttempt, lost: bool
) -> None:
    """Events pending longer than the batching window are written on their own by the next
    append: the lease's guard and the rows in one statement (not a transaction of four round
    trips), committed without waiting for the WAL flush like other trace writes; once the lease
    is lost, nothing is written and the log knows it."""
    log = EventLog(claimed)
    log.append(StagedEvent("node_output", {"n": 1}, subject_id="bob"))
    if lost:
        TurnAttempt.objects.filter(pk=claimed.pk).update(lease_owner="another-worker")
    log._last_write -= 1.0  # the window has passed: the next append writes
    with CaptureQueriesContext(connection) as queries:
        log.append(StagedEvent("node_output", {"n": 2}, subject_id="bob"))
    (flush,) = [q["sql"] for q in queries.captured_queries]
    assert "synchronous_commit" in flush
    assert log.lease_lost is lost
    written = [(n, "node_output", "bob", {"n": n}, None, None) for n in (1, 2)]
    assert _events(claimed) == ([] if lost else written)
