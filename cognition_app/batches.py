"""Requests gathered into provider batches (``interface.batch``; docs/costs.md, "Batch").

The database is the queue of record. A caller that nobody waits for (a judge) enqueues its
chat request (:func:`enqueue`: identical pending or answered requests share one row) and holds
no worker while it waits. The periodic :func:`batch_tick` sends every source's pending requests
as one provider batch (:func:`submit_pending`) and polls the batches sent
(:func:`poll_submitted`): a completed batch writes each line's answer on its request; a batch
that failed, expired or was cancelled fails its requests with ``batch_failed``,
``batch_expired`` or ``batch_cancelled``. :func:`cancel_owner` cancels an owner's requests and
the provider batches that hold only them.

A worker killed between a provider's answer and the database write loses nothing: the batch is
polled again at the next tick. One killed between sending a batch and recording it leaves the
requests pending: they are sent again (paid twice, never lost).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from cognition_app.batch_queue import (
    CANCELLED,
    COMPLETED,
    FAILED,
    MISSING_LINE,
    PENDING,
    SUBMITTED,
    BatchPending,
    batch_body,
    enqueue,
)
from cognition_app.batch_signals import held
from cognition_app.failures import SourceFailure
from cognition_app.models import BatchRequest, ProviderBatch
from cognition_app.sources import batch_api
from cognition_app.sources.components import source_content

logger = logging.getLogger(__name__)

# the queue's names (cognition_app.batch_queue), read from here
__all__ = [
    "CANCELLED",
    "COMPLETED",
    "FAILED",
    "MISSING_LINE",
    "PENDING",
    "SUBMITTED",
    "BatchPending",
    "batch_body",
    "batch_tick",
    "batches_ended",
    "cancel_owner",
    "enqueue",
    "poll_submitted",
    "submit_pending",
]

# Sent after a tick in which provider batches ended (``batches``: the ProviderBatch rows), so
# that the layers above ask again at once for what waited on them (the worlds layer measures
# the worlds whose judgings waited).
batches_ended = Signal()


def submit_pending() -> list[ProviderBatch]:
    """Send each source's pending requests as one provider batch; the batches sent. A source
    whose endpoint cannot be reached keeps its requests pending for the next tick."""
    sent: list[ProviderBatch] = []
    by_source: dict[str, list[BatchRequest]] = defaultdict(list)
    pending = list(BatchRequest.objects.filter(status=PENDING).order_by("created_at"))
    waiting = held({r.owner for r in pending if r.owner})  # still gathering (lockstep)
    for request in pending:
        if request.owner not in waiting:
            by_source[request.source_hash].append(request)
    for source_hash, requests in by_source.items():
        interface = source_content(source_hash)["interface"]
        try:
            endpoint = batch_api.BatchEndpoint.of(interface)
            provider_id = batch_api.submit(endpoint, [(str(r.id), r.body) for r in requests])
        except SourceFailure as exc:
            logger.warning("batch of %d request(s) not sent: %s", len(requests), exc)
            continue
        with transaction.atomic():
            batch = ProviderBatch.objects.create(
                source_hash=source_hash, provider_batch_id=provider_id
            )
            BatchRequest.objects.filter(pk__in=[r.pk for r in requests], status=PENDING).update(
                status=SUBMITTED, batch=batch
            )
        sent.append(batch)
    return sent


def poll_submitted() -> list[ProviderBatch]:
    """Poll every batch not ended; write the answers of those that ended. The batches ended."""
    ended: list[ProviderBatch] = []
    for batch in ProviderBatch.objects.filter(status="in_progress").order_by("pk"):
        try:  # a variable unset here: polled by a process that has it, or at the next tick
            endpoint = batch_api.BatchEndpoint.of(source_content(batch.source_hash)["interface"])
            state = batch_api.poll(endpoint, batch.provider_batch_id)
        except SourceFailure as exc:
            logger.warning("batch %s not polled: %s", batch.provider_batch_id, exc)
            continue
        now = timezone.now()
        with transaction.atomic():
            batch.polled_at = now
            if state.pending:
                batch.save(update_fields=["polled_at"])
                continue
            batch.status, batch.ended_at = state.status, now
            batch.save(update_fields=["status", "polled_at", "ended_at"])
            for request in batch.requests.select_for_update().filter(status=SUBMITTED):
                _write_line(request, state, now)
        ended.append(batch)
    return ended


def _write_line(request: BatchRequest, state: batch_api.BatchState, now: Any) -> None:
    line = state.results.get(str(request.id))
    if state.failure_class is not None:
        request.status, request.failure_class = FAILED, state.failure_class
    elif line is None:
        request.status, request.failure_class = FAILED, MISSING_LINE
    else:
        request.status = COMPLETED
        request.response_status, request.response_body = line.status_code, line.body
    request.ended_at = now
    request.save(
        update_fields=["status", "failure_class", "response_status", "response_body", "ended_at"]
    )


def cancel_owner(owner: str) -> int:
    """Cancel an owner's requests; a provider batch left holding none still wanted is
    cancelled at the provider. How many requests were cancelled."""
    now = timezone.now()
    with transaction.atomic():
        requests = BatchRequest.objects.select_for_update().filter(
            owner=owner, status__in=[PENDING, SUBMITTED]
        )
        batch_ids = set(requests.exclude(batch=None).values_list("batch_id", flat=True))
        count = requests.update(status=CANCELLED, failure_class="cancelled", ended_at=now)
    for batch in ProviderBatch.objects.filter(pk__in=batch_ids, status="in_progress"):
        if batch.requests.filter(status=SUBMITTED).exists():
            continue  # another owner still waits on it
        try:  # a variable unset here (the web process): the batch ends at the provider
            endpoint = batch_api.BatchEndpoint.of(source_content(batch.source_hash)["interface"])
            status = batch_api.cancel(endpoint, batch.provider_batch_id)
        except SourceFailure as exc:
            logger.warning("batch %s not cancelled: %s", batch.provider_batch_id, exc)
            continue
        ProviderBatch.objects.filter(pk=batch.pk).update(status=status, ended_at=now)
    return count


def batch_tick() -> tuple[int, int]:
    """One period: send what is pending, poll what was sent. (batches sent, batches ended)"""
    sent = submit_pending()
    ended = poll_submitted()
    if ended:
        batches_ended.send(sender=ProviderBatch, batches=ended)
    return len(sent), len(ended)
