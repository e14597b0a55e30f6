"""Re-driving lost measure messages, as lost turn messages are (``dispatch.turn_attempt_redrive``;
docs/operations.md, "Measurements re-driven"): the database is the queue of record.

An experiment's world is measured by a message sent after each commit (``measure_on_commit``);
a message lost after a world's last commit (a broker down at that moment, a worker killed with
it, Redis restarted without its queue) would leave its last turns unmeasured for good. The
periodic reaper calls :func:`measure_redrive`, which re-sends the measuring of every idle world
(nothing queued or running: a later commit would send it anyway) that has fewer measurements of
its experiment's metrics than its own committed turns call for, unless the measure queue still
holds messages (the world's may be among them) or a worker is measuring the world now (its
measuring lock is held). Measuring is idempotent and each world's is serialized by that lock, so
a message re-sent while the first is still on its way (taken by a worker, not started) asks no
judge twice: the later finds the rows written.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q
from django.db.models.functions import Coalesce

from cognition_app import batches
from worlds_app.models import (
    ACTIVE_STATUSES,
    Experiment,
    PendingJudging,
    TurnAttempt,
    World,
)
from worlds_app.services.dispatch import BROKER_ERRORS, send_measure
from worlds_app.services.measurements import MEASURING_LOCK_SPACE

logger = logging.getLogger(__name__)


def measure_messages_waiting() -> bool:
    """Whether the measure queue holds messages (a broker that cannot answer: as if it did)."""
    from celery import current_app

    try:
        with current_app.pool.acquire(block=True) as conn:
            declared = conn.default_channel.queue_declare(
                queue=settings.CHUKWA_MEASURE_QUEUE, passive=False
            )
            return bool(declared.message_count)
    except BROKER_ERRORS:
        return True


def _being_measured() -> set[int]:
    """The worlds whose measuring lock a worker holds now (the two-key advisory locks)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
            "AND granted AND classid::bigint = %s",
            [MEASURING_LOCK_SPACE & 0xFFFFFFFF],
        )
        return {int(row[0]) for row in cursor.fetchall()}


# a queued batch request not answered yet
WAITING = [batches.PENDING, batches.SUBMITTED]


def batch_answers_redrive(*, check_queue: bool = True) -> list[int]:
    """Send the measuring of every world with judgings whose provider batch request ended (the
    metrics those judgings are of); the worlds sent. ``check_queue``: not while the measure
    queue holds messages (the reaper's period; the poll's kick sends at once)."""
    waiting: dict[int, set[str]] = defaultdict(set)
    for world_id, metric_id in (
        PendingJudging.objects.exclude(request__status__in=WAITING)
        .order_by("world_id")
        .values_list("world_id", "metric_id")
    ):
        waiting[world_id].add(metric_id)
    if not waiting or (check_queue and measure_messages_waiting()):
        return []
    sent: list[int] = []
    for world_id, metrics in waiting.items():
        try:
            send_measure(world_id, sorted(metrics))
        except BROKER_ERRORS as exc:  # the reaper's next period tries again
            logger.warning("batch answers not measured, broker unavailable (%s)", exc)
            break
        sent.append(world_id)
    if sent:
        logger.info("measuring %d world(s) whose judges' batches ended", len(sent))
    return sent


def on_batches_ended(sender: Any, **kwargs: Any) -> None:
    """``cognition_app.batches.batches_ended``: the worlds whose judgings waited, measured now."""
    batch_answers_redrive(check_queue=False)


def measure_redrive(*, limit: int | None = None) -> list[int]:
    """Re-send the measuring of idle experiment worlds missing measurements of their
    experiment's metrics (at most ``limit`` a period, lowest id first); the worlds sent."""
    limit = limit if limit is not None else int(getattr(settings, "CHUKWA_REDRIVE_LIMIT", 500))
    if measure_messages_waiting():
        return []
    busy = _being_measured()
    active = TurnAttempt.objects.filter(world_id=OuterRef("pk"), status__in=ACTIVE_STATUSES)
    sent: list[int] = []
    for experiment in Experiment.objects.filter(worlds__isnull=False).distinct().order_by("pk"):
        metrics = list(experiment.typed_design.metrics)
        if not metrics:
            continue
        own_turns = F("current_turn") - Coalesce("branched_from_turn", 0) + 1
        short = (
            World.objects.filter(experiment=experiment)
            .exclude(Exists(active))
            .exclude(pk__in=busy)
            .annotate(
                measured=Count(
                    "measurements",
                    filter=Q(measurements__metric_id__in=metrics),
                    distinct=True,
                ),
                # judgings waiting in a provider batch: measured once it ends
                waiting=Count(
                    "pending_judgings",
                    filter=Q(
                        pending_judgings__metric_id__in=metrics,
                        pending_judgings__request__status__in=WAITING,
                    ),
                    distinct=True,
                ),
            )
            .filter(measured__lt=own_turns * len(metrics) - F("waiting"))
            .order_by("pk")
            .values_list("pk", flat=True)[: limit - len(sent)]
        )
        for world_id in short:
            try:
                send_measure(world_id, metrics)
            except BROKER_ERRORS as exc:  # the next period tries again
                logger.warning("measurements not re-driven, broker unavailable (%s)", exc)
                return sent
            sent.append(world_id)
        if len(sent) >= limit:
            break
    if sent:
        logger.info("re-drove the measuring of %d world(s)", len(sent))
    return sent
