"""Turn attempts: enqueue, claim, run, commit or fail, reap (SPEC §6).

Ordering: attempts of a world carry a per-world ``seq`` assigned under the world row lock, and
only the lowest queued ``seq`` may be claimed while no attempt of the world is running (a partial
unique index backs the "one running attempt per world" rule). Finishing an attempt kicks the next.
Patches touch only an in-memory working copy; the database sees the turn at commit, in one
transaction, or not at all. Events are written as they happen (``services/events.py``); the
outcome event is written with the commit or the failure.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, TypedDict

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

from chukwa_core import log_context
from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.hashing import json_hash
from chukwa_core.json_values import storable_text
from chukwa_core.world_state import WorldState
from cognition_app.rows import RowTable, insert_rows
from cognition_app.sources import (
    finish_running,
    interrupt_running,
    scrub,
)
from cognition_app.subject_run import AttemptFailure, StagedEvent
from worlds_app.models import (
    AttemptEvent,
    AttemptStatus,
    PatchTransition,
    Turn,
    TurnAttempt,
    World,
)
from worlds_app.selectors import require_slug
from worlds_app.services.dispatch import export_on_commit, kick_on_commit
from worlds_app.services.events import EventLog
from worlds_app.services.execution import StagedTransition, turn_attempt_execute

logger = logging.getLogger(__name__)

MAX_BATCH = 100

# Transition rows as tuples, in this column order (a plain multi-row INSERT, not bulk_create).
TRANSITION_ROWS = RowTable.of(
    PatchTransition,
    (
        "attempt",
        "world",
        "turn_number",
        "patch_seq",
        "effect_index",
        "subject_id",
        "node_id",
        "workflow_hash",
        "op",
        "target_kind",
        "target_id",
        "before",
        "after",
        "invocation_id",
        "llm_call_id",
    ),
)


class LeaseLost(Exception):
    """Another party (the reaper) took the attempt away; nothing may be written for it."""


def _lease_seconds() -> int:
    return int(getattr(settings, "CHUKWA_ATTEMPT_LEASE_SECONDS", 60))


def _now() -> datetime:
    return timezone.now()


# --- enqueue -------------------------------------------------------------------------------


class EnqueueResult(TypedDict):
    batch_id: str
    attempt_ids: list[str]


def turn_attempt_enqueue(*, slug: str, count: int = 1, requested_by: str = "") -> EnqueueResult:
    """Queue ``count`` (1…100) attempts that run strictly in order; returns their ids."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_BATCH:
        raise invalid("invalid_count", "count", f"must be an integer 1…{MAX_BATCH}, got {count!r}")
    require_slug(slug)
    batch_id = uuid.uuid4()
    with transaction.atomic(durable=True):
        world = World.objects.select_for_update().filter(slug=slug).first()
        if world is None:
            raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
        first_seq = world.next_attempt_seq
        attempts = [
            TurnAttempt(
                world=world,
                seq=first_seq + i,
                batch_id=batch_id,
                batch_index=i,
                batch_size=count,
                requested_by=requested_by,
            )
            for i in range(count)
        ]
        TurnAttempt.objects.bulk_create(attempts)
        world.next_attempt_seq = first_seq + count
        world.save(update_fields=["next_attempt_seq"])
        kick_on_commit(world.pk)
    return {"batch_id": str(batch_id), "attempt_ids": [str(a.id) for a in attempts]}


# --- claim ---------------------------------------------------------------------------------


def turn_attempt_claim(*, attempt_id: str, owner: str) -> TurnAttempt | None:
    """queued → running with a lease, if this attempt is the world's next and nothing runs.
    Returns None (and claims nothing) otherwise."""
    with transaction.atomic(durable=True):
        attempt = TurnAttempt.objects.filter(pk=attempt_id).values("world_id", "status").first()
        if attempt is None or attempt["status"] != AttemptStatus.QUEUED:
            return None
        # Claims of one world are serialized by its row lock. Only the columns the claim
        # needs: the scenario snapshot (up to 256 KiB of JSON) is read once, below.
        world_row = (
            World.objects.select_for_update()
            .only("pk", "slug", "current_turn", "replay_source_id")
            .get(pk=attempt["world_id"])
        )
        if TurnAttempt.objects.filter(world=world_row, status=AttemptStatus.RUNNING).exists():
            return None
        head = (
            TurnAttempt.objects.filter(world=world_row, status=AttemptStatus.QUEUED)
            .order_by("seq")
            .values_list("id", flat=True)
            .first()
        )
        if str(head) != str(attempt_id):
            kick_on_commit(world_row.pk)  # the head's message may be lost: hand it out again
            return None
        now = _now()
        claimed = TurnAttempt.objects.filter(pk=attempt_id, status=AttemptStatus.QUEUED).update(
            status=AttemptStatus.RUNNING,
            attempted_turn=world_row.current_turn + 1,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=_lease_seconds()),
            started_at=now,
        )
        if not claimed:
            return None
    return TurnAttempt.objects.select_related("world").get(pk=attempt_id)


_ATTEMPT_FIELDS = [f for f in TurnAttempt._meta.concrete_fields if f.column is not None]
# The claim of the next attempt of a batch by the task that committed the previous one: the
# same conditions as turn_attempt_claim (queued, the world's head, nothing running, under the
# world's row lock), in one statement and one round trip. The partial unique index still
# refuses a second running attempt of a world.
_CLAIM_FOLLOWER_SQL = """
WITH w AS (
    SELECT id, current_turn, slug, replay_source_id FROM {world} WHERE id = %s FOR UPDATE
)
UPDATE {attempt} AS a
SET status = 'running', attempted_turn = w.current_turn + 1, lease_owner = %s,
    lease_expires_at = %s, started_at = %s
FROM w
WHERE a.id = %s AND a.world_id = w.id AND a.status = 'queued'
  AND NOT EXISTS (
    SELECT 1 FROM {attempt} r WHERE r.world_id = w.id AND r.status = 'running')
  AND NOT EXISTS (
    SELECT 1 FROM {attempt} q WHERE q.world_id = w.id AND q.status = 'queued' AND q.seq < a.seq)
RETURNING w.slug, w.replay_source_id, {returning}
""".format(  # noqa: S608 - table and column names from the models, quoted
    world=connection.ops.quote_name(World._meta.db_table),
    attempt=connection.ops.quote_name(TurnAttempt._meta.db_table),
    returning=", ".join(f"a.{connection.ops.quote_name(f.column or '')}" for f in _ATTEMPT_FIELDS),
)


def _claim_follower(*, attempt_id: str, owner: str, world: World) -> TurnAttempt | None:
    """Claim the next attempt of a batch for ``owner`` (see turn_attempt_run), reusing the
    world the previous attempt ran with: its scenario snapshot, written once at creation, is
    not read again; its changeable columns come back with the claim. None if not claimed."""
    now = _now()
    params: list[Any] = [
        world.pk,
        owner,
        now + timedelta(seconds=_lease_seconds()),
        now,
        attempt_id,
    ]
    try:
        with transaction.atomic(savepoint=connection.in_atomic_block):
            with connection.cursor() as cursor:
                cursor.execute(_CLAIM_FOLLOWER_SQL, params)
                row = cursor.fetchone()
    except IntegrityError:  # another attempt of the world got running first
        return None
    if row is None:
        return None
    world.slug, world.replay_source_id = row[0], row[1]
    attempt = TurnAttempt.from_db(
        connection.alias, [f.attname for f in _ATTEMPT_FIELDS], list(row[2:])
    )
    world.current_turn = (attempt.attempted_turn or 1) - 1
    attempt.world = world
    return attempt


def _renew_lease(attempt: TurnAttempt) -> None:
    renewed = TurnAttempt.objects.filter(
        pk=attempt.pk, status=AttemptStatus.RUNNING, lease_owner=attempt.lease_owner
    ).update(lease_expires_at=_now() + timedelta(seconds=_lease_seconds()))
    if not renewed:
        raise LeaseLost(str(attempt.pk))


# --- run -----------------------------------------------------------------------------------


class _Heartbeat:
    """Renews the attempt's lease from a background thread while the attempt works (LLM calls
    can take longer than a lease); stops when the attempt ends. If the worker dies, so does
    the heartbeat, and the reaper takes over once the lease expires."""

    def __init__(self, attempt: TurnAttempt) -> None:
        self.attempt = attempt
        self.lost = False
        self._stop = threading.Event()
        # In a copy of the caller's context, so its log lines carry the attempt's ids too.
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._beat,),
            name=f"lease-{attempt.pk}",
            daemon=True,
        )

    def _beat(self) -> None:
        try:
            while not self._stop.wait(max(1.0, _lease_seconds() / 3)):
                try:
                    _renew_lease(self.attempt)
                except LeaseLost:
                    self.lost = True
                    return
                except (OperationalError, InterfaceError) as exc:
                    # A database blip must not silence the heartbeat: the attempt may well
                    # survive it, and a dead heartbeat would let the reaper interrupt a live
                    # attempt. Drop the broken connection so the next beat opens a fresh one.
                    logger.warning(
                        "attempt %s: lease renewal failed (%s); retrying at the next beat",
                        self.attempt.pk,
                        type(exc).__name__,
                    )
                    connection.close()
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _commit(
    attempt: TurnAttempt,
    previous: Turn,
    working: WorldState,
    staged: list[StagedTransition],
    events: EventLog,
    started: float,
    *,
    continue_batch: bool = False,
) -> tuple[Turn, str | None]:
    """Commit the turn. With ``continue_batch``, the next attempt of the batch (if queued) is
    returned for the caller to claim itself, and no kick is sent for it; otherwise the world's
    next attempt is kicked as always."""
    world = attempt.world
    number = previous.number + 1
    with transaction.atomic(durable=True):
        World.objects.select_for_update().filter(pk=world.pk).values_list("pk").get()
        current = TurnAttempt.objects.filter(pk=attempt.pk).values("status", "lease_owner").get()
        if (
            current["status"] != AttemptStatus.RUNNING
            or current["lease_owner"] != attempt.lease_owner
        ):
            raise LeaseLost(str(attempt.pk))
        if (
            World.objects.filter(pk=world.pk, current_turn=previous.number).update(
                current_turn=number
            )
            != 1
        ):
            raise AttemptFailure(
                "commit", f"world {world.slug!r} moved past turn {previous.number}"
            )
        # The working world is done with: its snapshot shares its entities (no copy), and
        # is hashed once.
        state = working.to_snapshot(share=True)
        turn = Turn.objects.create(
            world_id=world.pk,
            number=number,
            simulation_time=previous.simulation_time + timedelta(seconds=world.chronon_seconds),
            state=state,
            state_hash=json_hash(state),
            attempt_id=attempt.pk,
        )
        # The last events and the outcome, in the transaction that makes the patches real.
        events.finish(
            StagedEvent("turn_committed", {"turn": number, "state_hash": turn.state_hash})
        )
        insert_rows(
            TRANSITION_ROWS,
            [
                (
                    attempt.pk,
                    world.pk,
                    number,
                    seq,
                    t.effect_index,
                    subject_id,
                    node_id,
                    workflow_hash,
                    t.op,
                    t.target_kind,
                    t.target_id,
                    t.before,
                    t.after,
                    invocation_id,
                    llm_call_id,
                )
                for seq, subject_id, node_id, workflow_hash, t, invocation_id, llm_call_id in staged
            ],
        )
        TurnAttempt.objects.filter(pk=attempt.pk).update(
            status=AttemptStatus.COMMITTED,
            produced_turn=number,
            ended_at=_now(),
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        follower = (
            _next_of_batch(attempt)
            if continue_batch and attempt.batch_index + 1 < attempt.batch_size
            else None
        )
        if follower is None:
            kick_on_commit(world.pk)
        export_on_commit(attempt.pk)
    return turn, follower


def _next_of_batch(attempt: TurnAttempt) -> str | None:
    pk = (
        TurnAttempt.objects.filter(
            batch_id=attempt.batch_id,
            batch_index=attempt.batch_index + 1,
            status=AttemptStatus.QUEUED,
        )
        .values_list("pk", flat=True)
        .first()
    )
    return str(pk) if pk is not None else None


def _cancel_rest_of_batch(attempt: TurnAttempt, reason: str) -> int:
    rest = list(
        TurnAttempt.objects.filter(
            batch_id=attempt.batch_id,
            status=AttemptStatus.QUEUED,
            batch_index__gt=attempt.batch_index,
        ).values_list("id", flat=True)
    )
    if not rest:
        return 0
    now = _now()
    TurnAttempt.objects.filter(pk__in=rest, status=AttemptStatus.QUEUED).update(
        status=AttemptStatus.CANCELLED, ended_at=now, failure_step="batch", failure_reason=reason
    )
    AttemptEvent.objects.bulk_create(
        [
            AttemptEvent(
                attempt_id=pk,
                seq=1,
                kind="attempt_cancelled",
                payload={"reason": reason},
                created_at=now,
            )
            for pk in rest
        ]
    )
    return len(rest)


def _fail(attempt: TurnAttempt, failure: AttemptFailure, events: EventLog, started: float) -> None:
    with transaction.atomic(durable=True):
        World.objects.select_for_update().filter(pk=attempt.world_id).values_list("pk").get()
        updated = TurnAttempt.objects.filter(
            pk=attempt.pk, status=AttemptStatus.RUNNING, lease_owner=attempt.lease_owner
        ).update(
            status=AttemptStatus.FAILED,
            ended_at=_now(),
            duration_ms=int((time.monotonic() - started) * 1000),
            failure_step=failure.step,
            failure_subject=failure.subject_id,
            failure_reason=failure.message,
        )
        if not updated:
            return  # interrupted meanwhile; the reaper wrote the outcome
        events.finish(
            StagedEvent(
                "attempt_failed",
                {"step": failure.step, "reason": failure.message},
                subject_id=failure.subject_id,
                node_id=failure.node_id,
                invocation_id=failure.invocation_id,
            )
        )
        finish_running(attempt_id=attempt.pk, reason=f"attempt failed: {failure.step}")
        _cancel_rest_of_batch(attempt, f"cancelled: attempt {attempt.pk} of this batch failed")
        kick_on_commit(attempt.world_id)
        export_on_commit(attempt.pk)


def _fail_safely(
    attempt: TurnAttempt, failure: AttemptFailure, events: EventLog, started: float
) -> None:
    """End the attempt as failed even when its last events cannot be written (they are what
    failed, e.g. a payload the database refuses): then the failure alone is added to the
    events already written."""
    try:
        _fail(attempt, failure, events, started)
    except DatabaseError as exc:
        logger.warning(
            "attempt %s: could not write its events (%s)", attempt.pk, type(exc).__name__
        )
        connection.close_if_unusable_or_obsolete()
        events.discard_pending()
        reason = storable_text(
            f"{failure.message} (its events could not be stored: {type(exc).__name__})"
        )
        _fail(
            attempt,
            AttemptFailure(failure.step, reason, subject_id=failure.subject_id),
            events,
            started,
        )


def turn_attempt_run(*, attempt_id: str, owner: str, continue_for: float = 0) -> str | None:
    """Claim and run one attempt to its end. Returns its final status, or None when this call
    claimed nothing (another worker has it, it already ended, or it is not next).

    ``continue_for`` (seconds; the Celery task passes ``CHUKWA_BATCH_CONTINUE_SECONDS``): after
    a commit, while this call has run for less than that, it claims the next attempt of the
    same batch itself and runs it, instead of a broker round trip to a worker. Each is claimed
    like any other (a conditional UPDATE, a lease, its heartbeat); no kick is sent for the one
    it continues with, so if this process dies in between, the periodic re-drive sends it (SPEC
    §6: at most one reaper period late). The bound keeps every attempt well inside the task's
    time limits. The status returned is the first attempt's."""
    continue_until = time.monotonic() + continue_for
    attempt = turn_attempt_claim(attempt_id=attempt_id, owner=owner)
    if attempt is None:
        return None
    first: str | None = None
    while True:
        with log_context.bound(world=attempt.world.slug, attempt=str(attempt.pk)):
            logger.info(
                "attempt claimed",
                extra={"turn": attempt.attempted_turn, "worker": owner},
            )
            status, follower = _run_claimed(attempt, owner, continue_until=continue_until)
        first = first or status
        if follower is None:
            return first
        world = attempt.world
        try:
            attempt = _claim_follower(attempt_id=follower, owner=owner, world=world)
        except Exception:
            kick_on_commit(world.pk)  # not claimed here: hand it out (runs at once, no atomic)
            raise
        if attempt is None:  # another worker has it (a re-drive), or it was cancelled
            return first


def _run_claimed(
    attempt: TurnAttempt, owner: str, *, continue_until: float = 0
) -> tuple[str, str | None]:
    """Run a claimed attempt; its final status, and the next attempt of its batch when the
    commit (before ``continue_until``, a monotonic time) left it for this caller."""
    started = time.monotonic()
    events = EventLog(attempt)
    events.append(
        StagedEvent(
            "attempt_started",
            {
                "attempted_turn": attempt.attempted_turn,
                "worker": owner,
                "batch_index": attempt.batch_index,
            },
        )
    )
    try:
        previous = Turn.objects.get(
            world_id=attempt.world_id, number=(attempt.attempted_turn or 1) - 1
        )
        with _Heartbeat(attempt) as heartbeat:
            working, staged, _count = turn_attempt_execute(
                attempt=attempt, previous=previous, events=events
            )
        if heartbeat.lost or events.lease_lost:
            raise LeaseLost(str(attempt.pk))
        if events.failure:
            raise AttemptFailure("events", events.failure)
        turn, follower = _commit(
            attempt,
            previous,
            working,
            staged,
            events,
            started,
            continue_batch=time.monotonic() < continue_until,
        )
        logger.info(
            "attempt committed",
            extra={"turn": turn.number, "duration_ms": _ms_since(started)},
        )
        return AttemptStatus.COMMITTED, follower
    except LeaseLost:
        logger.warning("attempt %s lost its lease; its outcome is the reaper's", attempt.pk)
        return AttemptStatus.INTERRUPTED, None
    except AttemptFailure as failure:
        _fail_safely(attempt, failure, events, started)
        # The step only: the reason may quote a source's answer; it is kept on the attempt.
        logger.info(
            "attempt failed",
            extra={
                "step": failure.step,
                "failed_subject": failure.subject_id,
                "duration_ms": _ms_since(started),
            },
        )
        return AttemptStatus.FAILED, None
    except Exception as exc:
        # Unexpected: still end the attempt (never leave it running until the reaper), then
        # re-raise so the worker logs the traceback.
        _fail_safely(
            attempt,
            AttemptFailure("internal_error", storable_text(scrub(f"{type(exc).__name__}: {exc}"))),
            events,
            started,
        )
        logger.exception(
            "attempt failed",
            extra={"step": "internal_error", "duration_ms": _ms_since(started)},
        )
        raise


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


# --- reaper --------------------------------------------------------------------------------


def turn_attempt_reap(*, now: datetime | None = None) -> list[str]:
    """Mark running attempts whose lease expired as interrupted (the worker died); the world
    stays at its last committed turn and the rest of the batch is cancelled."""
    now = now or _now()
    expired = list(
        TurnAttempt.objects.filter(
            status=AttemptStatus.RUNNING, lease_expires_at__lt=now
        ).values_list("id", flat=True)
    )
    reaped: list[str] = []
    for attempt_id in expired:
        with transaction.atomic(durable=True):
            attempt = (
                TurnAttempt.objects.select_for_update()
                .filter(pk=attempt_id, status=AttemptStatus.RUNNING, lease_expires_at__lt=now)
                .first()
            )
            if attempt is None:
                continue
            reason = (
                f"lease held by {attempt.lease_owner or 'unknown worker'} expired at "
                f"{attempt.lease_expires_at.isoformat() if attempt.lease_expires_at else '?'}"
            )
            attempt.status = AttemptStatus.INTERRUPTED
            attempt.ended_at = now
            attempt.failure_step = "lease"
            attempt.failure_reason = reason
            attempt.save(update_fields=["status", "ended_at", "failure_step", "failure_reason"])
            next_seq = (
                AttemptEvent.objects.filter(attempt=attempt)
                .order_by("-seq")
                .values_list("seq", flat=True)
                .first()
                or 0
            ) + 1
            AttemptEvent.objects.create(
                attempt=attempt,
                seq=next_seq,
                kind="attempt_interrupted",
                payload={"reason": reason},
                created_at=now,
            )
            interrupt_running(attempt_id=attempt.pk, reason=reason)
            _cancel_rest_of_batch(
                attempt, f"cancelled: attempt {attempt.pk} of this batch was interrupted"
            )
            kick_on_commit(attempt.world_id)
            export_on_commit(attempt.pk)
        reaped.append(str(attempt_id))
    return reaped
