"""Closing the rows an attempt left open: every row opened is finished, by its call or here."""

from __future__ import annotations

from uuid import UUID

from django.utils import timezone

from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation


def _close_running(attempt_id: UUID, status: str, failure_class: str, reason: str) -> int:
    now = timezone.now()
    ids = list(
        SourceInvocation.objects.filter(
            attempt_id=attempt_id, status=InvocationStatus.RUNNING
        ).values_list("pk", flat=True)
    )
    if not ids:
        return 0
    SourceInvocation.objects.filter(pk__in=ids).update(
        status=status, ended_at=now, failure_class=failure_class, failure_message=reason
    )
    LlmCall.objects.filter(invocation_id__in=ids, status=InvocationStatus.RUNNING).update(
        status=status, ended_at=now, error=reason
    )
    return len(ids)


def interrupt_running(*, attempt_id: UUID, reason: str) -> int:
    """The reaper's part: running rows of a dead attempt become ``interrupted``."""
    return _close_running(attempt_id, InvocationStatus.INTERRUPTED, "interrupted", reason)


def finish_running(*, attempt_id: UUID, reason: str) -> int:
    """When an attempt fails, rows it left open become ``failed`` (every row opened is
    finished); normally there are none, since each call finishes its own rows."""
    return _close_running(attempt_id, InvocationStatus.FAILED, "attempt_ended", reason)
