"""Rows a worker runs under a lease, outside any turn attempt: interviews
(``interview_runs``) and biographies runs (``biography_runs``). Each is ``queued`` →
``running`` (its worker's name and a lease its heartbeat renews) → ended; the database is the
queue of record and a broker message only a wake-up call. The reaper's part is the same for
both: a running row whose lease expired (its worker was killed) is queued again and sent, or
failed once tried too often, and a queued row whose message was lost is sent again, so no row
is left ``running``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from worlds_app.services.claims import LeaseLost, lease_seconds
from worlds_app.services.dispatch import BROKER_ERRORS

# A queued row older than this with no worker on it is re-sent by the reaper.
REDRIVE_AFTER_SECONDS = 30


def claim_leased(
    model: type[models.Model], row_id: int, owner: str, *, keep_start: bool, **fields: Any
) -> Any | None:
    """Claim a queued row for this worker (``running``, a try more, a lease), setting
    ``fields`` too; its ``started_at`` now, or its first try's if ``keep_start``. None when it
    is not queued (finished, or another worker has it: a duplicate message)."""
    now = timezone.now()
    with transaction.atomic():
        row: Any = model._default_manager.select_for_update().filter(pk=row_id).first()
        if row is None or row.status != "queued":
            return None
        row.status = "running"
        row.tries += 1
        row.lease_owner = owner[:200]
        row.lease_expires_at = now + timedelta(seconds=lease_seconds())
        row.started_at = (row.started_at if keep_start else None) or now
        for name, value in fields.items():
            setattr(row, name, value)
        claimed = ["status", "tries", "lease_owner", "lease_expires_at", "started_at"]
        row.save(update_fields=[*claimed, *fields])
        return row


def renew_row_lease(model: type[models.Model], row: Any) -> None:
    """The heartbeat's renewal of a running row's lease (``claims.Heartbeat``); LeaseLost once
    the row is no longer this worker's."""
    renewed = model._default_manager.filter(
        pk=row.pk, status="running", lease_owner=row.lease_owner
    ).update(lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds()))
    if not renewed:
        raise LeaseLost(f"{model._meta.verbose_name} {row.pk}")


def reap_leased(
    model: type[models.Model],
    *,
    now: datetime | None,
    max_tries: int,
    send: Callable[[int], None],
    on_expired: Callable[[Any, str], None] | None = None,
    failed_fields: dict[str, Any] | None = None,
    failed_note: str = "",
) -> dict[str, list[int]]:
    """Settle ``model``'s rows left by killed workers and re-send lost ones: a running row whose
    lease expired is queued again (and sent), or failed (``worker_lost``, with
    ``failed_fields``) once tried ``max_tries`` times, after ``on_expired(row, reason)``; a
    queued row older than :data:`REDRIVE_AFTER_SECONDS` is sent again (a duplicate message finds
    it claimed and does nothing)."""
    now = now or timezone.now()
    rows: Any = model._default_manager
    requeued: list[int] = []
    failed: list[int] = []
    expired = rows.filter(status="running", lease_expires_at__lt=now)
    for row_id in list(expired.values_list("pk", flat=True)):
        with transaction.atomic():
            row: Any = (
                rows.select_for_update()
                .filter(pk=row_id, status="running", lease_expires_at__lt=now)
                .first()
            )
            if row is None:
                continue
            reason = (
                f"worker {row.lease_owner or '?'} stopped answering (lease expired at "
                f"{row.lease_expires_at.isoformat() if row.lease_expires_at else '?'})"
            )
            if on_expired is not None:
                on_expired(row, reason)
            fields = ["status", "error_code", "error_message", "finished_at", "lease_expires_at"]
            if row.tries >= max_tries:
                row.status, row.error_code = "failed", "worker_lost"
                row.error_message = f"{reason}; tried {row.tries} times{failed_note}"
                row.finished_at = now
                for name, value in (failed_fields or {}).items():
                    setattr(row, name, value)
                    fields.append(name)
                failed.append(row.pk)
            else:
                row.status, row.error_code, row.error_message = "queued", "", reason
                requeued.append(row.pk)
            row.lease_expires_at = None
            row.save(update_fields=fields)
    old = now - timedelta(seconds=REDRIVE_AFTER_SECONDS)
    lost = rows.filter(status="queued", created_at__lt=old).exclude(pk__in=requeued)
    sent: list[int] = []
    for row_id in [*requeued, *lost.order_by("pk").values_list("pk", flat=True)[:500]]:
        try:
            send(row_id)
        except BROKER_ERRORS:
            break  # still queued: the next period sends it
        sent.append(row_id)
    return {"requeued": requeued, "failed": failed, "sent": sent}
