"""Thin Celery entry points of the cognition app."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)


# Routed to the control queue (settings.CELERY_TASK_ROUTES): polling batches never takes a turn
# worker, and no worker is held while a batch is pending.
@shared_task(name="cognition.batch_tick", acks_late=True, time_limit=300)
def batch_tick() -> dict[str, int]:
    """The periodic batch poll (every ``CHUKWA_BATCH_POLL_SECONDS``): send the pending requests
    of batch sources as provider batches, poll the batches sent, write their answers."""
    from cognition_app.batches import batch_tick as tick

    try:
        sent, ended = tick()
    except (OperationalError, InterfaceError) as exc:
        logger.warning("batch poll skipped: database unavailable (%s)", type(exc).__name__)
        return {"sent": 0, "ended": 0}
    return {"sent": sent, "ended": ended}
