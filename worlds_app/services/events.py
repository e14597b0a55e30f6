"""An attempt's events, written as they happen.

Each event gets its sequence number when it happens and is written soon after, readable while
the attempt runs: by the thread it happened on, in small batches — at once when the last write
is older than ``EVENT_FLUSH_SECONDS`` (except the events of applying the patches, held for the
commit that follows), and always with the rows the next source call opens, in
the same round trip (so a reader never sees a call whose preceding events are missing), at the
end of each subject, and with the outcome (``turn_committed`` / ``attempt_failed``) in the final
transaction. ``world_patch_applied`` rows are provisional until ``turn_committed``: their
commit state is derived from the attempt's outcome (``worlds_app.selectors``), never rewritten.

Writes hold the log's lock, so rows land in sequence order whichever thread (concurrent
subjects) wrote them; and each write first takes a share lock on the attempt row, still
running under this worker's lease: once the reaper has interrupted the attempt, nothing more
is written for it, and its ``attempt_interrupted`` event is always the last.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from cognition_app.recording.port import SYNC_COMMIT_OFF
from cognition_app.rows import (
    BatchResults,
    RowTable,
    Statement,
    insert_rows,
    send_batch,
    send_combined,
)
from cognition_app.subject_run import StagedEvent
from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt
from worlds_app.services.claims import LeaseLost, refusal_of, renewal_seconds

logger = logging.getLogger(__name__)

# Events arriving faster than this are written together (a rule-policy turn of 500 subjects
# writes a few dozen batches, not a thousand rows one by one).
EVENT_FLUSH_SECONDS = 0.05


@contextmanager
def _event_write() -> Iterator[None]:
    """Like the trace writes: committed without waiting for the WAL flush (a worker crash loses
    nothing; only a crash of PostgreSQL itself could lose the last milliseconds)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def _lease_statement(attempt_id: UUID, lease_owner: str, *, guard: bool) -> Statement:
    """Is the attempt still running under this lease: a SELECT that share-locks its row (the
    reaper's update waits for this transaction, then sees every row it wrote). As a ``guard``,
    it refuses (``worlds_app_refuse_unless``) unless the attempt is, which aborts the round
    trip it starts: nothing of it is written."""
    table = connection.ops.quote_name(TurnAttempt._meta.db_table)
    # the table name is the model's own, quoted; the values are parameters
    query = f"SELECT 1 FROM {table} WHERE id = %s AND status = %s AND lease_owner = %s FOR SHARE"  # noqa: S608
    params = [attempt_id, AttemptStatus.RUNNING.value, lease_owner]
    if guard:
        return (
            f"SELECT worlds_app_refuse_unless(count(*) = 1, 'lease_lost') FROM ({query}) _lease",  # noqa: S608
            params,
        )
    return query, params


def _opening(
    guard: Statement, events: list[Statement], statements: Sequence[Statement]
) -> BatchResults:
    """The guard, the events and a call's rows in one statement (``cognition_app.rows.
    send_combined``); the results as ``cognition_app.recording.trace_batch`` gives them for ``statements``: None per
    write, and the rows of a last statement that is a SELECT (the price in force).

    Committed durably, unlike the other trace writes (``synchronous_commit`` stays on): the
    call's request goes out once this returns, so a crash of PostgreSQL itself must not take
    these rows back (written before any byte is sent). Asynchronous, an immediate stop
    right after an opening lost it while its request had gone out (``bench/fault_injection.py``:
    2 of 4 model requests with no row)."""
    last = statements[-1][0] if statements else ""
    query = statements[-1] if last.lstrip()[:6].upper() == "SELECT" else None
    writes = list(statements[:-1] if query is not None else statements)
    rows = send_combined([guard], [*events, *writes], query)
    return [*([None] * len(writes)), *([rows] if query is not None else [])]


# The columns of an event row, for writing events with a call's rows in one statement.
_EVENT_FIELDS = [f for f in AttemptEvent._meta.concrete_fields if not f.primary_key and f.column]
EVENT_ROWS = RowTable.of(AttemptEvent, [f.name for f in _EVENT_FIELDS])
_EVENT_ATTNAMES = tuple(f.attname for f in _EVENT_FIELDS)


def _insert(rows: list[AttemptEvent]) -> None:
    """By COPY (``cognition_app.rows``): Django's bulk_create escapes every JSON payload
    through a regular expression, most of a big LLM-free turn's event writes."""
    insert_rows(EVENT_ROWS, [_event_tuple(row) for row in rows])


def _event_tuple(row: AttemptEvent) -> tuple[Any, ...]:
    return tuple(getattr(row, name) for name in _EVENT_ATTNAMES)


class EventLog:
    """The events of one running attempt; ``append`` is thread-safe."""

    def __init__(self, attempt: TurnAttempt) -> None:
        self.attempt_id: UUID = attempt.pk
        self.lease_owner = attempt.lease_owner
        # its lease_expires_at: as the claim set it, then each renewal (claims.renew_lease)
        self._attempt = attempt
        self.lease_lost = False  # a write found the attempt no longer ours
        self.failure = ""  # why some events could not be written (the attempt must fail)
        self._lock = threading.Lock()
        self._pending: list[AttemptEvent] = []
        self._next_seq = 1
        self._last_write = time.monotonic()

    def append(self, event: StagedEvent, /, *, hold: bool = False) -> None:
        """The event, written now if the last write is older than the batching window. With
        ``hold``, never now: for the events of applying the subjects' patches, which the
        commit (or the failure) follows within milliseconds and writes in its own round trip,
        or the next subject's call opens its rows with (a write in between cost each attempt
        a round trip and the attempt row's lock, for rows readable a few ms earlier)."""
        with self._lock:
            self._pending.append(self._row(event))
            if not hold and time.monotonic() - self._last_write >= EVENT_FLUSH_SECONDS:
                self._write_locked()

    def write_with(self, statements: Sequence[Statement]) -> BatchResults:
        """Write every event so far, then ``statements`` (the rows a source call opens), in one
        round trip and one transaction, only while the attempt still runs under this lease:
        the round trip share-locks the attempt's row, so the reaper's interruption
        waits for it and then finishes these rows too. Returns the statements' results.

        Once the lease is lost, nothing more is written and ``LeaseLost`` is raised: the call
        is not sent (its attempt's outcome is the reaper's), and no row can be left ``running``
        by an attempt the reaper has already interrupted."""
        with self._lock:
            if self.lease_lost:
                raise LeaseLost(str(self.attempt_id))
            rows, self._pending = self._pending, []
            self._last_write = time.monotonic()
            if rows:  # under the log's lock: rows land in sequence order
                return self._open(rows, statements)
        # No event to order them after: other subjects' calls need not wait for this one.
        return self._open([], statements)

    def still_leased(self) -> None:
        """Before a call whose rows were opened earlier is sent (it waited for its limits with
        them open): raises ``LeaseLost`` if the reaper has interrupted the attempt since, as
        the opening would have. The reaper interrupts only an attempt whose lease ran out, so
        while the lease this worker last set (at the claim, then at each renewal) has more
        than a third of its length left (the heartbeat renews it at each third), nothing is
        asked; past that (the worker stalled, or its renewals failed), the guard is asked in
        a round trip of its own."""
        if self.lease_lost:
            raise LeaseLost(str(self.attempt_id))
        expires = self._attempt.lease_expires_at
        margin = timedelta(seconds=renewal_seconds())
        if expires is not None and timezone.now() < expires - margin:
            return
        with self._lease_refusal():
            send_batch([_lease_statement(self.attempt_id, self.lease_owner, guard=True)])

    @contextmanager
    def _lease_refusal(self) -> Iterator[None]:
        """The guard's refusal (the attempt no longer ours) as ``LeaseLost``, remembered."""
        try:
            yield
        except DatabaseError as exc:
            if refusal_of(exc) != "lease_lost":
                raise
            self.lease_lost = True
            raise LeaseLost(str(self.attempt_id)) from None

    def _open(self, rows: list[AttemptEvent], statements: Sequence[Statement]) -> BatchResults:
        guard = _lease_statement(self.attempt_id, self.lease_owner, guard=True)
        with self._lease_refusal():
            try:
                events = list(EVENT_ROWS.statements([_event_tuple(r) for r in rows]))
                return _opening(guard, events, statements)
            except DatabaseError as exc:
                if not rows or refusal_of(exc):
                    raise
                # Written apart (still under the lock): the events (one by one if they are
                # refused), then the call's rows, whose own error propagates.
                connection.close_if_unusable_or_obsolete()
                self._pending = rows
                self._write_locked()
                return _opening(guard, [], statements)

    def flush_if_due(self) -> None:
        """Write what is pending if the last write is older than the batching window (at the end
        of a subject: a turn of many LLM-free subjects then writes one batch per window, not one
        transaction per subject)."""
        with self._lock:
            if self._pending and time.monotonic() - self._last_write >= EVENT_FLUSH_SECONDS:
                self._write_locked()

    def finish(self, event: StagedEvent) -> None:
        """The outcome event and everything not yet written, inside the caller's transaction
        (the commit or the failure), which has already checked the lease; a database error
        propagates to it."""
        with self._lock:
            self._pending.append(self._row(event))
            rows, self._pending = self._pending, []
            _insert(rows)

    @contextmanager
    def finishing(self, event: StagedEvent) -> Iterator[list[tuple[Any, ...]]]:
        """``finish`` for a caller that writes the rows in statements of its own (the commit, in
        one round trip): yields everything not yet written and the outcome event, as
        ``EVENT_ROWS`` tuples; if the caller fails, they stay pending (the outcome's number free
        again) for the failure to write."""
        with self._lock:
            seq = self._next_seq
            rows = [*self._pending, self._row(event)]
            try:
                yield [_event_tuple(r) for r in rows]
            except BaseException:
                self._next_seq = seq
                raise
            self._pending = []

    def discard_pending(self) -> int:
        """Drop what is not written yet (it could not be written); returns how many."""
        with self._lock:
            dropped = len(self._pending)
            self._pending = []
            return dropped

    def _row(self, event: StagedEvent) -> AttemptEvent:
        seq = self._next_seq
        self._next_seq += 1
        return AttemptEvent(
            attempt_id=self.attempt_id,
            seq=seq,
            kind=event.kind,
            subject_id=event.subject_id,
            node_id=event.node_id,
            workflow_hash=event.workflow_hash,
            patch_seq=event.patch_seq,
            payload=event.payload,
            content_hash=event.content_hash,
            invocation_id=event.invocation_id,
            llm_call_id=event.llm_call_id,
            created_at=event.at,
        )

    def _write_locked(self) -> None:
        rows, self._pending = self._pending, []
        self._last_write = time.monotonic()
        if not rows or self.lease_lost:
            return
        # One statement (its own transaction, not waiting for the WAL flush): the lease's guard
        # and the rows, instead of a transaction of four round trips.
        guard = _lease_statement(self.attempt_id, self.lease_owner, guard=True)
        events = list(EVENT_ROWS.statements([_event_tuple(r) for r in rows]))
        try:
            with transaction.atomic() if connection.in_atomic_block else nullcontext():
                send_combined([(SYNC_COMMIT_OFF, []), guard], events)
        except DatabaseError as exc:
            if refusal_of(exc) == "lease_lost":
                self.lease_lost = True
                return
            self._write_one_by_one(rows, exc)

    def _write_one_by_one(self, rows: list[AttemptEvent], exc: DatabaseError) -> None:
        """A batch the database refused: keep every row it accepts, so one bad payload loses
        one event, and remember that the attempt cannot be committed."""
        connection.close_if_unusable_or_obsolete()
        lost = 0
        for row in rows:
            try:
                with _event_write():
                    _insert([row])
            except DatabaseError:
                connection.close_if_unusable_or_obsolete()
                lost += 1
        if lost:
            logger.warning(
                "attempt %s: %d event(s) could not be written (%s)",
                self.attempt_id,
                lost,
                type(exc).__name__,
            )
            self.failure = (
                f"{lost} event(s) could not be stored ({type(exc).__name__}); "
                "the turn is not committed without its full timeline"
            )
