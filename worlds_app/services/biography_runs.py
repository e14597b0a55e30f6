"""Writing a population's biographies on a worker (docs/populations.md, "Biographies written by
a model").

The request is checked whole before anything is written (a 400 naming the field), then
accepted ``queued`` (202): a thousand agents take a thousand calls, longer than a request should
last or a proxy waits. The database is the queue of record and a broker message only a wake-up
call, as for interviews. A worker claims the run (``running``, with a lease its heartbeat
renews), asks the source for every agent still without a text, keeping each text as it arrives
(``BiographyText``, ``done`` counting them), then stores the new version and ends ``completed``
with it, or ``failed`` with the error the request would have answered. The periodic reaper
(:func:`biography_reap`) queues a running run whose lease expired again (its next try asks only
the agents still without a text, its budget counting what the earlier tries spent), or fails it
once tried :data:`MAX_BIOGRAPHY_TRIES` times, and re-sends queued runs whose message was lost:
no run is left ``running``.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from chukwa_core.errors import ChukwaError, NotFoundError
from cognition_app.models import LlmCall
from cognition_app.recording import interrupt_running_of
from scenarios_app.models import ResponseSource
from worlds_app.models import BiographyRun, BiographyText
from worlds_app.services.claims import Heartbeat, LeaseLost
from worlds_app.services.dispatch import biography_send, biography_send_on_commit
from worlds_app.services.leased_rows import claim_leased, reap_leased, renew_row_lease
from worlds_app.services.population_biographies import (
    Asked,
    biographies_ask,
    biographies_checked,
    biographies_store,
    ledger_of,
)

logger = logging.getLogger(__name__)

MAX_BIOGRAPHY_TRIES = 3


def biography_run_create(*, hash: str, data: Any, created_by: str = "") -> BiographyRun:
    """Check the request for population ``hash``'s biographies (a 400 naming the field; no call
    is made) and accept it ``queued``; a worker is woken once it is committed."""
    asked = biographies_checked(hash=hash, data=data)
    with transaction.atomic():
        run = BiographyRun.objects.create(
            population=hash,
            label=asked.content["label"],
            source_hash=asked.source_hash,
            prompt=asked.prompt,
            entity_template=asked.template,
            budget=asked.budget,
            agents=asked.content["size"],
            status="queued",
            created_by=created_by[:150],
        )
        biography_send_on_commit(run.pk)
    return run


def try_seconds() -> float:
    """How long one task asks before the run goes on in another (half the soft time limit of a
    task: the calls it has out then finish well within the hard one)."""
    return float(settings.CHUKWA_ATTEMPT_SOFT_TIME_LIMIT) / 2


def node_id(run: BiographyRun) -> str:
    """The node id of a run's calls (its traced rows name the run)."""
    return f"biography-run:{run.pk}:{run.label}"[:64]


def _asked(run: BiographyRun) -> Asked:
    """The run's request, as it was checked (the population's content read again: a version
    never changes)."""
    data: dict[str, Any] = {
        "source": {"hash": run.source_hash},
        "prompt": run.prompt,
        "entity_template": run.entity_template,
    }
    if run.budget is not None:
        data["budget"] = run.budget
    return biographies_checked(hash=run.population, data=data)


def _renew(run: BiographyRun) -> None:
    renew_row_lease(BiographyRun, run)


def _claim(run_id: int, owner: str) -> BiographyRun | None:
    # a later try keeps the texts written, and the run its first start
    run: BiographyRun | None = claim_leased(BiographyRun, run_id, owner, keep_start=True)
    return run


def _ours(run: BiographyRun) -> Any:
    return BiographyRun.objects.filter(pk=run.pk, status="running", lease_owner=run.lease_owner)


def _spent(run: BiographyRun) -> tuple[int, Decimal]:
    """What the run's calls spent so far (every try's, answered or not)."""
    calls = LlmCall.objects.filter(invocation__node_id=node_id(run))
    totals = calls.aggregate(
        tokens=Coalesce(Sum(Coalesce("prompt_tokens", 0) + Coalesce("completion_tokens", 0)), 0),
        cost=Sum("cost"),
    )
    return int(totals["tokens"]), totals["cost"] or Decimal(0)


def biography_run_execute(*, run_id: int, owner: str) -> str | None:
    """Claim and run one queued run; its final status ("lease_lost" when the reaper had taken
    it meanwhile), or None when there was nothing to claim."""
    run = _claim(run_id, owner)
    if run is None:
        return None

    def keep(index: int, text: str, call: str) -> None:
        with transaction.atomic():
            if not _ours(run).update(done=F("done") + 1):
                raise LeaseLost(f"biography run {run.pk}")
            BiographyText.objects.create(run=run, index=index, text=text, call=call)

    until = time.monotonic() + try_seconds()
    with Heartbeat(run, renew=_renew):
        try:
            asked = _asked(run)
            have = set(BiographyText.objects.filter(run=run).values_list("index", flat=True))
            tokens, cost = _spent(run)
            biographies_ask(
                asked,
                indexes=[i for i in range(1, run.agents + 1) if i not in have],
                ledger=ledger_of(run.budget, spent_tokens=tokens, spent_cost=cost),
                node_id=node_id(run),
                on_text=keep,
                until=until,
            )
            if _ours(run).filter(done__lt=run.agents).exists():
                # the try's time is up: the run goes on in a new task, this try not counted
                with transaction.atomic():
                    _ours(run).update(status="queued", tries=F("tries") - 1, lease_expires_at=None)
                    biography_send_on_commit(run.pk)
                return "queued"
            rows = BiographyText.objects.filter(run=run).order_by("index")
            kept = list(rows.values_list("text", "call"))
            made = biographies_store(asked, [t for t, _ in kept], [str(c) for _, c in kept])
        except ChukwaError as exc:
            ended = _ours(run).update(
                status="failed",
                error_code=exc.code[:40],
                error_message=exc.message,
                error_details=exc.details,
                error_status=exc.status_code,
                finished_at=timezone.now(),
                lease_expires_at=None,
            )
            return "failed" if ended else _lost(run, "failed")
    ended = _ours(run).update(
        status="completed", result=made, finished_at=timezone.now(), lease_expires_at=None
    )
    return "completed" if ended else _lost(run, "completed")


def _lost(run: BiographyRun, outcome: str) -> str:
    """The run ended here after the reaper had taken it away (its lease ran out): the reaper's
    state stands (queued again, or failed), and the next try ends it again (a version already
    stored is stored again with the same hash). Logged, not hidden."""
    logger.warning(
        "biographies run %s: %s here, but its lease was lost; the reaper's state stands",
        run.pk,
        outcome,
    )
    return "lease_lost"


def biography_reap(*, now: datetime | None = None) -> dict[str, list[int]]:
    """Settle runs left by killed workers and re-send lost ones: a running run whose lease
    expired has the calls it had out traced ``interrupted`` and is queued again (and sent), or
    failed once tried :data:`MAX_BIOGRAPHY_TRIES` times; a queued run whose message was lost is
    sent again (a duplicate message finds it claimed and does nothing)."""

    def calls_interrupted(run: BiographyRun, reason: str) -> None:
        interrupt_running_of(node_id=node_id(run), reason=reason)

    return reap_leased(
        BiographyRun,
        now=now,
        max_tries=MAX_BIOGRAPHY_TRIES,
        send=biography_send,
        on_expired=calls_interrupted,
        failed_fields={"error_status": 503},
        failed_note="; nothing was stored",
    )


def biography_run_get(run_id: int) -> BiographyRun:
    """A run by id (404 ``not_found``)."""
    run = BiographyRun.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFoundError(
            "biography_run_not_found", f"id: no biographies run {run_id}", {"field": "id"}
        )
    return run


def _source_label(source_hash: str) -> str:
    label = ResponseSource.objects.filter(pk=source_hash).values_list("label", flat=True).first()
    return label or ""


def biography_runs_of(*, population: str, limit: int = 5) -> list[dict[str, Any]]:
    """The latest runs asked for a population version, newest first (id, status, progress)."""
    runs = BiographyRun.objects.filter(population=population).order_by("-created_at", "-id")
    return [dict(r) for r in runs.values("id", "status", "done", "agents", "created_at")[:limit]]


def biography_run_read(run: BiographyRun) -> dict[str, Any]:
    """A run as the API and the pages show it."""
    ended = run.status in ("completed", "failed")
    error = (
        {"code": run.error_code, "message": run.error_message, "details": run.error_details}
        if run.status == "failed"
        else None
    )
    return {
        "id": run.pk,
        "url": f"/api/biography-runs/{run.pk}/",
        "population": run.population,
        "label": run.label,
        "source": {"hash": run.source_hash, "label": _source_label(run.source_hash)},
        "status": run.status,
        "agents": run.agents,
        "done": run.done,
        "tries": run.tries,
        "result": run.result if run.status == "completed" else None,
        "error": error,
        # why an open run was tried again (its worker stopped answering)
        "note": "" if ended else run.error_message,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "created_by": run.created_by,
    }
