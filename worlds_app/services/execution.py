"""Executing one turn attempt against its working world (SPEC §6): once-per-turn ambient
sources, then each subject's workflow, each patch validated against the working world and
applied, with the events and transitions staged for the commit. Nothing here writes world state.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple
from uuid import UUID

from chukwa_core import clock, log_context
from chukwa_core.patching import PatchRejected, Transition, apply_patch, validate_patch
from chukwa_core.world_state import WorldState
from cognition_app.ambient import (
    AmbientResult,
    inject,
    invoke_ambient,
    runs_for_subject,
    visible_tree,
)
from cognition_app.models import SourceInvocation
from cognition_app.runner import run_subject_workflow
from cognition_app.sources import REPLAY_STRICT, CallContext, Replay, SourceFailure
from cognition_app.subject_run import AttemptFailure, StagedEvent, SubjectRun, TurnContext
from worlds_app.models import AttemptStatus, Turn, TurnAttempt, World
from worlds_app.selectors import world_budget_limits


class StagedTransition(NamedTuple):
    patch_seq: int
    subject_id: str
    node_id: str
    workflow_hash: str
    transition: Transition
    invocation_id: UUID | None
    llm_call_id: UUID | None


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


def _replay_for(world: World) -> Replay | None:
    """The world's replay source (SPEC §12), as the recordings and earlier uses that count:
    both from committed attempts only, so the replay follows the committed history and a failed
    attempt's retry reuses what the failed attempt used."""
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


def turn_attempt_execute(
    *, attempt: TurnAttempt, previous: Turn, events: list[StagedEvent]
) -> tuple[WorldState, list[StagedTransition], int]:
    """Run ambient sources and every subject against the working copy. Returns the working
    world, the staged transitions and the patch count. Nothing here writes world state."""
    world = attempt.world
    working = WorldState.from_snapshot(previous.state)
    try:
        simulation_time = clock.advance(previous.simulation_time, world.chronon_seconds)
    except clock.CalendarOverflow as exc:
        # Before any source is called: the turn cannot be committed, so it is not run.
        raise AttemptFailure("calendar", str(exc)) from None
    attempted_turn = attempt.attempted_turn or previous.number + 1
    ctx = TurnContext(
        world_slug=world.slug,
        turn=previous.number,
        attempted_turn=attempted_turn,
        simulation_time=simulation_time.isoformat(),
    )
    counter = itertools.count(1)
    replay = _replay_for(world)
    # Read once: a budget changed while the attempt runs applies from the next attempt.
    budget = world_budget_limits(world_id=world.pk)

    def make_call_context(**fields: Any) -> CallContext:
        return CallContext(
            attempt_id=attempt.pk,
            world_id=world.pk,
            world_slug=world.slug,
            attempted_turn=attempted_turn,
            next_seq=lambda: next(counter),
            replay=replay,
            budget=budget,
            **fields,
        )

    request_context: dict[str, Any] = {
        "world": {
            "slug": world.slug,
            "turn": previous.number,
            "attempted_turn": attempted_turn,
            "simulation_time": ctx.simulation_time,
        },
        "ambient": {},
    }
    ambient_results: list[AmbientResult] = []

    def run_ambient(
        source: dict[str, Any], workflow_hash: str, subject: dict[str, Any] | None
    ) -> None:
        context = request_context
        if subject is not None:
            context = {
                **request_context,
                "subject": {"id": subject["id"], "environment": subject["environment"]},
            }
        try:
            with log_context.bound(subject=subject["id"] if subject is not None else None):
                result = invoke_ambient(
                    source=source,
                    workflow_hash=workflow_hash,
                    request_context=context,
                    make_ctx=make_call_context,
                    subject_id=subject["id"] if subject is not None else "",
                )
        except SourceFailure as exc:
            raise AttemptFailure(
                "ambient",
                f"ambient source {source['id']!r}: {exc.failure_class}: {exc.message}",
                subject_id=subject["id"] if subject is not None else "",
                invocation_id=exc.invocation_id,
            ) from None
        ambient_results.append(result)
        inject(request_context, source["inject_as"], result.value)
        events.append(
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
                subject_id=subject["id"] if subject is not None else "",
                workflow_hash=workflow_hash,
                invocation_id=result.invocation_id,
            )
        )

    agents = working.agents()
    seen_workflows: set[str] = set()
    for subject in agents:  # once per turn, once per distinct workflow, before any subject
        workflow, workflow_hash = _workflow_for(world, subject)
        if workflow_hash in seen_workflows:
            continue
        seen_workflows.add(workflow_hash)
        for source in workflow["ambient_sources"]:
            if source["run"] == "once_per_turn":
                run_ambient(source, workflow_hash, None)

    staged: list[StagedTransition] = []
    patch_seq = 0
    for subject in agents:
        workflow, workflow_hash = _workflow_for(world, subject)
        for source in workflow["ambient_sources"]:
            if source["run"] == "before_subject_workflow" and runs_for_subject(source, subject):
                run_ambient(source, workflow_hash, subject)
        run = SubjectRun(
            subject_id=subject["id"],
            workflow=workflow,
            workflow_hash=workflow_hash,
            world=working,
            ctx=ctx,
            events=events,
            ambient=visible_tree(ambient_results, working.entities[subject["id"]]),
            make_call_context=make_call_context,
        )
        patch, node_id = run_subject_workflow(run)
        try:
            validate_patch(patch, working)
        except PatchRejected as exc:
            raise AttemptFailure(
                "patch_validation", exc.message, subject_id=subject["id"], node_id=node_id
            ) from None
        transitions = apply_patch(patch, working)
        patch_seq += 1
        events.append(
            StagedEvent(
                "world_patch_applied",
                # the per-effect before/after lives in PatchTransition rows, written at commit
                {"patch": patch, "transition_count": len(transitions)},
                subject_id=subject["id"],
                node_id=node_id,
                workflow_hash=workflow_hash,
                patch_seq=patch_seq,
                invocation_id=run.last_invocation_id,
                llm_call_id=run.last_llm_call_id,
            )
        )
        staged.extend(
            StagedTransition(
                patch_seq,
                subject["id"],
                node_id,
                workflow_hash,
                t,
                run.last_invocation_id,
                run.last_llm_call_id,
            )
            for t in transitions
        )
    return working, staged, patch_seq
