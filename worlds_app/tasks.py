"""Thin Celery entry points: ids in, a service does the work, idempotent by claiming."""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded


@shared_task(
    bind=True,
    name="worlds.run_turn_attempt",
    acks_late=True,
    # A worker that dies mid-attempt leaves the message unacknowledged for redelivery; the
    # redelivered task finds the attempt no longer queued and returns quietly (the reaper marks
    # it interrupted when its lease expires).
    reject_on_worker_lost=True,
    soft_time_limit=900,
    time_limit=960,
)
def run_turn_attempt(self, attempt_id: str) -> str | None:
    from worlds_app.services import turn_attempt_run

    try:
        return turn_attempt_run(attempt_id=attempt_id, owner=self.request.hostname or "worker")
    except SoftTimeLimitExceeded:
        # turn_attempt_run already recorded the failure (internal_error) before re-raising.
        return "failed"


@shared_task(name="worlds.reap_expired_attempts", acks_late=True, time_limit=120)
def reap_expired_attempts() -> list[str]:
    from worlds_app.services import turn_attempt_reap

    return turn_attempt_reap()
