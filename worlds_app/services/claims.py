"""Claiming a turn attempt (queued → running, with a lease) and keeping its lease.

A claim is one statement, one round trip: under the world's row lock, the attempt becomes
running if it is queued, the world's next (no queued attempt of the world before it) and nothing
of the world runs — the partial unique index on running attempts backs that rule. The same
statement returns what the run needs: the attempt, the world (its scenario snapshot read once),
the budget in force (read once per attempt: a budget changed while the attempt runs applies from
the next one) and the turn the attempt starts from.

The next attempt of a batch is claimed inside the commit of the attempt before it
(``turn_commit.py``) by a shorter statement (``_CLAIM_FOLLOWER_SQL``: the commit's checks make the
rest of the conditions hold); the world and the turn it starts from are already in hand, the
budget in force comes with the claim. See ``attempts.turn_attempt_run``.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.utils import timezone

from cognition_app.budgets import BudgetLimits
from cognition_app.model_rows import columns, concrete_fields, instance, quoted, split
from cognition_app.rows import Statement, send_one
from worlds_app.models import AttemptStatus, Turn, TurnAttempt, World, WorldBudget
from worlds_app.selectors import BUDGET_LIMITS, budget_limits_of
from worlds_app.services.dispatch import kick_on_commit

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another party (the reaper) took the attempt away; nothing may be written for it."""


def refusal_of(exc: DatabaseError) -> str:
    """The reason ``worlds_app_refuse_unless`` (migration 0010) refused a statement with, or
    ''."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) != "P0001":
        return ""
    return str(getattr(getattr(cause, "diag", None), "message_primary", "") or "")


def lease_seconds() -> int:
    return int(getattr(settings, "CHUKWA_ATTEMPT_LEASE_SECONDS", 60))


def renewal_seconds() -> float:
    """How often a heartbeat renews its lease: at each third of it (at least every second). A
    lease with more than this left cannot have run out before its next renewal was due."""
    return max(1.0, lease_seconds() / 3)


@dataclass
class Claim:
    """A claimed attempt (``attempt.world`` set) and what its run starts from."""

    attempt: TurnAttempt
    limits: BudgetLimits | None
    # the committed turn it starts from (None only if the world lacks it: the run reports that)
    previous: Turn | None


_ATTEMPT_FIELDS = concrete_fields(TurnAttempt)
_WORLD_FIELDS = concrete_fields(World)
# What a follower re-reads of the world its predecessor ran with (columns that can change).
_WORLD_CHANGEABLE = concrete_fields(World, ["slug", "replay_source", "pending_interventions"])
_BUDGET_FIELDS = concrete_fields(WorldBudget, list(BUDGET_LIMITS))
_TURN_FIELDS = concrete_fields(
    Turn, ["id", "world", "number", "simulation_time", "state", "state_hash"]
)


_WORLD, _ATTEMPT = quoted(World._meta.db_table), quoted(TurnAttempt._meta.db_table)
# The budget in force: the newest row (joined LATERAL to the world ``w``).
_BUDGET_JOIN = f"""LEFT JOIN LATERAL (
    SELECT * FROM {quoted(WorldBudget._meta.db_table)} WHERE world_id = w.id
    ORDER BY set_at DESC, id DESC LIMIT 1
) b ON true"""  # noqa: S608

# The first attempt a task runs, by id: under the world's row lock, queued, the world's head
# (no queued attempt before it) and nothing of the world running. Returns the attempt, every
# column of the world, the budget in force and the turn the attempt starts from.
# Identifiers from the models, quoted; every value is a parameter.
_CLAIM_FIRST_SQL = f"""
WITH w AS (
    SELECT * FROM {_WORLD} WHERE id = (SELECT world_id FROM {_ATTEMPT} WHERE id = %s)
    FOR UPDATE
), c AS (
    UPDATE {_ATTEMPT} AS a
    SET status = 'running', attempted_turn = w.current_turn + 1, lease_owner = %s,
        lease_expires_at = %s, started_at = %s
    FROM w
    WHERE a.id = %s AND a.world_id = w.id AND a.status = 'queued'
      AND NOT EXISTS (
        SELECT 1 FROM {_ATTEMPT} r WHERE r.world_id = w.id AND r.status = 'running')
      AND NOT EXISTS (
        SELECT 1 FROM {_ATTEMPT} q
        WHERE q.world_id = w.id AND q.status IN ('queued', 'waiting') AND q.seq < a.seq)
    RETURNING a.*
)
SELECT {columns("c", _ATTEMPT_FIELDS)}, {columns("w", _WORLD_FIELDS)}, {columns("b", _BUDGET_FIELDS)},
    {columns("t", _TURN_FIELDS)}
FROM c CROSS JOIN w
{_BUDGET_JOIN}
LEFT JOIN {quoted(Turn._meta.db_table)} t ON t.world_id = w.id AND t.number = w.current_turn
"""  # noqa: S608

# The next attempt of a batch (``seq`` + 1, the unique index), claimed in the transaction that
# commits the attempt before it, after that attempt is committed and its world advanced: that
# transaction holds the world's row lock, and its checks (the lease of the running attempt,
# the world's turn) already make the claim's conditions hold — nothing else of the world runs
# (that attempt did, alone: the partial unique index), and no queued attempt precedes
# ``seq`` + 1 (that attempt was the head when claimed; later attempts get higher numbers). So
# only "queued" is checked here. Returns the attempt, the world's changeable columns and the
# budget in force.
_CLAIM_FOLLOWER_SQL = f"""
WITH c AS (
    UPDATE {_ATTEMPT}
    SET status = 'running', attempted_turn = %s, lease_owner = %s, lease_expires_at = %s,
        started_at = %s
    WHERE world_id = %s AND seq = %s AND batch_id = %s AND status = 'queued'
    RETURNING *
)
SELECT {columns("c", _ATTEMPT_FIELDS)}, {columns("w", _WORLD_CHANGEABLE)}, {columns("b", _BUDGET_FIELDS)}
FROM c JOIN {_WORLD} w ON w.id = c.world_id
{_BUDGET_JOIN}
"""  # noqa: S608


# The id of the attempt after one in its batch while it is queued: read by a commit that does
# not claim it, so its task is sent without looking the world's head up after the commit.
_NEXT_QUEUED_SQL = f"""SELECT id FROM {_ATTEMPT}
WHERE world_id = %s AND seq = %s AND batch_id = %s AND status = 'queued'"""  # noqa: S608


def _lease_params(owner: str, now: datetime | None = None) -> list[Any]:
    now = now or timezone.now()
    return [owner, now + timedelta(seconds=lease_seconds()), now]


def follower_statement(attempt: TurnAttempt, turn: int, owner: str, now: datetime) -> Statement:
    """The claim of the attempt after ``attempt`` in its batch (to produce ``turn``), started at
    ``now``, for the transaction that commits ``attempt``: after its checks (see above)."""
    return _CLAIM_FOLLOWER_SQL, [
        turn,
        *_lease_params(owner, now),
        attempt.world_id,
        attempt.seq + 1,
        attempt.batch_id,
    ]


def next_queued_statement(attempt: TurnAttempt) -> Statement:
    """The id of the attempt after ``attempt`` in its batch, if it is queued (no row if not)."""
    return _NEXT_QUEUED_SQL, [attempt.world_id, attempt.seq + 1, attempt.batch_id]


def _limits(values: Any) -> BudgetLimits | None:
    budget = instance(WorldBudget, _BUDGET_FIELDS, values)
    return budget_limits_of(budget)


def claim_attempt(*, attempt_id: str, owner: str) -> Claim | None:
    """Claim the attempt for ``owner`` (one statement, autocommit). None (and nothing claimed)
    when it is not queued, not its world's next, or something of its world runs; a queued
    attempt refused only because an earlier one is queued kicks that one (its message may have
    been lost)."""
    try:
        # A statement is a transaction of its own; inside a caller's (a test's), a savepoint.
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            # bound server-side, so prepared on a connection that claims often (planning this
            # statement cost PostgreSQL ~2 ms, more than running it)
            rows = send_one((_CLAIM_FIRST_SQL, [attempt_id, *_lease_params(owner), attempt_id]))
            row = rows[0] if rows else None
    except IntegrityError:  # another attempt of the world got running first
        return None
    if row is None:
        _kick_head_if_stuck(attempt_id)
        return None
    attempt_values, world_values, budget_values, turn_values = split(
        row, _ATTEMPT_FIELDS, _WORLD_FIELDS, _BUDGET_FIELDS, _TURN_FIELDS
    )
    attempt = instance(TurnAttempt, _ATTEMPT_FIELDS, attempt_values)
    attempt.world = instance(World, _WORLD_FIELDS, world_values)
    previous = None if turn_values[0] is None else instance(Turn, _TURN_FIELDS, turn_values)
    return Claim(attempt, _limits(budget_values), previous)


def follower_claim(row: Any, before: Claim, turn: Turn) -> Claim:
    """The Claim of a follower from the row its claim statement returned: the world its
    predecessor ran with (the snapshot is not read again) with its changeable columns
    refreshed, and the turn that predecessor just committed, in memory."""
    attempt_values, world_values, budget_values = split(
        row, _ATTEMPT_FIELDS, _WORLD_CHANGEABLE, _BUDGET_FIELDS
    )
    attempt = instance(TurnAttempt, _ATTEMPT_FIELDS, attempt_values)
    world = before.attempt.world
    for field, value in zip(_WORLD_CHANGEABLE, world_values, strict=True):
        setattr(world, field.attname, value)
    world.current_turn = turn.number
    attempt.world = world
    return Claim(attempt, _limits(budget_values), turn)


def _kick_head_if_stuck(attempt_id: str) -> None:
    """Claims nothing: if the attempt is queued behind a queued head while nothing of its world
    runs, that head's message may be lost — hand it out again."""
    row = TurnAttempt.objects.filter(pk=attempt_id).values("world_id", "status").first()
    if row is None or row["status"] != AttemptStatus.QUEUED:
        return
    world_attempts = TurnAttempt.objects.filter(world_id=row["world_id"])
    if world_attempts.filter(status=AttemptStatus.RUNNING).exists():
        return
    head = (
        world_attempts.filter(status=AttemptStatus.QUEUED)
        .order_by("seq")
        .values_list("id", flat=True)
        .first()
    )
    if head is not None and str(head) != str(attempt_id):
        kick_on_commit(row["world_id"])  # outside a transaction: sent at once


# --- the lease ----------------------------------------------------------------------------


def renew_lease(attempt: TurnAttempt) -> None:
    """Renew the attempt's lease, or raise LeaseLost; the instance keeps the new expiry (what
    its calls' ``EventLog.still_leased`` goes by)."""
    expires = _now() + timedelta(seconds=lease_seconds())
    renewed = TurnAttempt.objects.filter(
        pk=attempt.pk, status=AttemptStatus.RUNNING, lease_owner=attempt.lease_owner
    ).update(lease_expires_at=expires)
    if not renewed:
        raise LeaseLost(str(attempt.pk))
    attempt.lease_expires_at = expires


def _now() -> datetime:
    return timezone.now()


class Heartbeat:
    """Renews the lease of the row it follows from a background thread while it works (LLM
    calls can take longer than a lease): a turn attempt by default (``renew_lease``), or any
    leased row with its own ``renew`` (an interview), which raises LeaseLost once the row is no
    longer this worker's. One thread for all the attempts a task runs in a row (``follow``
    moves it to the next). If the worker dies, so does the heartbeat, and the reaper takes over
    once the lease expires."""

    def __init__(self, attempt: Any, renew: Callable[[Any], None] | None = None) -> None:
        self._attempt = attempt
        self._renew = renew or renew_lease
        self._lost: set[Any] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # In a copy of the caller's context, so its log lines carry the attempt's ids too.
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._beat,),
            name=f"lease-{attempt.pk}",
            daemon=True,
        )

    @property
    def lost(self) -> bool:
        """Whether the row it follows now lost its lease."""
        with self._lock:
            return self._attempt.pk in self._lost

    def follow(self, attempt: TurnAttempt) -> None:
        with self._lock:
            self._attempt = attempt

    def _beat(self) -> None:
        try:
            while not self._stop.wait(renewal_seconds()):
                with self._lock:
                    attempt = self._attempt
                try:
                    self._renew(attempt)
                except LeaseLost:
                    with self._lock:
                        self._lost.add(attempt.pk)
                except (OperationalError, InterfaceError) as exc:
                    # A database blip must not silence the heartbeat: the attempt may well
                    # survive it, and a dead heartbeat would let the reaper interrupt a live
                    # attempt. Drop the broken connection so the next beat opens a fresh one.
                    logger.warning(
                        "%s %s: lease renewal failed (%s); retrying at the next beat",
                        type(attempt).__name__,
                        attempt.pk,
                        type(exc).__name__,
                    )
                    connection.close()
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
