"""Settling experiment budget reservations, on a thread of its own.

A call's reservation is settled once its finished rows are written (its real spend known).
That used to run on the process's trace-writer thread, as an ``UPDATE`` of the experiment's
row that every worker's calls also write, so unrelated worlds' finishing rows waited behind
its lock. Now the writer only hands the settle here: this thread (one per process, started at
the first settle, its own connection) settles what queued up together, having waited
``LINGER_SECONDS`` for more unless somebody waits for them, in **one** statement (each
reservation row deleted, its experiment's ledger row given back what it reserved and counted
what the call's own row says it spent), so a burst of calls writes the ledger once.

A settle is counted exactly once: the statement only counts the reservations it deleted. It
counts what the call's row says, not what the worker saw, so a finishing write that was lost
(PostgreSQL down) is not counted either: the ledger always equals the rows. If this process
dies first, the reservation rows stay, and the reaper settles them with the same statement
(``settle_leaked``).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from uuid import UUID

from django.db import DatabaseError, connection

from cognition_app.models import LlmCall
from scenarios_app.sql_rows import fetch_tuples
from worlds_app.models import BudgetReservation, ExperimentLedger

logger = logging.getLogger(__name__)

MAX_PER_BATCH = 256


def settle_now(reservation_ids: Sequence[UUID]) -> int:
    """Settle these reservations in one statement on this thread's connection: each one's
    row deleted, its ledger given back what it reserved and counting what its call's own row
    (``LlmCall``, the same id) says the call spent — nothing when the row has no usage (the
    call never finished, or its finishing write was lost). Returns how many it found (one
    settled already, by the reaper or the settler, counts nothing again)."""
    if not reservation_ids:
        return 0
    res = connection.ops.quote_name(BudgetReservation._meta.db_table)
    ledger = connection.ops.quote_name(ExperimentLedger._meta.db_table)
    calls = connection.ops.quote_name(LlmCall._meta.db_table)
    # one statement (its own transaction), bound server-side: prepared once on the settler's
    # connection
    rows = fetch_tuples(
        f"WITH d AS (DELETE FROM {res} r WHERE r.id = ANY(%s::uuid[]) "  # noqa: S608
        "RETURNING r.id, r.experiment_id, r.tokens, r.cost), "
        "s AS (SELECT d.experiment_id, SUM(d.tokens) AS rt, SUM(d.cost) AS rc, "
        "SUM(COALESCE(c.prompt_tokens, 0) + COALESCE(c.completion_tokens, 0)) AS st, "
        "SUM(COALESCE(c.cost, 0)) AS sc, COUNT(*) AS n "
        f"FROM d LEFT JOIN {calls} c ON c.id = d.id GROUP BY d.experiment_id), "
        f"u AS (UPDATE {ledger} l SET reserved_tokens = l.reserved_tokens - s.rt, "
        "reserved_cost = l.reserved_cost - s.rc, spent_tokens = l.spent_tokens + s.st, "
        "spent_cost = l.spent_cost + s.sc FROM s WHERE l.experiment_id = s.experiment_id "
        "RETURNING s.n) "
        "SELECT COALESCE(SUM(n), 0) FROM u",
        [list(reservation_ids)],
    )
    return int(rows[0][0]) if rows else 0


# A settle waits this long for others to come in and be written with it (a busy experiment's
# calls end every few milliseconds: one statement, one update of its ledger row, for several),
# unless somebody waits for it (``flush``).
LINGER_SECONDS = 0.05


class _Hurry:
    """Put by ``flush``: write what has come in now."""


HURRY = _Hurry()


class _Settler:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[UUID | _Hurry | None] = queue.SimpleQueue()
        self.pending = 0
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="chukwa-budget-settler", daemon=True)
        self.thread.start()

    def put(self, settle: UUID) -> None:
        with self.cond:
            self.pending += 1
        self.jobs.put(settle)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            job = self.jobs.get()
            batch: list[UUID] = []
            lingering_until = time.monotonic() + LINGER_SECONDS
            while isinstance(job, UUID):
                batch.append(job)
                if len(batch) == MAX_PER_BATCH:
                    break
                try:
                    job = self.jobs.get(timeout=max(lingering_until - time.monotonic(), 0))
                except queue.Empty:
                    break
            stopping = job is None
            if batch:
                self._settle(batch)
        connection.close()

    def _settle(self, batch: list[UUID]) -> None:
        try:
            for _ in range(2):  # once more after a reconnect; else the reaper's, if it dies
                try:
                    settle_now(batch)
                    break
                except DatabaseError as exc:
                    logger.warning("budget settler: refused (%s)", type(exc).__name__)
                    connection.close_if_unusable_or_obsolete()
        except Exception as exc:  # a bug must not stop the thread
            logger.exception("budget settler: %s", type(exc).__name__)
        finally:
            with self.cond:
                self.pending -= len(batch)
                self.cond.notify_all()

    def flush(self) -> None:
        with self.cond:
            if self.pending:
                self.jobs.put(HURRY)  # not to wait out the linger
            while self.pending and self.thread.is_alive():
                self.cond.wait(timeout=1.0)


_lock = threading.Lock()
_current: _Settler | None = None


def _settler() -> _Settler:
    global _current
    with _lock:
        if _current is None:
            _current = _Settler()
        return _current


def settle_later(reservation_id: UUID) -> None:
    """Hand one settle to the process's settler thread (returns at once); call it once the
    call's finishing rows are written (or could not be)."""
    _settler().put(reservation_id)


def flush() -> None:
    """Wait until every settle handed over so far is written (an attempt's end, a test)."""
    settler = _current
    if settler is not None:
        settler.flush()


def close() -> None:
    """Stop the thread once it settled what it was given (the next settle starts a new one)."""
    global _current
    with _lock:
        settler, _current = _current, None
    if settler is not None:
        settler.jobs.put(None)
        settler.thread.join()


def _forget_in_child() -> None:
    global _current
    _current = None


os.register_at_fork(after_in_child=_forget_in_child)
