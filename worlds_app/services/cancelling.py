"""Cancelling queued attempts, each with its ``attempt_cancelled`` event: the rest of a batch
whose attempt failed or was interrupted, an experiment's queued turns (on cancel, and when its
budget runs out)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max, QuerySet

from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt


def cancel_queued_attempts(
    attempts: QuerySet[TurnAttempt], *, step: str, reason: str, at: datetime
) -> int:
    """Cancel those of ``attempts`` still queued or parked (``waiting`` for a provider batch), in
    the caller's transaction; a running one ends as it would have. Returns how many were
    cancelled."""
    # Locked first: a worker claiming one of them meanwhile either committed its claim (the
    # row is re-read, no longer queued, and left out) or waits and then claims nothing.
    queued = list(
        attempts.select_for_update(of=("self",))
        .filter(status__in=(AttemptStatus.QUEUED, AttemptStatus.WAITING))
        .values_list("id", flat=True)
    )
    if not queued:
        return 0
    # a parked attempt has the events of its run so far: its cancellation comes after them
    last_seq = dict(
        AttemptEvent.objects.filter(attempt_id__in=queued)
        .values("attempt_id")
        .annotate(last=Max("seq"))
        .values_list("attempt_id", "last")
    )
    TurnAttempt.objects.filter(
        pk__in=queued, status__in=(AttemptStatus.QUEUED, AttemptStatus.WAITING)
    ).update(
        status=AttemptStatus.CANCELLED,
        ended_at=at,
        failure_step=step,
        failure_reason=reason,
        waiting_for="",
    )
    AttemptEvent.objects.bulk_create(
        [
            AttemptEvent(
                attempt_id=pk,
                seq=last_seq.get(pk, 0) + 1,
                kind="attempt_cancelled",
                payload={"reason": reason},
                created_at=at,
            )
            for pk in queued
        ]
    )
    return len(queued)


def cancel_queued(experiment_id: int, reason: str, at: datetime) -> int:
    """Cancel every queued or parked attempt of the experiment's worlds."""
    return cancel_queued_attempts(
        TurnAttempt.objects.filter(world__experiment_id=experiment_id),
        step="cancel",
        reason=reason,
        at=at,
    )
