"""Finishing a call's rows while its subject goes on (written as soon as today, waited
for later).

A call's finishing statements (its rows ``succeeded``, the last chunks, the verdict) are handed
to the process's writer thread the moment they are built, and the subject goes on with what it
does next (applying the patch, the next tool call) instead of waiting for the round trip. The
thread writes them as soon as it runs — at once when the subject waits on I/O (its next call),
else within CPython's switch interval (5 ms) — on its own database connection, in one
transaction per batch, ``synchronous_commit`` off like every trace write; a worker crash can
lose only what was built in those few milliseconds, as it could lose a write in flight before.
Whoever needs them written waits for them, and writes itself what the thread has not taken yet:
an attempt :meth:`TraceWriter.drain`\\ s before it records its failure, so a failed attempt's
"close what is still running" never overwrites a call that succeeded; its commit
(:meth:`TraceWriter.held`) waits for what the thread took and sends what it has not taken in
the commit's own transaction, so a committed turn's calls are all finished rows.

Writes that arrive together (concurrent subjects) go in one round trip. A batch the database
refuses is sent again job by job, each once more after a reconnect; a job that still fails is
the attempt's failure (its rows stay ``running`` until the failure closes them).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import DatabaseError, connection

from cognition_app.recording.port import trace_batch
from cognition_app.rows import Statement

logger = logging.getLogger(__name__)

# Jobs written in one round trip at most (what queued up while the last batch was written).
MAX_JOBS_PER_BATCH = 64


@dataclass
class _Job:
    owner: TraceWriter
    statements: list[Statement]
    after: Callable[[], None] | None


class TraceWriter:
    """One attempt's finishing writes, on the process's writer thread; thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queued: list[_Job] = []  # submitted, not yet taken by a writer
        self._pending = 0  # submitted, not yet written
        self.failure = ""  # why some finishing rows could not be written ("" if all were)

    def submit(self, statements: Sequence[Statement], after: Callable[[], None] | None) -> None:
        """Write ``statements`` (one transaction) on the writer thread — or in :meth:`drain`, if
        the thread has not taken them by then — then call ``after`` on the thread that wrote
        them (whether or not the write succeeded)."""
        job = _Job(self, list(statements), after)
        with self._cond:
            self._pending += 1
            self._queued.append(job)
        _writer().put(job)

    def drain(self) -> str:
        """Wait until everything submitted is written; returns why something could not be
        (``""`` when all was). Jobs the writer thread has not taken yet are written here, by
        the caller, at once (the thread may not have been scheduled since they came)."""
        with self._cond:
            mine, self._queued = self._queued, []
        if mine:
            _write(mine)
        return self._wait(0)

    @contextmanager
    def held(self) -> Iterator[Held]:
        """For a caller that writes in one transaction of its own (a turn's commit, in one round
        trip): waits until the writer thread wrote what it took, then yields the statements of
        the jobs it has not taken yet (the subject's last call, usually: the thread had no turn
        since) and why something could not be written (``""`` when all was). The caller sends
        the statements in its transaction; when its block ends without an exception, those jobs
        are done. When it raises (or the wait is interrupted), they are written here on their
        own first, as :meth:`drain` would have; :attr:`failure` then says whether they could
        be."""
        with self._cond:
            mine, self._queued = self._queued, []
        held = Held([s for job in mine for s in job.statements])
        try:
            held.failure = self._wait(len(mine))
            yield held
        except BaseException:
            if mine:
                _write(mine)
            raise
        _finished(mine, dict.fromkeys(range(len(mine)), ""))

    def _wait(self, mine: int) -> str:
        """Wait until only the caller's ``mine`` jobs are left unwritten; returns
        :attr:`failure`."""
        with self._cond:
            while self._pending > mine:
                self._cond.wait(timeout=1.0)
                writer = _current
                if self._pending > mine and (writer is None or not writer.is_alive()):  # never:
                    self.failure = self.failure or "the trace writer thread stopped"  # the thread
                    break  # catches all
            return self.failure

    def _take(self, job: _Job) -> bool:
        """Is ``job`` the writer thread's to write (not taken by :meth:`drain`)?"""
        with self._cond:
            try:
                self._queued.remove(job)
            except ValueError:
                return False
            return True

    def _done(self, failure: str) -> None:
        with self._cond:
            self._pending -= 1
            if failure and not self.failure:
                self.failure = failure
            self._cond.notify_all()


@dataclass
class Held:
    """What :meth:`TraceWriter.held` yields."""

    statements: list[Statement] = field(default_factory=list)
    failure: str = ""


class _Writer:
    """The writer thread of this process, started at the first job, on its own database
    connection until :func:`close` (a forked child starts its own: threads do not survive a
    fork)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="chukwa-trace-writer", daemon=True)
        self.thread.start()

    def put(self, job: _Job) -> None:
        self.jobs.put(job)

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            jobs: list[_Job] = []
            first = self.jobs.get()
            while first is not None:
                jobs.append(first)
                if len(jobs) == MAX_JOBS_PER_BATCH:
                    break
                try:
                    first = self.jobs.get_nowait()
                except queue.Empty:
                    break
            stopping = first is None
            mine = [job for job in jobs if job.owner._take(job)]
            if mine:
                _write(mine)
        connection.close()


def _write(jobs: list[_Job]) -> None:
    """The jobs in one transaction (on the calling thread's connection), else one by one, each
    once more if it failed (after a reconnect, if the connection broke); then each job's
    ``after`` and its writer told."""
    failures = dict.fromkeys(range(len(jobs)), "")
    try:
        if len(jobs) == 1 or not _send([s for job in jobs for s in job.statements]):
            for index, job in enumerate(jobs):  # alone, so one refused job fails alone
                if not _send(job.statements) and not _send(job.statements):
                    failures[index] = (
                        "the finishing trace rows of a source call could not be written"
                    )
    except Exception as exc:  # a bug must not stop the thread: its jobs fail instead
        logger.exception("trace writer: %s", type(exc).__name__)
        failures = dict.fromkeys(failures, f"the trace writer failed: {type(exc).__name__}")
    _finished(jobs, failures)


def _finished(jobs: list[_Job], failures: dict[int, str]) -> None:
    """Each job's ``after``, then its writer told (with why it could not be written)."""
    for index, job in enumerate(jobs):
        try:
            if job.after is not None:
                job.after()
        except Exception:
            logger.exception("trace writer: a job's completion failed")
        finally:
            job.owner._done(failures[index])


def _send(statements: list[Statement]) -> bool:
    """One transaction; False (logged, the connection reset if it broke) when it failed."""
    try:
        trace_batch(statements)
        return True
    except DatabaseError as exc:
        logger.warning("trace writer: a batch was refused (%s)", type(exc).__name__)
        connection.close_if_unusable_or_obsolete()
        return False


_lock = threading.Lock()
_current: _Writer | None = None


def _writer() -> _Writer:
    global _current
    with _lock:
        if _current is None:
            _current = _Writer()
        return _current


def close() -> None:
    """Stop the writer thread once it has written what it was given, closing its connection
    (the next job starts a new one)."""
    global _current
    with _lock:
        writer, _current = _current, None
    if writer is not None:
        writer.stop()


def _forget_writer_in_child() -> None:
    global _current
    _current = None


os.register_at_fork(after_in_child=_forget_writer_in_child)
