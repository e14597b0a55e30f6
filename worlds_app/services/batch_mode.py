"""Batch-mode experiments (docs/costs.md, "Batch mode"): attempts that park while their model
call waits in a provider batch, and resume when it ends.

An attempt of a batch-mode experiment's world runs with ``batch_owner = experiment:<id>`` on its
calls. A call of a batch source that has no answer yet is enqueued (``cognition_app.batches``)
and raises ``BatchPending``: the attempt then **parks** (:func:`park`) — status ``waiting``, its
lease and worker released, nothing committed, the request ids it waits for on its row. The
database is the only place that state lives, so a killed worker loses nothing.

When the periodic batch tick ends batches, :func:`batch_resume` puts every parked attempt whose
requests all ended back in the queue — the same attempt row. Before it runs again its previous
run's events and replayed copies are dropped; the run then replays the attempt's own recorded
calls (exact replay: the k-th use of a request gets its k-th recording) and the batch's answers,
and goes on until the next call that needs a reply, or its commit. A tool loop thus takes one
tick per round. Every world's attempt of a tick joins that tick's batch: the worlds run until
they park, the tick sends what they asked.
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache
from uuid import UUID

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet

from chukwa_core.experiment_design import BATCH, ExperimentDesign
from cognition_app.batch_queue import experiment_owner
from cognition_app.batches import BatchPending
from cognition_app.models import BatchRequest, SourceInvocation
from cognition_app.subject_run import StagedEvent
from worlds_app.models import AttemptEvent, AttemptStatus, Experiment, TurnAttempt, World
from worlds_app.services.attempt_recorder import AttemptRecorder
from worlds_app.services.dispatch import experiment_admit, kick_on_commit

logger = logging.getLogger(__name__)

# A batch request's statuses that end it (answered, failed or expired, cancelled)
ENDED = ("completed", "failed", "cancelled")


def batch_owner(experiment_id: int) -> str:
    """The owner of an experiment's batch requests: cancelling it cancels them."""
    return experiment_owner(experiment_id)


@lru_cache(maxsize=4096)
def _mode(experiment_id: int) -> str:
    # the design is frozen at creation: its mode never changes
    design = Experiment.objects.filter(pk=experiment_id).values_list("design", flat=True).first()
    return ExperimentDesign.from_json(design).mode if design is not None else ""


def owner_of(world: World) -> str:
    """The ``batch_owner`` of a world's calls: its experiment's in batch mode, else ""."""
    if world.experiment_id is None or _mode(world.experiment_id) != BATCH:
        return ""
    return batch_owner(world.experiment_id)


def park(
    attempt: TurnAttempt, pending: BatchPending, recorder: AttemptRecorder, started: float
) -> bool:
    """The running attempt waits for ``pending``'s request: ``waiting``, no lease, nothing
    committed, the worker free. False when it was no longer this worker's (the reaper's)."""
    recorder.ended()
    # concurrent subjects (services/subject_threads.py) wait on several at once
    requests = [str(r) for r in getattr(pending, "request_ids", [pending.request_id])]
    request_id = requests[0]
    with transaction.atomic(durable=True):
        World.objects.select_for_update().filter(pk=attempt.world_id).values_list("pk").get()
        updated = TurnAttempt.objects.filter(
            pk=attempt.pk, status=AttemptStatus.RUNNING, lease_owner=attempt.lease_owner
        ).update(
            status=AttemptStatus.WAITING,
            lease_owner="",
            lease_expires_at=None,
            waiting_for=f"a provider batch ({len(requests)} request(s): {request_id}…)"[:300],
            batch_requests=requests,
            parks=F("parks") + 1,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        if not updated:
            return False
        recorder.events.finish(StagedEvent("attempt_waiting", {"batch_requests": requests}))
        recorder.close_running("parked: waiting for a provider batch")
        if attempt.world.experiment_id is not None:
            experiment_id = attempt.world.experiment_id
            # its slot is free: the experiment's next worlds may run meanwhile
            transaction.on_commit(lambda: experiment_admit(experiment_id=experiment_id))
    return True


def gathering(owners: set[str]) -> set[str]:
    """Of ``owners``, the batch-mode experiments whose worlds still run toward their next
    request: an attempt running, or queued at the head of its world (no parked one before
    it). Their requests wait for the next tick, so a tick's batch holds every world's."""
    ids = {
        int(o.split(":", 1)[1])
        for o in owners
        if o.startswith("experiment:") and _mode(int(o.split(":", 1)[1])) == BATCH
    }
    if not ids:
        return set()
    parked = TurnAttempt.objects.filter(world_id=OuterRef("world_id"), status=AttemptStatus.WAITING)
    busy = (
        TurnAttempt.objects.filter(world__experiment_id__in=ids)
        .filter(Q(status=AttemptStatus.RUNNING) | Q(status=AttemptStatus.QUEUED) & ~Exists(parked))
        .values_list("world__experiment_id", flat=True)
        .distinct()
    )
    return {batch_owner(i) for i in busy}


def on_batches_ended(**_: object) -> None:
    """``cognition_app.batches.batches_ended``: resume what waited on them."""
    batch_resume()


def batch_resume() -> list[str]:
    """Queue again every parked attempt whose batch requests all ended; the attempts queued.
    Idempotent: the batch tick calls it after each poll, the reaper's re-drive as a safety
    net."""
    parked = list(
        TurnAttempt.objects.filter(status=AttemptStatus.WAITING).values_list("id", "batch_requests")
    )
    wanted = {r for _, requests in parked for r in requests or []}
    if not wanted:
        return []
    ended = {
        str(pk)
        for pk in BatchRequest.objects.filter(pk__in=wanted, status__in=ENDED).values_list(
            "pk", flat=True
        )
    }
    resumed: list[str] = []
    for attempt_id, requests in parked:
        if all(r in ended for r in requests or []) and _requeue(attempt_id):
            resumed.append(str(attempt_id))
    if resumed:
        logger.info("resumed %d parked attempt(s)", len(resumed))
    return resumed


def _requeue(attempt_id: UUID) -> bool:
    with transaction.atomic(durable=True):
        world_id = TurnAttempt.objects.filter(pk=attempt_id).values_list("world_id", flat=True)
        World.objects.select_for_update().filter(pk__in=world_id).values_list("pk").first()
        attempt = (
            TurnAttempt.objects.select_for_update()
            .filter(pk=attempt_id, status=AttemptStatus.WAITING)
            .first()
        )
        if attempt is None:
            return False
        # The previous run's record, but for the calls it made (the replay serves them): its
        # events, and its calls served from a recording (their copies are made again).
        AttemptEvent.objects.filter(attempt=attempt).delete()
        copies = SourceInvocation.objects.filter(attempt_id=attempt.pk, replayed_from__isnull=False)
        copies.exclude(Q(children__replayed_from__isnull=True) & Q(children__isnull=False)).delete()
        attempt.status = AttemptStatus.QUEUED
        attempt.waiting_for = ""
        attempt.batch_requests = None
        attempt.save(update_fields=["status", "waiting_for", "batch_requests"])
        kick_on_commit(attempt.world_id)
    return True


def resume_first_seq(attempt: TurnAttempt) -> int:
    """The first invocation number of a run: after those of the attempt's earlier runs."""
    if not attempt.parks:
        return 1
    last = (
        SourceInvocation.objects.filter(attempt_id=attempt.pk)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return (last or 0) + 1


def own_recordings(attempt: TurnAttempt) -> QuerySet[SourceInvocation]:
    """The recordings a resumed attempt replays: its own calls answered, not replayed."""
    return SourceInvocation.objects.filter(attempt_id=attempt.pk, replayed_from__isnull=True)


def batch_progress(experiment_id: int) -> dict[str, int]:
    """A batch-mode experiment's ticks so far (provider batches its requests went in), its
    attempts parked now and its requests waiting in a batch (not yet sent, or sent)."""
    requests = BatchRequest.objects.filter(owner=batch_owner(experiment_id))
    return {
        "ticks": requests.exclude(batch=None).values("batch_id").distinct().count(),
        "attempts_waiting": TurnAttempt.objects.filter(
            world__experiment_id=experiment_id, status=AttemptStatus.WAITING
        ).count(),
        "requests_pending": requests.exclude(status__in=ENDED).count(),
    }
