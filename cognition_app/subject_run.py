"""What one subject's run carries: its context, where its events go and the failure that ends
an attempt. Shared by the runner and the node executors (data only, no execution)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import UUID

from chukwa_core.world_state import WorldState
from cognition_app.sources import CANCELLED, CallContext, SourceFailure


class AttemptFailure(Exception):
    """Fails the whole attempt before commit: nothing of the turn is kept but its traces."""

    def __init__(
        self,
        step: str,
        message: str,
        *,
        subject_id: str = "",
        node_id: str = "",
        invocation_id: UUID | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.message = message
        self.subject_id = subject_id
        self.node_id = node_id
        self.invocation_id = invocation_id


def failure_step(exc: SourceFailure, default: str) -> str:
    """The attempt's failure step for a failed source call: a call refused by the world's
    budget or stopped because another subject failed is named as such, so reviewers see at
    once that money (or another subject), not a backend, stopped it."""
    if exc.failure_class in ("budget_exhausted", CANCELLED):
        return exc.failure_class
    return default


@dataclass
class StagedEvent:
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    subject_id: str = ""
    node_id: str = ""
    workflow_hash: str = ""
    patch_seq: int | None = None
    content_hash: str = ""
    invocation_id: UUID | None = None
    llm_call_id: UUID | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


class EventSink(Protocol):
    """Where a run's events go: the worlds layer writes each one as it happens."""

    def append(self, event: StagedEvent, /) -> None: ...


@dataclass(frozen=True)
class TurnContext:
    world_slug: str
    turn: int
    attempted_turn: int
    simulation_time: str
    world_seed: int | None = None


@dataclass
class SubjectRun:
    subject_id: str
    workflow: Mapping[str, Any]
    workflow_hash: str
    world: WorldState
    ctx: TurnContext
    events: EventSink
    outputs: dict[str, Any] = field(default_factory=dict)
    # the ambient results this subject may see (the tree under /ambient)
    ambient: dict[str, Any] = field(default_factory=dict)
    # builds the trace context of a source call made while this subject runs
    make_call_context: Callable[..., CallContext] | None = None
    # the generation whose patch was accepted (links transitions to the LLM call)
    last_invocation_id: UUID | None = None
    last_llm_call_id: UUID | None = None

    def call_context(self, **fields: Any) -> CallContext:
        if self.make_call_context is None:
            raise AttemptFailure(
                "source", "this run has no source layer context", subject_id=self.subject_id
            )
        return self.make_call_context(
            workflow_hash=self.workflow_hash, subject_id=self.subject_id, **fields
        )
