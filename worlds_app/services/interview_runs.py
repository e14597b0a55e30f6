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
from datetime import datetime
from typing import Any

from django.utils import timezone

from chukwa_core.errors import ChukwaError
from worlds_app.models import Interview
from worlds_app.services.branches import branch_point
from worlds_app.services.claims import Heartbeat
from worlds_app.services.dispatch import interview_send
from worlds_app.services.interviews import interview_answers, latest_hash
from worlds_app.services.leased_rows import claim_leased, reap_leased, renew_row_lease
from worlds_app.turn_view import turn_states

logger = logging.getLogger(__name__)

MAX_INTERVIEW_TRIES = 2


def _renew(row: Interview) -> None:
    """The heartbeat's renewal of a running interview's lease (``claims.Heartbeat``)."""
    renew_row_lease(Interview, row)


def _claim(interview_id: int, owner: str) -> Interview | None:
    # a retry asks again from the start
    row: Interview | None = claim_leased(
        Interview, interview_id, owner, keep_start=False, answers=[]
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
    :data:`MAX_INTERVIEW_TRIES` times; a queued row older than a while is sent again (a
    duplicate message finds it claimed and does nothing)."""
    return reap_leased(Interview, now=now, max_tries=MAX_INTERVIEW_TRIES, send=interview_send)
