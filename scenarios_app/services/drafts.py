"""Workflows and metrics as they would be stored, without storing them: the store's own put path inside a
transaction that is always rolled back (the author's validation as you type, the review before
saving, the preview)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction

from scenarios_app.models import CognitionWorkflow, Metric
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


def metric_draft(content: Any) -> tuple[str, dict[str, Any]]:
    """The metric ``content`` as the store would keep it — checked by the put's own validation
    (a ChukwaError naming the field), a judge's inline source resolved, its kind's defaults
    filled in — and its hash; nothing is stored."""

    def work() -> tuple[str, dict[str, Any]]:
        metric_hash, _ = Resolver().put_metric(content)
        stored = Metric.objects.values_list("content", flat=True).get(pk=metric_hash)
        return metric_hash, stored

    return nothing_stored(work)
