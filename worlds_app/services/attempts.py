"""Turn attempts: enqueue, claim, run, commit or fail, reap.

Ordering: attempts of a world carry a per-world ``seq`` assigned under the world row lock, and
only the lowest queued ``seq`` may be claimed while no attempt of the world is running (a partial
unique index backs the "one running attempt per world" rule). Finishing an attempt kicks the next.
Patches touch only an in-memory working copy; the database sees the turn at commit, in one
transaction, or not at all (``services/turn_commit.py``). Claims and the lease are in
``services/claims.py``. Events are written as they happen (``services/events.py``); the outcome
event is written with the commit or the failure.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import TypedDict

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from chukwa_core import log_context
from chukwa_core.errors import ConflictError, NotFoundError, invalid
from chukwa_core.json_values import storable_text
from cognition_app.batches import BatchPending
from cognition_app.recording import interrupt_running, interrupt_stale_unattached
from cognition_app.sources import scrub
from cognition_app.subject_run import AttemptFailure, StagedEvent
from worlds_app.models import (
    ACTIVE_STATUSES,
    AttemptEvent,
    AttemptStatus,
    Experiment,
    Intervention,
    Turn,
    TurnAttempt,
    World,
)
from worlds_app.selectors import RETRYABLE_STATUSES, require_slug
from worlds_app.services.attempt_recorder import AttemptRecorder
from worlds_app.services.batch_mode import park
from worlds_app.services.budget_settler import flush as settle_flush
from worlds_app.services.cancelling import cancel_queued_attempts
from worlds_app.services.claims import Claim, Heartbeat, LeaseLost, claim_attempt
from worlds_app.services.dispatch import (
    export_on_commit,
    handing_off,
    kick_on_commit,
    measures_deferred,
    turn_messages_waiting,
)
from worlds_app.services.execution import turn_attempt_execute
from worlds_app.services.experiment_budget import settle_leaked
from worlds_app.services.turn_commit import commit_turn

logger = logging.getLogger(__name__)

MAX_BATCH = 100


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
    with transaction.atomic(durable=True):
        world = World.objects.select_for_update().filter(slug=slug).first()
        if world is None:
            raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
        return _enqueue_locked(world, count, requested_by)


def _enqueue_locked(world: World, count: int, requested_by: str) -> EnqueueResult:
    """A new batch of ``count`` attempts of a world whose row the caller locked."""
    batch_id = uuid.uuid4()
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


def retry_refusal(attempt: TurnAttempt, world: World) -> ConflictError | None:
    """Why ``attempt`` cannot be retried now (the 409), or None when it can."""
    if attempt.status not in RETRYABLE_STATUSES:
        return ConflictError(
            "not_retryable",
            f"attempt_id: attempt {attempt.seq} of {world.slug!r} is {attempt.status}; only a "
            "failed or interrupted attempt can be retried",
            {"field": "attempt_id", "status": attempt.status},
        )
    busy = TurnAttempt.objects.filter(world=world, status__in=ACTIVE_STATUSES).count()
    if busy:
        return ConflictError(
            "world_busy",
            f"attempt_id: world {world.slug!r} has {busy} attempt(s) queued or running; retry "
            "when they have ended",
            {"field": "attempt_id", "active": busy},
        )
    last = TurnAttempt.objects.filter(world=world).order_by("-seq").first()
    after = TurnAttempt.objects.filter(
        batch_id=attempt.batch_id, batch_index__gt=attempt.batch_index
    ).exclude(status=AttemptStatus.CANCELLED)
    if last is None or last.batch_id != attempt.batch_id or after.exists():
        newest = last.seq if last is not None else attempt.seq
        return ConflictError(
            "not_last_batch",
            f"attempt_id: attempt {attempt.seq} did not end world {world.slug!r}'s last batch; "
            f"retry the attempt that did (the world's newest is attempt {newest})",
            {"field": "attempt_id", "last_attempt": str(last.pk) if last else None},
        )
    return None


# The codes of retry_warning: a retry's 409 that ``force`` overrides.
RETRY_WARNINGS = ("intervention_still_pending", "experiment_budget_exhausted")


def retry_warning(attempt: TurnAttempt, world: World) -> ConflictError | None:
    """Why a retry of ``attempt`` would fail again the same way (the 409 a retry without
    ``force`` gets), or None: the cause of its failure is still there."""
    if attempt.failure_step == "intervention_invalid" and attempt.attempted_turn is not None:
        pending = (
            Intervention.objects.filter(
                world=world, turn=attempt.attempted_turn, consumed_by__isnull=True
            )
            .values_list("pk", flat=True)
            .first()
        )
        if pending is not None:
            return ConflictError(
                "intervention_still_pending",
                f"attempt_id: attempt {attempt.seq} failed on intervention {pending} at turn "
                f"{attempt.attempted_turn}, which is still pending; a retry would apply it "
                "again. Change or delete it first, or retry with force",
                {"field": "attempt_id", "intervention": pending, "turn": attempt.attempted_turn},
            )
    if world.experiment_id is not None:
        experiment = (
            Experiment.objects.filter(pk=world.experiment_id, budget_exhausted_at__isnull=False)
            .values_list("slug", flat=True)
            .first()
        )
        if experiment is not None:
            return ConflictError(
                "experiment_budget_exhausted",
                f"attempt_id: the budget of experiment {experiment!r} is exhausted; a retry's "
                "LLM calls would be refused. Retry with force to queue it anyway",
                {"field": "attempt_id", "experiment": experiment},
            )
    return None


def turn_attempt_retryable(*, attempt_id: str) -> bool:
    """Whether the attempt could be retried now (pages show the button only then)."""
    attempt = TurnAttempt.objects.select_related("world").filter(pk=attempt_id).first()
    return attempt is not None and retry_refusal(attempt, attempt.world) is None


def turn_attempt_retry(
    *, attempt_id: str, requested_by: str = "", force: bool = False
) -> EnqueueResult:
    """Queue again the turn of the failed or interrupted attempt that ended its world's last
    batch, plus the turns that batch had left (cancelled after it), as a new batch. 409 when the
    attempt did not end the world's last batch, or while anything of the world is queued or
    running (the world must be at rest: a retry never races another batch); 409 too, unless
    ``force``, when its failure's cause is still there (:func:`retry_warning`)."""
    try:
        pk = uuid.UUID(str(attempt_id))
    except ValueError:
        raise invalid("invalid_id", "attempt_id", f"{attempt_id!r} is not a UUID") from None
    with transaction.atomic(durable=True):
        found = TurnAttempt.objects.filter(pk=pk).values_list("world_id", flat=True).first()
        if found is None:
            raise NotFoundError(
                "attempt_not_found", f"attempt_id: no attempt {attempt_id}", {"field": "attempt_id"}
            )
        world = World.objects.select_for_update().get(pk=found)  # enqueues lock it too
        attempt = TurnAttempt.objects.get(pk=pk)
        refusal = retry_refusal(attempt, world)
        if refusal is not None:
            raise refusal
        warning = None if force else retry_warning(attempt, world)
        if warning is not None:
            raise warning
        # Its own turn again, and the turns its batch had left (cancelled because it failed).
        count = attempt.batch_size - attempt.batch_index
        return _enqueue_locked(world, count, requested_by)


# --- claim ---------------------------------------------------------------------------------


def turn_attempt_claim(*, attempt_id: str, owner: str) -> TurnAttempt | None:
    """queued → running with a lease, if this attempt is the world's next and nothing runs.
    Returns None (and claims nothing) otherwise."""
    claim = claim_attempt(attempt_id=attempt_id, owner=owner)
    return None if claim is None else claim.attempt


def _cancel_rest_of_batch(attempt: TurnAttempt, reason: str) -> int:
    return cancel_queued_attempts(
        TurnAttempt.objects.filter(batch_id=attempt.batch_id, batch_index__gt=attempt.batch_index),
        step="batch",
        reason=reason,
        at=_now(),
    )


def _fail(
    attempt: TurnAttempt, failure: AttemptFailure, recorder: AttemptRecorder, started: float
) -> None:
    # The calls' last finishing rows first: closing what still runs must not overwrite them.
    recorder.ended()
    events = recorder.events
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
        recorder.close_running(f"attempt failed: {failure.step}")
        _cancel_rest_of_batch(attempt, f"cancelled: attempt {attempt.seq} of this batch failed")
        kick_on_commit(attempt.world_id)
        export_on_commit(attempt.pk)


def _fail_safely(
    attempt: TurnAttempt, failure: AttemptFailure, recorder: AttemptRecorder, started: float
) -> None:
    """End the attempt as failed even when its last events cannot be written (they are what
    failed, e.g. a payload the database refuses): then the failure alone is added to the
    events already written."""
    try:
        _fail(attempt, failure, recorder, started)
    except DatabaseError as exc:
        logger.warning(
            "attempt %s: could not write its events (%s)", attempt.pk, type(exc).__name__
        )
        connection.close_if_unusable_or_obsolete()
        recorder.events.discard_pending()
        reason = storable_text(
            f"{failure.message} (its events could not be stored: {type(exc).__name__})"
        )
        _fail(
            attempt,
            AttemptFailure(failure.step, reason, subject_id=failure.subject_id),
            recorder,
            started,
        )


def turn_attempt_run(*, attempt_id: str, owner: str, continue_for: float = 0) -> str | None:
    """Claim and run one attempt to its end. Returns its final status, or None when this call
    claimed nothing (another worker has it, it already ended, or it is not next).

    ``continue_for`` (seconds; the Celery task passes ``CHUKWA_BATCH_CONTINUE_SECONDS``): while
    this call has run for less than that, each commit also claims the next attempt of the same
    batch for this call, in the commit's transaction (a conditional UPDATE and a lease, like any
    claim), and this call runs it — no broker round trip, no gap between the turns. No kick is
    sent for an attempt claimed that way; should this process die before it ends, its lease
    expires and the reaper interrupts it as any attempt of a dead worker. The bound
    keeps every attempt well inside the task's time limits. An experiment's world goes on only
    while no turn attempt's message waits (``dispatch.turn_messages_waiting``), so under load
    its attempts take their turn in the queue like everyone's. One heartbeat thread keeps the lease
    of whichever attempt runs. The status returned is the first attempt's."""
    continue_until = time.monotonic() + continue_for
    claim = claim_attempt(attempt_id=attempt_id, owner=owner)
    if claim is None:
        return None
    first: str | None = None
    # the measure messages of its quick turns sent together (dispatch.MEASURE_DEFER_SECONDS)
    with Heartbeat(claim.attempt) as heartbeat, measures_deferred():
        while claim is not None:
            attempt = claim.attempt
            heartbeat.follow(attempt)
            # a world of an experiment done within the time to go on: this task runs the
            # first turn of the world admitted in its place (dispatch.handing_off)
            going_on = time.monotonic() < continue_until
            with (
                log_context.bound(world=attempt.world.slug, attempt=str(attempt.pk)),
                handing_off() if going_on else nullcontext() as handoff,
            ):
                logger.info(
                    "attempt claimed",
                    extra={"turn": attempt.attempted_turn, "worker": owner},
                )
                status, claim = _run_claimed(
                    claim, owner, heartbeat, claim_next_until=continue_until
                )
            first = first or status
            if claim is None and handoff is not None and handoff.attempt_id is not None:
                claim = claim_attempt(attempt_id=handoff.attempt_id, owner=owner)
                if claim is None:  # not claimable after all: its message goes out
                    handoff.release()
    settle_flush()  # the budget's settles of its calls written before the task ends
    return first


def _run_claimed(
    claim: Claim, owner: str, heartbeat: Heartbeat, *, claim_next_until: float = 0
) -> tuple[str, Claim | None]:
    """Run a claimed attempt; its final status, and the next attempt of its batch when the
    commit (before ``claim_next_until``, a monotonic time) claimed it for this caller."""
    attempt = claim.attempt
    started = time.monotonic()
    recorder = AttemptRecorder(attempt)
    events = recorder.events
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
        if claim.previous is None:  # the world lost its turn N-1: an error, reported as one
            claim.previous = Turn.objects.get(
                world_id=attempt.world_id, number=(attempt.attempted_turn or 1) - 1
            )
        execution = turn_attempt_execute(
            attempt=attempt, previous=claim.previous, recorder=recorder, limits=claim.limits
        )
        if heartbeat.lost or events.lease_lost:
            raise LeaseLost(str(attempt.pk))
        if events.failure:
            raise AttemptFailure("events", events.failure)
        turn, follower = commit_turn(
            claim,
            execution.working,
            execution.staged,
            recorder,
            started,
            owner=owner,
            claim_next=time.monotonic() < claim_next_until
            # An experiment's world goes on only while no turn waits: otherwise its next
            # attempt is kicked to the back of its queue and the waiting turn runs first.
            and (
                attempt.world.experiment_id is None
                or attempt.batch_index + 1 == attempt.batch_size  # no next attempt
                or not turn_messages_waiting()
            ),
            intervention_id=execution.intervention_id,
        )
    except BatchPending as pending:
        # a batch-mode experiment's call waits in a provider batch: park, free the worker
        if not park(attempt, pending, recorder, started):
            return AttemptStatus.INTERRUPTED, None
        logger.info("attempt parked", extra={"duration_ms": _ms_since(started)})
        return AttemptStatus.WAITING, None
    except LeaseLost:
        recorder.ended()  # nothing of this attempt is written after it ends here
        logger.warning("attempt %s lost its lease; its outcome is the reaper's", attempt.pk)
        return AttemptStatus.INTERRUPTED, None
    except AttemptFailure as failure:
        _fail_safely(attempt, failure, recorder, started)
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
            recorder,
            started,
        )
        logger.exception(
            "attempt failed",
            extra={"step": "internal_error", "duration_ms": _ms_since(started)},
        )
        raise
    logger.info("attempt committed", extra={"turn": turn.number, "duration_ms": _ms_since(started)})
    return AttemptStatus.COMMITTED, follower


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


# --- reaper --------------------------------------------------------------------------------


def turn_attempt_reap(*, now: datetime | None = None) -> list[str]:
    """Mark running attempts whose lease expired as interrupted (the worker died); the world
    stays at its last committed turn and the rest of the batch is cancelled. A judge's call
    left running longer than its task may run is interrupted too."""
    now = now or _now()
    stale = now - timedelta(seconds=settings.CHUKWA_ATTEMPT_TIME_LIMIT)
    interrupt_stale_unattached(started_before=stale)
    settle_leaked(created_before=stale)
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
            settle_leaked(attempt_id=attempt.pk)  # its calls' reservations, from their rows
            _cancel_rest_of_batch(
                attempt, f"cancelled: attempt {attempt.seq} of this batch was interrupted"
            )
            kick_on_commit(attempt.world_id)
            export_on_commit(attempt.pk)
        reaped.append(str(attempt_id))
    return reaped
