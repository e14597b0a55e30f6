"""Stopping an experiment's queued turns: on cancel, and when its budget runs out."""

from __future__ import annotations

from datetime import datetime

from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt


def cancel_queued(experiment_id: int, reason: str, at: datetime) -> int:
    """Cancel every queued attempt of the experiment's worlds, each with an event naming
    ``reason`` (in the caller's transaction); a running one ends as it would have. Returns how
    many were cancelled."""
    queued = list(
        TurnAttempt.objects.filter(
            world__experiment_id=experiment_id, status=AttemptStatus.QUEUED
        ).values_list("id", flat=True)
    )
    TurnAttempt.objects.filter(pk__in=queued, status=AttemptStatus.QUEUED).update(
        status=AttemptStatus.CANCELLED, ended_at=at, failure_step="cancel", failure_reason=reason
    )
    AttemptEvent.objects.bulk_create(
        [
            AttemptEvent(
                attempt_id=pk,
                seq=1,
                kind="attempt_cancelled",
                payload={"reason": reason},
                created_at=at,
            )
            for pk in queued
        ]
    )
    return len(queued)
