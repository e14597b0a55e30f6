"""Running a turn's `concurrent` subjects at the same time (SPEC §4, phase 1): on at most
``CHUKWA_MAX_CONCURRENT_SUBJECTS`` threads, stopped together when one fails.

Threads, because a subject spends its time waiting on sync HTTP (the source calls). Each thread
has its own database connection (Django's are per thread) and closes it when it ends. The first
subject to fail cancels the attempt's scope: the others stop at their next source call, their
open LLM streams are cut (their rows finished ``cancelled``), and no new subject starts. Every
thread has ended before this returns or raises, so nothing still writes for the attempt when it
is committed or failed.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection

from cognition_app.sources import CANCELLED, CancelScope
from cognition_app.subject_run import AttemptFailure

R = TypeVar("R")


def max_concurrent_subjects() -> int:
    return int(getattr(settings, "CHUKWA_MAX_CONCURRENT_SUBJECTS", 8))


def think_concurrently(
    subjects: Sequence[dict[str, Any]],
    think: Callable[[dict[str, Any]], R],
    *,
    cancel: CancelScope,
    bound: int | None = None,
) -> list[R]:
    """``think(subject)`` for every subject, at most ``bound`` at a time; the results in the
    order of ``subjects``. If any raises, the rest are stopped and the failure that stopped them
    is raised (not the cancellations it caused)."""
    limit = max(1, min(bound or max_concurrent_subjects(), len(subjects)))
    results: dict[int, R] = {}
    failures: list[BaseException] = []
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
                except BaseException as exc:  # noqa: BLE001 - recorded, re-raised by the caller
                    with lock:
                        failures.append(exc)
                    cancel.cancel(_reason(subject["id"], exc))
                    return
                with lock:
                    results[index] = result
        finally:
            connection.close()  # this thread's own connection

    # Each thread in its own copy of the caller's context: log lines carry the attempt's ids.
    threads = [
        threading.Thread(
            target=contextvars.copy_context().run,
            args=(work,),
            name=f"subjects-{n}",
            daemon=True,
        )
        for n in range(limit)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise _first_cause(failures)
    return [results[i] for i in range(len(subjects))]


def _reason(subject_id: str, exc: BaseException) -> str:
    step = exc.step if isinstance(exc, AttemptFailure) else "internal_error"
    return f"subject {subject_id!r} failed ({step}); the attempt fails"


def _first_cause(failures: list[BaseException]) -> BaseException:
    """The failure that stopped the others: the first one that is not itself a stop."""
    for exc in failures:
        if not (isinstance(exc, AttemptFailure) and exc.step == CANCELLED):
            return exc
    return failures[0]
