"""Executing one turn attempt against its working world.

Once-per-turn ambient sources; then phase 1, every subject whose workflow is ``concurrent``
thinking at the same time on the turn-start world, their patches applied afterwards in
subject-id order (a target set by two of them keeps the later value and is recorded as
contested); then phase 2, every ``per_subject_ordered`` subject one after another on the working
world. Events are written as they happen (``EventLog``); transitions are staged for the commit.
Nothing here writes world state.
"""

from __future__ import annotations

import copy
import itertools
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple
from uuid import UUID

from chukwa_core import clock, log_context
from chukwa_core.patching import PatchRejected, Transition, apply_patch, validate_patch_once
from chukwa_core.world_state import WorldState
from cognition_app.ambient import (
    AmbientResult,
    inject,
    invoke_ambient,
    runs_for_subject,
    visible_tree,
)
from cognition_app.budgets import BudgetLimits
from cognition_app.models import SourceInvocation
from cognition_app.runner import run_subject_workflow
from cognition_app.sources import REPLAY_STRICT, CallContext, CancelScope, Replay, SourceFailure
from cognition_app.sources.context import EXPERIMENT, INTERACTIVE
from cognition_app.subject_run import (
    AttemptFailure,
    StagedEvent,
    SubjectRun,
    TurnContext,
    failure_step,
)
from worlds_app.models import AttemptStatus, Intervention, Turn, TurnAttempt, World
from worlds_app.services.attempt_recorder import AttemptRecorder
from worlds_app.services.batch_mode import own_recordings, owner_of, resume_first_seq
from worlds_app.services.experiment_budget import budget_ledger
from worlds_app.services.interventions import pending_for
from worlds_app.services.subject_threads import think_concurrently

CONCURRENT = "concurrent"
# Targets a patch *sets* (an append to a memory adds to it: two appends both stay).
SET_TARGETS = frozenset({"entity_state", "environment"})


def attempt_waiting(attempt_id: UUID, waiting_for: str) -> None:
    """What the running attempt's call waits for now ("" once it holds its capacity), for the
    attempt page and the world page's live card."""
    TurnAttempt.objects.filter(pk=attempt_id, status=AttemptStatus.RUNNING).update(
        waiting_for=waiting_for[:300]
    )


class StagedTransition(NamedTuple):
    patch_seq: int
    subject_id: str
    node_id: str
    workflow_hash: str
    transition: Transition
    invocation_id: UUID | None
    llm_call_id: UUID | None
    intervention_id: int | None = None


class Execution(NamedTuple):
    """What executing an attempt produced, for its commit."""

    working: WorldState
    staged: list[StagedTransition]
    patch_count: int
    # the operator's intervention applied as patch_seq 1, consumed by the commit
    intervention_id: int | None = None


@dataclass
class Thought:
    """A subject's finished thinking: its patch, not yet applied."""

    subject_id: str
    workflow_hash: str
    patch: dict[str, Any]
    node_id: str
    invocation_id: UUID | None
    llm_call_id: UUID | None
    # its own before_subject_workflow results (phase 1 keeps them apart until it ends)
    ambient: list[AmbientResult] = field(default_factory=list)


def _workflow_for(world: World, subject: dict[str, Any]) -> tuple[dict[str, Any], str]:
    label = subject["kind"]["agent"]["cognition_profile"]
    profile = world.scenario_snapshot["cognition_profiles"].get(label)
    if profile is None:  # the scenario validator makes this impossible; be loud if it happens
        raise AttemptFailure(
            "workflow",
            f"agent {subject['id']!r} names profile {label!r}, which the world lacks",
            subject_id=subject["id"],
        )
    return profile["workflow"], profile["workflow_hash"]


def _replay_for(world: World, attempt: TurnAttempt) -> Replay | None:
    """The world's replay source, as the recordings and earlier uses that count:
    both from committed attempts only, so the replay follows the committed history and a failed
    attempt's retry reuses what the failed attempt used. An attempt resumed after parking
    (batch mode, which no world replaying another has) replays its own calls so far."""
    if attempt.parks:
        return Replay(
            source_world_slug=world.slug,
            strict=False,
            recorded=own_recordings(attempt),
            used=SourceInvocation.objects.none(),
        )
    if world.replay_from is None:
        return None
    if world.replay_source_id is None:
        raise AttemptFailure(
            "replay",
            f"world {world.replay_from['world']!r}, which this world replays, was deleted; "
            "its calls can be neither replayed nor silently sent live",
        )
    committed = SourceInvocation.objects.filter(attempt__status=AttemptStatus.COMMITTED)
    return Replay(
        source_world_slug=world.replay_from["world"],
        strict=world.replay_from["mode"] == REPLAY_STRICT,
        recorded=committed.filter(world_id=world.replay_source_id),
        used=committed.filter(world_id=world.pk),
    )


class _TurnRun:
    """One attempt's execution: the working world, the request context, the trace context."""

    def __init__(
        self,
        attempt: TurnAttempt,
        previous: Turn,
        recorder: AttemptRecorder,
        limits: BudgetLimits | None,
    ) -> None:
        world = self.world = attempt.world
        self.attempt = attempt
        self.recorder = recorder
        self.events = recorder.events
        self.working = WorldState.from_snapshot(previous.state)
        try:
            simulation_time = clock.advance(previous.simulation_time, world.chronon_seconds)
        except clock.CalendarOverflow as exc:
            # Before any source is called: the turn cannot be committed, so it is not run.
            raise AttemptFailure("calendar", str(exc)) from None
        self.attempted_turn = attempt.attempted_turn or previous.number + 1
        self.ctx = TurnContext(
            world_slug=world.slug,
            turn=previous.number,
            attempted_turn=self.attempted_turn,
            simulation_time=simulation_time.isoformat(),
            world_seed=world.seed,
        )
        # Invocation sequence numbers: unique and in the order the rows are opened, whichever
        # subject's thread opens them.
        # A resumed attempt's numbers follow those of its earlier runs (batch mode).
        self._counter = itertools.count(resume_first_seq(attempt))
        self._counter_lock = threading.Lock()
        self.replay = _replay_for(world, attempt)
        self.batch_owner = owner_of(world)
        # Read once, by the claim: a budget changed while the attempt runs applies from the next
        # attempt.
        self.budget = budget_ledger(limits, world.experiment_id)
        self.cancel = CancelScope()
        self.request_context: dict[str, Any] = {
            "world": {
                "slug": world.slug,
                "turn": previous.number,
                "attempted_turn": self.attempted_turn,
                "simulation_time": self.ctx.simulation_time,
            },
            "ambient": {},
        }
        self.ambient_results: list[AmbientResult] = []
        self.staged: list[StagedTransition] = []
        self.patch_seq = 0

    def next_seq(self) -> int:
        with self._counter_lock:
            return next(self._counter)

    def make_call_context(self, **fields: Any) -> CallContext:
        experiment = self.world.experiment_id is not None
        return CallContext(
            lane=EXPERIMENT if experiment else INTERACTIVE,
            who=(
                f"experiment world {self.world.slug}, turn {self.attempted_turn}"
                if experiment
                else f"world {self.world.slug}'s turn {self.attempted_turn}"
            ),
            on_wait=partial(attempt_waiting, self.attempt.pk),
            attempt_id=self.attempt.pk,
            world_id=self.world.pk,
            world_slug=self.world.slug,
            attempted_turn=self.attempted_turn,
            world_seed=self.world.seed,
            next_seq=self.next_seq,
            replay=self.replay,
            reuse=self.world.reuse == "exact",
            batch_owner=self.batch_owner,
            budget=self.budget,
            cancel=self.cancel,
            recorder=self.recorder,
            **fields,
        )

    # --- ambient sources -----------------------------------------------------------------

    def run_ambient(
        self,
        source: dict[str, Any],
        workflow_hash: str,
        subject: dict[str, Any] | None,
        request_context: dict[str, Any],
        results: list[AmbientResult],
    ) -> AmbientResult:
        subject_id = subject["id"] if subject is not None else ""
        context = request_context
        if subject is not None:
            context = {
                **request_context,
                "subject": {"id": subject["id"], "environment": subject["environment"]},
            }
        try:
            with log_context.bound(subject=subject_id or None):
                result = invoke_ambient(
                    source=source,
                    workflow_hash=workflow_hash,
                    request_context=context,
                    make_ctx=self.make_call_context,
                    subject_id=subject_id,
                )
        except SourceFailure as exc:
            raise AttemptFailure(
                failure_step(exc, "ambient"),
                f"ambient source {source['id']!r}: {exc.failure_class}: {exc.message}",
                subject_id=subject_id,
                invocation_id=exc.invocation_id,
            ) from None
        results.append(result)
        inject(request_context, source["inject_as"], result.value)
        self.events.append(
            StagedEvent(
                "ambient_source_invoked",
                {
                    "ambient_source_id": source["id"],
                    "run": source["run"],
                    "scope": source["scope"],
                    "visible_to": source["visible_to"],
                    "inject_as": source["inject_as"],
                    "result": result.value,
                },
                subject_id=subject_id,
                workflow_hash=workflow_hash,
                invocation_id=result.invocation_id,
            )
        )
        return result

    def run_once_per_turn_sources(self, agents: list[dict[str, Any]]) -> None:
        """Once per turn, once per distinct workflow, before any subject."""
        seen: set[str] = set()
        for subject in agents:
            workflow, workflow_hash = _workflow_for(self.world, subject)
            if workflow_hash in seen:
                continue
            seen.add(workflow_hash)
            for source in workflow["ambient_sources"]:
                if source["run"] == "once_per_turn":
                    self.run_ambient(
                        source, workflow_hash, None, self.request_context, self.ambient_results
                    )

    # --- the operator's intervention -----------------------------------------------------

    def apply_intervention(self, intervention: Intervention) -> None:
        """The intervention as the turn's first patch, by the kernel, before anyone thinks.
        Its targets are checked against this turn's world: a patch that does not fit fails
        the attempt (``intervention_invalid``) and stays pending for the next try."""
        patch = intervention.patch
        try:
            validate_patch_once(patch, self.working)
        except PatchRejected as exc:
            raise AttemptFailure(
                "intervention_invalid",
                f"intervention {intervention.pk} by operator {intervention.created_by!r} does "
                f"not fit turn {self.attempted_turn}'s world: {exc.message}",
            ) from None
        transitions = apply_patch(patch, self.working)
        self.patch_seq += 1
        seq = self.patch_seq
        self.events.append(
            StagedEvent(
                "world_patch_applied",
                {
                    "patch": patch,
                    "transition_count": len(transitions),
                    "intervention": {
                        "id": intervention.pk,
                        "operator": intervention.created_by,
                        "note": intervention.note,
                    },
                },
                patch_seq=seq,
            ),
            hold=True,
        )
        self.staged.extend(
            StagedTransition(seq, "", "", "", t, None, None, intervention.pk) for t in transitions
        )

    # --- subjects ------------------------------------------------------------------------

    def think(
        self,
        subject: dict[str, Any],
        request_context: dict[str, Any],
        results: list[AmbientResult],
    ) -> Thought:
        """The subject's before_subject_workflow sources, then its nodes, on ``self.working``
        as it is now (phase 1: the turn-start world, which nobody changes meanwhile)."""
        workflow, workflow_hash = _workflow_for(self.world, subject)
        own: list[AmbientResult] = []
        for source in workflow["ambient_sources"]:
            if source["run"] == "before_subject_workflow" and runs_for_subject(source, subject):
                own.append(
                    self.run_ambient(source, workflow_hash, subject, request_context, results)
                )
        run = SubjectRun(
            subject_id=subject["id"],
            workflow=workflow,
            workflow_hash=workflow_hash,
            world=self.working,
            ctx=self.ctx,
            events=self.events,
            ambient=visible_tree(results, self.working.entities[subject["id"]]),
            make_call_context=self.make_call_context,
        )
        patch, node_id = run_subject_workflow(run)
        self.events.flush_if_due()
        return Thought(
            subject["id"],
            workflow_hash,
            patch,
            node_id,
            run.last_invocation_id,
            run.last_llm_call_id,
            own,
        )

    def think_on_turn_start(self, subject: dict[str, Any]) -> Thought:
        """Phase 1, on a subject's own thread: its own copy of the context tree, so its
        before_subject_workflow results reach neither the other concurrent subjects nor the
        tree they read."""
        context = {
            **self.request_context,
            "ambient": copy.deepcopy(self.request_context["ambient"]),
        }
        with log_context.bound(subject=subject["id"]):
            return self.think(subject, context, list(self.ambient_results))

    def apply(self, thought: Thought, setters: dict[tuple[str, str], Any] | None = None) -> None:
        """Validate the patch against the working world, apply it, give it the next patch_seq.
        ``setters`` (phase 1): who set each target this turn, to record contested effects."""
        try:
            validate_patch_once(thought.patch, self.working)
        except PatchRejected as exc:
            raise AttemptFailure(
                "patch_validation",
                exc.message,
                subject_id=thought.subject_id,
                node_id=thought.node_id,
            ) from None
        transitions = apply_patch(thought.patch, self.working)
        self.patch_seq += 1
        seq = self.patch_seq
        self.events.append(
            StagedEvent(
                "world_patch_applied",
                # the per-effect before/after lives in PatchTransition rows, written at commit
                {"patch": thought.patch, "transition_count": len(transitions)},
                subject_id=thought.subject_id,
                node_id=thought.node_id,
                workflow_hash=thought.workflow_hash,
                patch_seq=seq,
                invocation_id=thought.invocation_id,
                llm_call_id=thought.llm_call_id,
            ),
            hold=True,
        )
        if setters is not None:
            self._record_contests(thought, seq, transitions, setters)
        self.staged.extend(
            StagedTransition(
                seq,
                thought.subject_id,
                thought.node_id,
                thought.workflow_hash,
                t,
                thought.invocation_id,
                thought.llm_call_id,
            )
            for t in transitions
        )

    def _record_contests(
        self,
        thought: Thought,
        seq: int,
        transitions: list[Transition],
        setters: dict[tuple[str, str], Any],
    ) -> None:
        for t in transitions:
            if t.target_kind not in SET_TARGETS:
                continue
            key = (t.target_kind, t.target_id)
            earlier = setters.get(key)
            setters[key] = (thought.subject_id, seq, t.after)
            if earlier is None or earlier[1] == seq:
                continue
            self.events.append(
                StagedEvent(
                    "effect_contested",
                    {
                        "target_kind": t.target_kind,
                        "target_id": t.target_id,
                        "op": t.op,
                        "kept": {
                            "subject_id": thought.subject_id,
                            "patch_seq": seq,
                            "value": t.after,
                        },
                        "overridden": {
                            "subject_id": earlier[0],
                            "patch_seq": earlier[1],
                            "value": earlier[2],
                        },
                    },
                    subject_id=thought.subject_id,
                    node_id=thought.node_id,
                    workflow_hash=thought.workflow_hash,
                    patch_seq=seq,
                    invocation_id=thought.invocation_id,
                    llm_call_id=thought.llm_call_id,
                ),
                hold=True,
            )


def turn_attempt_execute(
    *,
    attempt: TurnAttempt,
    previous: Turn,
    recorder: AttemptRecorder,
    limits: BudgetLimits | None,
) -> Execution:
    """Apply the turn's pending intervention, then run ambient sources and every subject
    against the working copy, under the budget ``limits`` in force (read with the claim).
    Returns the working world, the staged transitions, the patch count and the intervention
    applied. Nothing here writes world state."""
    turn = _TurnRun(attempt, previous, recorder, limits)
    # Looked up only when the world has one pending (the count comes with the claim).
    intervention = (
        pending_for(world_id=turn.world.pk, turn=turn.attempted_turn)
        if turn.world.pending_interventions
        else None
    )
    if intervention is not None:
        turn.apply_intervention(intervention)
    agents = turn.working.agents()
    turn.run_once_per_turn_sources(agents)
    concurrent = [s for s in agents if _workflow_for(turn.world, s)[0]["execution"] == CONCURRENT]
    ordered = [s for s in agents if _workflow_for(turn.world, s)[0]["execution"] != CONCURRENT]

    if concurrent:  # phase 1: at the same time, on the turn-start world
        thoughts = think_concurrently(concurrent, turn.think_on_turn_start, cancel=turn.cancel)
        setters: dict[tuple[str, str], Any] = {}
        for thought in thoughts:  # in subject-id order, as ``agents`` is
            turn.apply(thought, setters)
        # What they learned before thinking now stands as if they had run first, for phase 2.
        for thought in thoughts:
            for result in thought.ambient:
                turn.ambient_results.append(result)
                inject(turn.request_context, result.source["inject_as"], result.value)

    for subject in ordered:  # phase 2: one after another, each on the working world
        with log_context.bound(subject=subject["id"]):
            thought = turn.think(subject, turn.request_context, turn.ambient_results)
        turn.apply(thought)
    return Execution(
        turn.working,
        turn.staged,
        turn.patch_seq,
        intervention.pk if intervention is not None else None,
    )
