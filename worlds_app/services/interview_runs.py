"""Running interviews on a worker (docs/populations.md, "Interviewing without disturbing").

An interview is accepted ``queued`` by the request (``interviews.interview_create``); the database
is the queue of record and a broker message (sent by ``dispatch``) only a wake-up call, as for
turns. A worker claims the row (``running``, with a lease), opens a **throwaway branch** of the
world at the interview's turn — the branch point is checked by the branch machinery
(``branches.branch_point``) and the branch's state is a copy of that turn's snapshot held by the
worker only: it is never a world row, so it never shows among anyone's worlds and there is
nothing to clean up — asks the agents there, records the parent world's state hash before and
after, and ends ``completed`` or ``failed`` with a reason. The periodic reaper
(:func:`interview_reap`) puts a running row whose lease expired (its worker was killed) back in
the queue, or fails it once tried :data:`MAX_INTERVIEW_TRIES` times, and re-sends queued rows
whose message was lost: no row is left ``running``.
"""

from __future__ import annotations

import copy
import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from chukwa_core.errors import ChukwaError
from worlds_app.models import Interview
from worlds_app.services.branches import branch_point
from worlds_app.services.claims import Heartbeat, LeaseLost, lease_seconds
from worlds_app.services.dispatch import BROKER_ERRORS, interview_send
from worlds_app.services.interviews import interview_answers, latest_hash
from worlds_app.turn_view import turn_states

logger = logging.getLogger(__name__)

MAX_INTERVIEW_TRIES = 2
# A queued row older than this with no worker on it is re-sent by the reaper.
REDRIVE_AFTER_SECONDS = 30


def _renew(row: Interview) -> None:
    """The heartbeat's renewal of a running interview's lease (``claims.Heartbeat``)."""
    renewed = Interview.objects.filter(
        pk=row.pk, status="running", lease_owner=row.lease_owner
    ).update(lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds()))
    if not renewed:
        raise LeaseLost(f"interview {row.pk}")


def _claim(interview_id: int, owner: str) -> Interview | None:
    now = timezone.now()
    with transaction.atomic():
        row = Interview.objects.select_for_update().filter(pk=interview_id).first()
        if row is None or row.status != "queued":
            return None  # finished, or another worker has it: a duplicate message
        row.status = "running"
        row.tries += 1
        row.lease_owner = owner[:200]
        row.lease_expires_at = now + timedelta(seconds=lease_seconds())
        row.started_at = now
        row.answers = []  # a retry asks again from the start
        row.save(
            update_fields=[
                "status",
                "tries",
                "lease_owner",
                "lease_expires_at",
                "started_at",
                "answers",
            ]
        )
        return row


def _finish(row: Interview, *, error: tuple[str, str] | None, after: str) -> None:
    updated = Interview.objects.filter(pk=row.pk, status="running", lease_owner=row.lease_owner)
    updated.update(
        answers=row.answers,
        status="failed" if error else "completed",
        error_code=error[0][:40] if error else "",
        error_message=error[1] if error else "",
        state_hash_after=after,
        finished_at=timezone.now(),
        lease_expires_at=None,
    )


def interview_run(*, interview_id: int, owner: str) -> str | None:
    """Claim and run one queued interview; its final status, or None when there was nothing to
    claim."""
    row = _claim(interview_id, owner)
    if row is None:
        return None
    world = row.world
    _, before = latest_hash(world)
    Interview.objects.filter(pk=row.pk).update(state_hash_before=before)
    try:
        point = branch_point({"world": world.slug, "turn": row.turn_number})
        states = turn_states(world=point.parent, numbers=[point.turn.number])
        branch = copy.deepcopy(states[point.turn.number])  # the throwaway branch's state
    except (ChukwaError, KeyError) as exc:
        _, after = latest_hash(world)
        _finish(row, error=("branch_unavailable", str(exc)[:2000]), after=after)
        return "failed"

    def progress(answers: list[dict[str, Any]]) -> None:
        Interview.objects.filter(pk=row.pk, status="running", lease_owner=row.lease_owner).update(
            answers=answers
        )

    # the lease is short (CHUKWA_ATTEMPT_LEASE_SECONDS) and renewed while the agents answer, as
    # a turn attempt's: a killed worker's interview is queued again within a lease, not after
    # the whole time limit
    with Heartbeat(row, renew=_renew):
        answers, error = interview_answers(
            world,
            row.turn_number,
            list(row.subjects),
            list(row.questions),
            row.source_hash,
            branch,
            on_answer=progress,
        )
    row.answers = answers
    _, after = latest_hash(world)
    _finish(row, error=error, after=after)
    return "failed" if error else "completed"


def interview_reap(*, now: datetime | None = None) -> dict[str, list[int]]:
    """Settle interviews left by killed workers and re-send lost ones: a running row whose lease
    expired is queued again (and sent), or failed with the reason once tried
    :data:`MAX_INTERVIEW_TRIES` times; a queued row older than :data:`REDRIVE_AFTER_SECONDS`
    is sent again (a duplicate message finds it claimed and does nothing)."""
    now = now or timezone.now()
    requeued: list[int] = []
    failed: list[int] = []
    expired = Interview.objects.filter(status="running", lease_expires_at__lt=now)
    for interview_id in list(expired.values_list("pk", flat=True)):
        with transaction.atomic():
            row = (
                Interview.objects.select_for_update()
                .filter(pk=interview_id, status="running", lease_expires_at__lt=now)
                .first()
            )
            if row is None:
                continue
            reason = (
                f"worker {row.lease_owner or '?'} stopped answering (lease expired at "
                f"{row.lease_expires_at.isoformat() if row.lease_expires_at else '?'})"
            )
            if row.tries >= MAX_INTERVIEW_TRIES:
                row.status, row.error_code = "failed", "worker_lost"
                row.error_message = f"{reason}; tried {row.tries} times"
                row.finished_at = now
                failed.append(row.pk)
            else:
                row.status, row.error_code, row.error_message = "queued", "", reason
                requeued.append(row.pk)
            row.lease_expires_at = None
            row.save(
                update_fields=[
                    "status",
                    "error_code",
                    "error_message",
                    "finished_at",
                    "lease_expires_at",
                ]
            )
    old = now - timedelta(seconds=REDRIVE_AFTER_SECONDS)
    lost = Interview.objects.filter(status="queued", created_at__lt=old).exclude(pk__in=requeued)
    sent: list[int] = []
    for interview_id in [*requeued, *lost.order_by("pk").values_list("pk", flat=True)[:500]]:
        try:
            interview_send(interview_id)
        except BROKER_ERRORS:
            break  # still queued: the next period sends it
        sent.append(interview_id)
    return {"requeued": requeued, "failed": failed, "sent": sent}
