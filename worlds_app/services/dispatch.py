"""Handing queued turn attempts to workers: the kick after a commit and the periodic re-drive
("a queued attempt always runs").

The database is the queue of record; a broker message is only a wake-up call. A kick that
cannot be sent is logged, and the re-drive (run by the periodic reaper task) sends the next
attempt of every world left with queued attempts and nothing running, so a lost message delays
an attempt by at most one reaper period.
"""

from __future__ import annotations

import logging
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Exists, OuterRef
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worlds_app.models import AttemptStatus, TurnAttempt

logger = logging.getLogger(__name__)


RUN_TURN_ATTEMPT_TASK = "worlds.run_turn_attempt"
EXPORT_ATTEMPT_TRACE_TASK = "worlds.export_attempt_trace"
MEASURE_WORLD_TASK = "worlds.measure_world"  # = tasks.measure_world


def kick_on_commit(world_id: int) -> None:
    """After commit, hand the world's next queued attempt to a worker.

    The database, not the broker, is the queue of record: a kick that cannot be sent (broker
    down, database gone between commit and this read) is logged and left to the periodic
    re-drive (:func:`turn_attempt_redrive`), so it never fails the request or task that
    committed the rows."""

    def kick() -> None:
        try:
            head = (
                TurnAttempt.objects.filter(world_id=world_id, status=AttemptStatus.QUEUED)
                .order_by("seq")
                .values_list("id", "world__slug")
                .first()
            )
        except (OperationalError, InterfaceError) as exc:
            logger.warning(
                "world %s: next attempt not dispatched, database unavailable (%s); "
                "the periodic re-drive will send it",
                world_id,
                type(exc).__name__,
            )
            return
        if head is not None:
            _dispatch(attempt_id=str(head[0]), world_slug=head[1])

    transaction.on_commit(kick)


# Errors that mean "the broker cannot take the message now": kombu wraps the transport's
# connection errors in its OperationalError once its publish retries are spent; redis-py's own
# are listed in case one escapes unwrapped.
BROKER_ERRORS: tuple[type[Exception], ...] = (
    BrokerOperationalError,
    RedisConnectionError,
    RedisTimeoutError,
)


def _dispatch(*, attempt_id: str, world_slug: str) -> bool:
    """Send the attempt's task; False (and a warning naming the world) if the broker is down."""
    # By name: the tasks module (an entry point above the services) is not imported here.
    from celery import current_app

    try:
        # The queue is read at send time so tests can route to their own worker.
        current_app.send_task(
            RUN_TURN_ATTEMPT_TASK, args=[attempt_id], queue=settings.CELERY_TASK_DEFAULT_QUEUE
        )
    except BROKER_ERRORS as exc:
        # The message text names a host or socket, never the URL's credentials.
        logger.warning(
            "world %r: attempt %s not dispatched, broker unavailable (%s: %s); "
            "the periodic re-drive will send it",
            world_slug,
            attempt_id,
            type(exc).__name__,
            exc,
        )
        return False
    return True


def export_on_commit(attempt_id: UUID) -> None:
    """After commit, ask the control queue to export the finished attempt's trace.

    Nothing at all happens while export is off. A message the broker cannot take is a trace
    lost, logged, never an error for the attempt that just ended."""
    if not settings.OTEL_EXPORTER_OTLP_ENDPOINT:
        return

    def send() -> None:
        from celery import current_app

        try:
            current_app.send_task(
                EXPORT_ATTEMPT_TRACE_TASK,
                args=[str(attempt_id)],
                queue=settings.CHUKWA_CONTROL_QUEUE,
            )
        except BROKER_ERRORS as exc:
            logger.warning(
                "attempt %s: trace not exported, broker unavailable (%s: %s)",
                attempt_id,
                type(exc).__name__,
                exc,
            )

    transaction.on_commit(send)


def send_measure(world_id: int, metric_hashes: list[str]) -> None:
    """Hand a world's measuring to the measure queue (read at send time, so tests can route to
    their own worker); a broker error propagates."""
    from celery import current_app

    current_app.send_task(
        MEASURE_WORLD_TASK, args=[world_id, metric_hashes], queue=settings.CHUKWA_MEASURE_QUEUE
    )


def measure_on_commit(world_ids: int | list[int], experiment_id: int) -> None:
    """After commit, have the measure queue measure experiment worlds with the experiment's
    metrics (what is missing: the turn just committed, or the first turn of new worlds). A
    message the broker cannot take is logged; the experiment's progress shows the measurements
    still missing, and ``POST /api/experiments/<slug>/metrics/`` or a measurement request
    measures them."""
    worlds = [world_ids] if isinstance(world_ids, int) else list(world_ids)

    def send() -> None:
        from worlds_app.models import Experiment

        design = (
            Experiment.objects.filter(pk=experiment_id).values_list("design", flat=True).first()
        )
        if not design or not design.get("metrics"):
            return
        for world_id in worlds:
            try:
                send_measure(world_id, list(design["metrics"]))
            except BROKER_ERRORS as exc:
                logger.warning(
                    "world %s: not measured now, broker unavailable (%s: %s)",
                    world_id,
                    type(exc).__name__,
                    exc,
                )
                return

    transaction.on_commit(send)


def kick_worlds_on_commit(world_ids: list[int]) -> None:
    """:func:`kick_on_commit` for many new worlds at once (an experiment's): one read of their
    first queued attempts after commit, then one message each."""

    def kick() -> None:
        try:
            heads = list(
                TurnAttempt.objects.filter(world_id__in=world_ids, status=AttemptStatus.QUEUED)
                .order_by("world_id", "seq")
                .distinct("world_id")
                .values_list("id", "world__slug")
            )
        except (OperationalError, InterfaceError) as exc:
            logger.warning(
                "%d worlds: first attempts not dispatched, database unavailable (%s); "
                "the periodic re-drive will send them",
                len(world_ids),
                type(exc).__name__,
            )
            return
        for attempt_id, slug in heads:
            if not _dispatch(attempt_id=str(attempt_id), world_slug=slug):
                return  # the broker is down: the re-drive sends the rest

    transaction.on_commit(kick)


# --- re-drive ------------------------------------------------------------------------------


def turn_attempt_redrive(*, limit: int | None = None) -> list[str]:
    """Re-send the task of every world's next attempt when the world has queued attempts and
    none running ("a queued attempt always runs").

    A dispatch can be lost in many ways: a worker killed after taking the message, the
    database down during the claim, Redis restarted without its queue, an enqueue while the
    broker was down. Claiming is idempotent (a conditional UPDATE), so a message sent for an
    attempt whose first message is still on its way is harmless: the loser claims nothing.
    At most ``limit`` worlds per call (the longest-waiting first), so one period's work stays
    bounded; the rest are picked up by the next periods."""
    limit = limit if limit is not None else int(getattr(settings, "CHUKWA_REDRIVE_LIMIT", 500))
    world_attempts = TurnAttempt.objects.filter(world_id=OuterRef("world_id"))
    heads = list(
        TurnAttempt.objects.filter(status=AttemptStatus.QUEUED)
        .exclude(Exists(world_attempts.filter(status=AttemptStatus.RUNNING)))
        .exclude(
            Exists(world_attempts.filter(status=AttemptStatus.QUEUED, seq__lt=OuterRef("seq")))
        )
        .order_by("queued_at", "seq")
        .values_list("id", "world__slug")[:limit]
    )
    sent: list[str] = []
    for attempt_id, world_slug in heads:
        if not _dispatch(attempt_id=str(attempt_id), world_slug=world_slug):
            break  # the broker is down: the next period tries again
        sent.append(str(attempt_id))
    if sent:
        logger.info("re-drove %d queued attempt(s) of idle worlds", len(sent))
    return sent
