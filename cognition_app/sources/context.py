"""Where a source call is made: the attempt, world, turn, node and subject its rows carry, and
what the worlds layer hands down to it (replay, budget, cancellation, the recorder)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from cognition_app.budgets import BudgetLedger
from cognition_app.models import SourceInvocation
from cognition_app.recording import DIRECT, Recorder
from cognition_app.sources.cancel import CancelScope


class ReplaySource(Protocol):
    """What a call needs of its world's replay (``cognition_app.sources.replay.Replay``)."""

    source_world_slug: str
    strict: bool

    def take(self, key: str) -> SourceInvocation | None: ...


# The lanes of a call at every limit (``CallContext.lane``).
INTERACTIVE = "interactive"
EXPERIMENT = "experiment"
JUDGE = "judge"


@dataclass
class CallContext:
    attempt_id: UUID | None  # None outside any attempt (a metric's judge)
    # None outside any world: a population's biography calls (kind ``biography``)
    world_id: int | None
    world_slug: str
    attempted_turn: int
    next_seq: Callable[[], int]
    workflow_hash: str = ""
    node_id: str = ""
    subject_id: str = ""
    ambient_source_id: str = ""
    tool_name: str = ""
    parent_id: UUID | None = None
    generation_attempt: int | None = None
    tool_loop_round: int | None = None
    # a later try of a call (its source's ``retry`` policy): the first try's row
    retry_of: UUID | None = None
    # the world's seed (chukwa_core.seeds): an LLM call whose source fixes no seed sends one
    # derived from it; None for an unseeded world
    world_seed: int | None = None
    # Set when the world replays another: the worlds layer decides which recordings
    # count and hands them down here, since this layer may not look up worlds.
    replay: ReplaySource | None = None
    # the world's ``reuse`` is "exact": an LLM call whose whole request equals a recorded
    # succeeded call's is answered from it (cognition_app.sources.reuse)
    reuse: bool = False
    # the world's budget in force for this attempt, handed down by the worlds layer,
    # with what the attempt's calls in flight could still spend
    budget: BudgetLedger | None = None
    # stops the calls of subjects still thinking once another subject failed
    cancel: CancelScope | None = None
    # how the call's rows are written (``cognition_app.recording``): the attempt's recorder,
    # which writes its pending events with each opening and finishes on its writer thread
    recorder: Recorder = DIRECT
    # the call's lane at every limit (cognition_app.sources.admission.priority): an
    # ``interactive`` turn's call is served before queued ``experiment`` and ``judge`` calls
    lane: str = INTERACTIVE
    # who the call is for, as a call waiting for a slot names its holder ("world w's turn 3",
    # "experiment e's judge plausible on world w, turn 2")
    who: str = ""
    # told, as the call waits for capacity, what it waits for ("" once it holds it)
    on_wait: Callable[[str], None] | None = None
    # non-empty: nobody waits for this call. A source declaring ``interface.batch`` sends it
    # through the provider's Batch API, owned by this owner (``experiment:<id>``,
    # ``world:<id>``): ``invoke_llm`` raises ``cognition_app.batches.BatchPending`` until the
    # batch's answer is in (cognition_app.sources.llm_batch)
    batch_owner: str = ""

    def check_cancelled(self, what: str) -> None:
        if self.cancel is not None:
            self.cancel.check(what)

    def headers(self, invocation_id: UUID) -> dict[str, str]:
        return {
            "X-Chukwa-World": self.world_slug,
            "X-Chukwa-Attempt": str(self.attempt_id or ""),
            "X-Chukwa-Turn": str(self.attempted_turn),
            "X-Chukwa-Subject": self.subject_id,
            "X-Chukwa-Invocation": str(invocation_id),
        }
