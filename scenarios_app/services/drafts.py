"""Workflows as they would be stored, without storing them: the store's own put path inside a
transaction that is always rolled back (the author's validation as you type, the review before
saving, the preview)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction

from scenarios_app.models import CognitionWorkflow
from scenarios_app.services._store import Resolver

T = TypeVar("T")


def nothing_stored(work: Callable[[], T]) -> T:
    """Run ``work`` in a transaction that is always rolled back: whatever it puts is gone after,
    while everything it reads inside sees what it put."""
    with transaction.atomic():
        try:
            return work()
        finally:
            transaction.set_rollback(True)


def workflow_draft(content: Any) -> tuple[str, bool, dict[str, Any]]:
    """Put ``content`` as the store would (inline parts resolved, validated), inside the caller's
    :func:`nothing_stored`: (its hash, whether it would be a new row, the stored content)."""
    workflow_hash, would_be_new = Resolver().put_workflow(content)
    stored = CognitionWorkflow.objects.values_list("content", flat=True).get(pk=workflow_hash)
    return workflow_hash, would_be_new, stored
