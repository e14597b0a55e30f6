"""Running a turn's `concurrent` subjects at the same time (phase 1): on at most
``CHUKWA_MAX_CONCURRENT_SUBJECTS`` threads, stopped together when one fails.

Threads, because a subject spends its time waiting on sync HTTP (the source calls). They belong
to a pool that outlives the turn, so each keeps its own database connection (Django's are per
thread; ``CONN_MAX_AGE`` and health checks apply as to a request) instead of opening one per
subject per turn (the pool is per process, created at first use, dropped in a forked child). The first
subject to fail cancels the attempt's scope: the others stop at their next source call, their
open LLM streams are cut (their rows finished ``cancelled``), and no new subject starts. Every
thread has ended before this returns or raises, so nothing still writes for the attempt when it
is committed or failed: this waits for every one of its tasks.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections, connection

from cognition_app.batches import BatchPending
from cognition_app.sources import CANCELLED, CancelScope
from cognition_app.subject_run import AttemptFailure

R = TypeVar("R")


def max_concurrent_subjects() -> int:
    return int(getattr(settings, "CHUKWA_MAX_CONCURRENT_SUBJECTS", 16))


class _Thread:
    """One thread of the pool: runs the tasks it is given, one at a time, on its own database
    connection, until told to stop (then it closes that connection)."""

    def __init__(self, number: int) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"subjects-{number}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (task := self._tasks.get()) is not None:
            task()
        connection.close()

    def submit(self, task: Callable[[], None]) -> None:
        self._tasks.put(task)

    def stop(self) -> None:
        self._tasks.put(None)
        self._thread.join()


class _Pool:
    """Threads kept between turns; a turn takes as many as it needs and gives them back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Thread] = []
        self._count = 0

    def run(self, tasks: Sequence[Callable[[], None]]) -> None:
        """Run every task on its own thread; return when all have ended."""
        with self._lock:
            taken = [self._idle.pop() for _ in range(min(len(tasks), len(self._idle)))]
            while len(taken) < len(tasks):
                self._count += 1
                taken.append(_Thread(self._count))
        done = [threading.Event() for _ in tasks]
        for thread, task, event in zip(taken, tasks, done, strict=True):
            thread.submit(_signalling(task, event))
        for event in done:
            event.wait()
        with self._lock:
            self._idle.extend(taken)

    def close(self) -> None:
        """Stop the idle threads; each closes its connection (tests, before the test database
        is dropped)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for thread in idle:
            thread.stop()


def _signalling(task: Callable[[], None], event: threading.Event) -> Callable[[], None]:
    def run() -> None:
        try:
            task()
        finally:
            event.set()

    return run


_pool = _Pool()


def close_pool() -> None:
    _pool.close()


def _forget_pool_in_child() -> None:
    # A forked child (a prefork Celery worker) has none of the parent's threads.
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def think_concurrently(
    subjects: Sequence[dict[str, Any]],
    think: Callable[[dict[str, Any]], R],
    *,
    cancel: CancelScope,
    bound: int | None = None,
) -> list[R]:
    """``think(subject)`` for every subject, at most ``bound`` at a time; the results in the
    order of ``subjects``. If any raises, the rest are stopped and the failure that stopped them
    is raised (not the cancellations it caused). A subject whose call waits in a provider batch
    (``BatchPending``, batch mode) stops no one: once all have thought or asked, the first
    ``SubjectsPending`` is raised carrying every one's ``request_ids``."""
    limit = max(1, min(bound or max_concurrent_subjects(), len(subjects)))
    results: dict[int, R] = {}
    failures: list[BaseException] = []
    pending: list[BatchPending] = []
    lock = threading.Lock()
    queue = iter(range(len(subjects)))

    def work() -> None:
        try:
            while True:
                with lock:
                    if failures or cancel.cancelled:
                        return
                    index = next(queue, None)
                if index is None:
                    return
                subject = subjects[index]
                try:
                    result = think(subject)
                except BatchPending as exc:
                    # waiting in a provider batch (batch mode): the others go on to theirs, so
                    # that one tick's batch holds every subject's request
                    with lock:
                        pending.append(exc)
                    continue
                except BaseException as exc:  # noqa: BLE001 - recorded, re-raised by the caller
                    with lock:
                        failures.append(exc)
                    cancel.cancel(_reason(subject["id"], exc))
                    return
                with lock:
                    results[index] = result
        finally:
            # As after a request: this thread's connection is kept for its next task unless
            # it broke or is older than CONN_MAX_AGE.
            close_old_connections()

    def task() -> None:
        close_old_connections()  # as before a request: a broken or old connection is replaced
        work()

    # Each task in its own copy of the caller's context: log lines carry the attempt's ids.
    _pool.run([_in_context(contextvars.copy_context(), task) for _ in range(limit)])
    if failures:
        raise _first_cause(failures)
    if pending:  # the attempt parks until every one of them is answered
        raise SubjectsPending([p.request_id for p in pending])
    return [results[i] for i in range(len(subjects))]


class SubjectsPending(BatchPending):
    """Concurrent subjects' calls waiting in provider batches: every one's request."""

    def __init__(self, request_ids: list[Any]) -> None:
        super().__init__(
            request_ids[0], f"waiting for {len(request_ids)} batch request(s) of its subjects"
        )
        self.request_ids = request_ids


def _in_context(context: contextvars.Context, task: Callable[[], None]) -> Callable[[], None]:
    return lambda: context.run(task)


def _reason(subject_id: str, exc: BaseException) -> str:
    step = exc.step if isinstance(exc, AttemptFailure) else "internal_error"
    return f"subject {subject_id!r} failed ({step}); the attempt fails"


def _first_cause(failures: list[BaseException]) -> BaseException:
    """The failure that stopped the others: the first one that is not itself a stop."""
    for exc in failures:
        if not (isinstance(exc, AttemptFailure) and exc.step == CANCELLED):
            return exc
    return failures[0]
