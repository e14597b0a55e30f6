"""Closing the rows an attempt left open: every row opened is finished, by its call or here."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.db.models import QuerySet
from django.utils import timezone

from cognition_app.models import InvocationKind, InvocationStatus, LlmCall, SourceInvocation


def _close_running(attempt_id: UUID, status: str, failure_class: str, reason: str) -> int:
    return _close(
        SourceInvocation.objects.filter(attempt_id=attempt_id, status=InvocationStatus.RUNNING),
        status,
        failure_class,
        reason,
    )


def _close(
    running: QuerySet[SourceInvocation], status: str, failure_class: str, reason: str
) -> int:
    now = timezone.now()
    ids = list(running.values_list("pk", flat=True))
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


# calls made outside any attempt, by a task of their own (a judge, an interview, a biography)
_OUTSIDE_ATTEMPTS = (InvocationKind.JUDGE, InvocationKind.INTERVIEW, InvocationKind.BIOGRAPHY)


def interrupt_stale_unattached(*, started_before: datetime) -> int:
    """The reaper's part for calls outside any attempt: a judge's, an interview's or a
    biography's rows still ``running`` though started before ``started_before`` (longer ago
    than its task may run: its worker died) become ``interrupted``."""
    return _close(
        SourceInvocation.objects.filter(
            attempt__isnull=True,
            kind__in=_OUTSIDE_ATTEMPTS,
            status=InvocationStatus.RUNNING,
            started_at__lt=started_before,
        ),
        InvocationStatus.INTERRUPTED,
        "interrupted",
        "the worker stopped before the call ended",
    )


def interrupt_running_of(*, node_id: str, reason: str) -> int:
    """Rows outside any attempt, of the node ``node_id`` (a biographies run's), still
    ``running`` once their worker is known dead, become ``interrupted``."""
    return _close(
        SourceInvocation.objects.filter(
            attempt__isnull=True, node_id=node_id, status=InvocationStatus.RUNNING
        ),
        InvocationStatus.INTERRUPTED,
        "interrupted",
        reason,
    )
