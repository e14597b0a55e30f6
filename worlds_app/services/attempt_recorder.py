"""The recorder of one attempt's source calls (``cognition_app.recording``'s port, inside a turn).

It owns what a call's rows must be written with while a turn runs:

- **the lease and the events**: a call's rows are opened in the round trip that writes the
  attempt's pending events first (a reader of the timeline never sees a call whose preceding
  events are missing) and that share-locks the attempt's row, still running under this worker's
  lease (``EventLog.write_with``): once the reaper has interrupted the attempt, no call opens
  and nothing more is written for it; a call that opened its rows before it waited for its
  limits asks again before it is sent if its lease could have run out meanwhile
  (``EventLog.still_leased``);
- **the writer thread**: a call that succeeded is finished on the process's trace writer while
  its subject goes on (``cognition_app.recording.write_behind``);
- **the barriers**: the commit writes what the thread has not taken yet in its own transaction
  and waits for the rest (:meth:`AttemptRecorder.before_commit`), so a committed turn's calls are
  all finished rows; the failure path waits for every finishing write before it closes what
  still runs (:meth:`AttemptRecorder.ended`), so "close what is still running" never overwrites
  a call that succeeded.

The commit (``turn_commit``) and the failure path (``attempts``) talk to the attempt's calls
through this object only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from django.db import DatabaseError, connection

from cognition_app.recording import TraceWriter, finish_running, trace_batch
from cognition_app.rows import BatchResults, Statement
from cognition_app.subject_run import AttemptFailure
from worlds_app.models import TurnAttempt
from worlds_app.services.events import EventLog


class AttemptRecorder:
    """One attempt's recorder: its event log, its lease check and its finishing writes."""

    def __init__(self, attempt: TurnAttempt) -> None:
        self.attempt_id = attempt.pk
        self.events = EventLog(attempt)
        self._traces = TraceWriter()

    # --- the port (cognition_app.recording.Recorder) ----------------------------------------

    def open(self, statements: Sequence[Statement]) -> BatchResults:
        return self.events.write_with(statements)

    def finish(self, statements: Sequence[Statement], after: Callable[[], None] | None) -> None:
        """On the writer thread; inside a transaction, now and in it (another connection could
        not see the rows these finish)."""
        if not connection.in_atomic_block:
            self._traces.submit(statements, after)
            return
        try:
            trace_batch(statements)
        finally:
            if after is not None:
                after()

    def still_open(self) -> None:
        self.events.still_leased()

    # --- what the commit and the failure path ask -------------------------------------------

    @contextmanager
    def before_commit(self) -> Iterator[list[Statement]]:
        """The commit's barrier: waits for the finishing writes the writer thread took, and
        yields the statements of those it has not taken yet (usually the last call's: its
        subject had the thread wait for the interpreter since), which the commit sends in its
        own transaction — one round trip less. Raises ``AttemptFailure("traces")`` when some
        finishing rows could not be written, before the commit or because it failed."""
        try:
            with self._traces.held() as finishing:
                if finishing.failure:
                    raise AttemptFailure("traces", finishing.failure)
                yield finishing.statements
        except DatabaseError as exc:
            if self._traces.failure:  # what it held could not be written on its own either
                raise AttemptFailure("traces", self._traces.failure) from exc
            raise

    def ended(self) -> None:
        """The attempt ends without a commit (failed, or its lease lost): every finishing write
        is done when this returns, so nothing of the attempt is written after it ends."""
        self._traces.drain()

    def close_running(self, reason: str) -> int:
        """In the failure's transaction: rows the attempt left open become ``failed`` (normally
        none: each call finishes its own)."""
        return finish_running(attempt_id=self.attempt_id, reason=reason)
