"""The queue of batched requests itself (the rows, their states, the wait), below the sources
that enqueue into it; ``cognition_app.batches`` sends, polls and cancels them and is where
callers read these names from."""

from __future__ import annotations

from typing import Any

from cognition_app.models import BatchRequest

PENDING, SUBMITTED, COMPLETED, FAILED, CANCELLED = (
    "pending",
    "submitted",
    "completed",
    "failed",
    "cancelled",
)
# a batch's line that the provider dropped (in neither output file)
MISSING_LINE = "batch_line_missing"


class BatchPending(Exception):
    """A call sent through a provider batch whose answer is not in yet: it was enqueued (or was
    already), holds no slot, reserves no budget and wrote no LLM call row. Ask again once the
    batch ended (``request_id``: its BatchRequest)."""

    def __init__(self, request_id: Any, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.message = message


def batch_body(payload: dict[str, Any]) -> dict[str, Any]:
    """A chat request as a batch line carries it: not streamed."""
    return {k: v for k, v in payload.items() if k not in ("stream", "stream_options")}


def enqueue(
    *, source_hash: str, reuse_key: str, body: dict[str, Any], owner: str = ""
) -> BatchRequest:
    """The request's row: an identical one waiting or answered, else a new pending row."""
    existing = (
        BatchRequest.objects.filter(reuse_key=reuse_key, status__in=[PENDING, SUBMITTED, COMPLETED])
        .order_by("created_at")
        .first()
    )
    if existing is not None:
        return existing
    return BatchRequest.objects.create(
        source_hash=source_hash, reuse_key=reuse_key, body=batch_body(body), owner=owner
    )


def experiment_owner(experiment_id: int) -> str:
    """The owner of an experiment's batch requests (its judges' and, in batch mode, its
    worlds'): cancelling the experiment cancels them (``batches.cancel_owner``)."""
    return f"experiment:{experiment_id}"


def world_owner(world_id: int) -> str:
    """The owner of a world's own batch requests (its measurement judges outside any
    experiment)."""
    return f"world:{world_id}"
