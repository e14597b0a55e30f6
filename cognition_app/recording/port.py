"""The recording port: where the rows of a source call are written, whoever made the call.

A call's rows are written by its :class:`~cognition_app.recording.calls.CallRecord` (or
:class:`~cognition_app.recording.generations.GenerationRecord`), which builds every statement;
the :class:`Recorder` it was given decides only *how* they reach the database:

- :meth:`Recorder.open` writes the rows a call opens, before any byte is sent, committed
  durably (a crash of PostgreSQL itself must not take back the row of a request that went out);
- :meth:`Recorder.finish` writes the rows of a call that succeeded, then calls ``after`` (which
  gives its budget reservation back) — possibly later, on a writer thread, while the caller goes
  on.

Failures, cancellations and streamed chunks are written at once by the record itself, with
:func:`trace_batch`. Two recorders exist: :data:`DIRECT` (this module: calls outside any
attempt, such as a metric's judge) and the attempt's (``worlds_app.services.attempt_recorder``:
the attempt's pending events and lease check with each opening, its writer thread for the
finishing writes, and the barrier its commit and its failure wait on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from django.db import connection, transaction

from cognition_app.rows import BatchResults, Statement, send_batch


class Recorder(Protocol):
    """How a call's rows reach the database (see the module's docstring)."""

    def open(self, statements: Sequence[Statement]) -> BatchResults:
        """Write the rows a call opens (or the rows of a call that never went out, already
        finished), durably, before any byte is sent; returns each statement's rows (a SELECT's,
        an ``… RETURNING``'s), else None."""
        ...

    def finish(self, statements: Sequence[Statement], after: Callable[[], None] | None) -> None:
        """Write the statements finishing a call that succeeded, then call ``after`` (whether
        or not the write succeeded)."""
        ...

    def still_open(self) -> None:
        """A call whose rows were opened before it waited for its limits is about to be sent:
        raises as :meth:`open` would, were they opened now."""
        ...


class DirectRecorder:
    """Writes everything at once, on the caller's connection: the recorder of a call made
    outside any attempt."""

    def open(self, statements: Sequence[Statement]) -> BatchResults:
        return send_batch(statements)  # committed durably, as an attempt's openings are

    def finish(self, statements: Sequence[Statement], after: Callable[[], None] | None) -> None:
        try:
            trace_batch(statements)
        finally:
            if after is not None:
                after()

    def still_open(self) -> None:
        return None  # no lease: an opening is never refused


DIRECT = DirectRecorder()


def trace_batch(statements: Sequence[Statement]) -> BatchResults:
    """Trace writes in one round trip and one transaction (the caller's, if one is open), with
    ``synchronous_commit`` off for that transaction (``cognition_app.rows.send_batch``).

    Committed rows are visible to every other session at once (the reviewer's timeline, the
    reaper); only a crash of the PostgreSQL server itself could lose the last few hundred
    milliseconds of them — a worker crash loses nothing. What such a crash loses is what a
    worker crash at the same moment would lose: a call's opening is durable
    (:meth:`Recorder.open`), so a lost finishing write leaves its row ``running`` for the
    reaper, and a turn's commit is synchronous, which flushes every trace write before it.

    Returns, per statement, the rows it returned (a SELECT, an ``… RETURNING``), else None."""
    if not statements:
        return []
    return send_batch([(SYNC_COMMIT_OFF, []), *statements])[1:]


@contextmanager
def trace_write() -> Iterator[None]:
    """:func:`trace_batch`'s transaction for ORM writes (the rare paths: a row finished after an
    internal error, the rows an ended attempt left open)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(SYNC_COMMIT_OFF)
        yield


# For the batch's transaction only (is_local). Not ``SET LOCAL``: outside a transaction block (a
# pipeline's implicit transaction, on the writer thread or a subject's autocommit connection) it
# takes effect too, but PostgreSQL warns, to the client and into its log, once per batch.
SYNC_COMMIT_OFF = "SELECT set_config('synchronous_commit', 'off', true)"
