"""Thin Celery entry points: ids in, a service does the work, idempotent by claiming."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)

# A task whose row is claimed in the database: its message acknowledged only once it ran (a
# worker that dies leaves it for redelivery, which finds the row claimed and does nothing), and
# an unreachable database tried again shortly rather than left to the periodic re-drive.
CLAIMED_TASK: dict[str, Any] = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "max_retries": 5,
    "retry_backoff": 2,
    "retry_backoff_max": 30,
}


@shared_task(
    bind=True,
    name="worlds.run_turn_attempt",  # = services.dispatch.RUN_TURN_ATTEMPT_TASK
    # A worker that dies mid-attempt: the redelivered task finds the attempt no longer queued
    # and returns quietly (the reaper marks it interrupted when its lease expires).
    **CLAIMED_TASK,
    soft_time_limit=settings.CHUKWA_ATTEMPT_SOFT_TIME_LIMIT,
    time_limit=settings.CHUKWA_ATTEMPT_TIME_LIMIT,
)
def run_turn_attempt(self: Task, attempt_id: str) -> str | None:
    from worlds_app.services import turn_attempt_run

    try:
        return turn_attempt_run(
            attempt_id=attempt_id,
            owner=self.request.hostname or "worker",
            # the rest of the batch, claimed by this task while it is young (no broker trip)
            continue_for=settings.CHUKWA_BATCH_CONTINUE_SECONDS,
        )
    except SoftTimeLimitExceeded:
        # turn_attempt_run already recorded the failure (internal_error) before re-raising.
        return "failed"


# Routed to the control queue (settings.CELERY_TASK_ROUTES), so it never waits behind attempts.
@shared_task(name="worlds.reap_expired_attempts", acks_late=True, time_limit=120)
def reap_expired_attempts() -> dict[str, Any]:
    """The periodic safety net: interrupt attempts whose worker died, then re-send the next
    attempt of every world left with queued attempts and nothing running, and the measuring of
    every idle experiment world whose measure message was lost."""
    from worlds_app.services import turn_attempt_reap, turn_attempt_redrive
    from worlds_app.services.batch_mode import batch_resume
    from worlds_app.services.biography_runs import biography_reap
    from worlds_app.services.interview_runs import interview_reap
    from worlds_app.services.measure_redrive import batch_answers_redrive, measure_redrive

    try:
        reaped = turn_attempt_reap()
        # parked attempts whose batch ended, should the tick's own resume have been lost
        resumed = batch_resume()
        redriven = turn_attempt_redrive()
        measures = measure_redrive() + batch_answers_redrive()
        interviews = interview_reap()
        biographies = biography_reap()
        return {
            "reaped": reaped,
            "resumed": resumed,
            "redriven": redriven,
            "measures": measures,
            "interviews": interviews,
            "biographies": biographies,
        }
    except (OperationalError, InterfaceError) as exc:
        # The database is down: nothing to reap or re-drive until it is back, and the next
        # period (seconds away) is the retry. Each step commits on its own, so nothing is
        # left half-done.
        logger.warning("reaper skipped this period: database unavailable (%s)", type(exc).__name__)
        return {
            "reaped": [],
            "resumed": [],
            "redriven": [],
            "measures": [],
            "interviews": {},
            "biographies": {},
            "skipped": "database unavailable",
        }


# Routed to the control queue (settings.CELERY_TASK_ROUTES): exporting never takes a turn worker.
# Idempotent: the trace is rebuilt from finished rows with derived ids, so a redelivery re-sends
# the same spans. No retries: the exporter retries transient HTTP answers itself.
@shared_task(
    name="worlds.export_attempt_trace",  # = services.dispatch.EXPORT_ATTEMPT_TRACE_TASK
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=60,
    time_limit=90,
)
def export_attempt_trace(attempt_id: str) -> dict[str, Any]:
    from worlds_app.telemetry import attempt_trace_export

    return attempt_trace_export(attempt_id=attempt_id)


# Routed to the measure queue (settings.CELERY_TASK_ROUTES): measuring never takes a turn worker.
# Idempotent: each (world, turn, metric) is written once (its unique constraint), so a
# redelivery or a second request measures only what is still missing.
@shared_task(
    name="worlds.measure_world",  # = services.dispatch.MEASURE_WORLD_TASK
    acks_late=True,
    reject_on_worker_lost=True,
    # The database was unreachable: measure again shortly (nothing half-written: the rows of one
    # run are inserted in one transaction).
    autoretry_for=(OperationalError, InterfaceError),
    max_retries=5,
    retry_backoff=2,
    retry_backoff_max=30,
    soft_time_limit=settings.CHUKWA_ATTEMPT_SOFT_TIME_LIMIT,
    time_limit=settings.CHUKWA_ATTEMPT_TIME_LIMIT,
)
def measure_world(world_id: int | list[int], metric_hashes: list[str]) -> dict[str, Any]:
    """One world, or several (a new experiment's worlds' baselines: a message per
    ``dispatch.MEASURE_WORLDS_PER_MESSAGE`` worlds, not one each), one after the other; then a
    stopping rule of their experiment looks, when all is done."""
    from worlds_app.models import World
    from worlds_app.services.budget_settler import flush as settle_flush
    from worlds_app.services.experiment_stopping import stopping_step
    from worlds_app.services.measurements import world_measure

    ids = [world_id] if isinstance(world_id, int) else list(world_id)
    try:
        measured = {
            one: dict(world_measure(world_id=one, metric_hashes=metric_hashes)) for one in ids
        }
    finally:
        settle_flush()  # its judges' settles written before the task ends
    result: dict[str, Any] = (
        measured[world_id]
        if isinstance(world_id, int)
        else {str(k): v for k, v in measured.items()}
    )
    experiments = set(
        World.objects.filter(pk__in=ids, experiment__isnull=False).values_list(
            "experiment_id", flat=True
        )
    )
    for experiment_id in sorted(experiments):
        result["stopping_added"] = stopping_step(experiment_id=experiment_id)
    return result


@shared_task(
    bind=True,
    name="worlds.run_interview",  # = services.dispatch.RUN_INTERVIEW_TASK
    # A worker killed mid-interview leaves the row running; the reaper queues it again (or fails
    # it) when its lease expires.
    **CLAIMED_TASK,
    time_limit=settings.CHUKWA_ATTEMPT_TIME_LIMIT,
)
def run_interview(self: Task, interview_id: int) -> str | None:
    """Ask a queued interview's agents on a throwaway branch (docs/populations.md)."""
    from worlds_app.services.budget_settler import flush as settle_flush
    from worlds_app.services.interview_runs import interview_run

    try:
        return interview_run(interview_id=interview_id, owner=self.request.hostname or "worker")
    finally:
        settle_flush()  # its calls' budget settles written before the task ends


@shared_task(
    bind=True,
    name="worlds.write_biographies",  # = services.dispatch.WRITE_BIOGRAPHIES_TASK
    # A worker killed mid-run leaves the row running; the reaper queues it again (or fails it)
    # when its lease expires, and the next try asks only the agents still without a text.
    **CLAIMED_TASK,
    time_limit=settings.CHUKWA_ATTEMPT_TIME_LIMIT,
)
def write_biographies(self: Task, run_id: int) -> str | None:
    """Write a queued biographies run's texts (docs/populations.md)."""
    from worlds_app.services.biography_runs import biography_run_execute

    return biography_run_execute(run_id=run_id, owner=self.request.hostname or "worker")
