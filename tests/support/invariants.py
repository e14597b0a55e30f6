"""Invariants of worlds, turns and attempts, checked over the whole database.

Used by the fault-injection test and by ``bench/fault_injection.py`` after workers were killed
and PostgreSQL and Redis restarted: whatever happened, the database must still tell one
consistent story. ``check_invariants`` returns the violations found (empty = all hold); each
names the rule, the world and what is wrong, so a failing run says what broke.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from chukwa_core.world_state import WorldState
from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from worlds_app.models import (
    AttemptEvent,
    AttemptStatus,
    EventKind,
    PatchTransition,
    Turn,
    TurnAttempt,
    World,
)

FINISHED = frozenset(
    {
        AttemptStatus.COMMITTED,
        AttemptStatus.FAILED,
        AttemptStatus.INTERRUPTED,
        AttemptStatus.CANCELLED,
    }
)


@dataclass(frozen=True)
class Violation:
    rule: str
    world: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] world {self.world}: {self.detail}"


def check_invariants(*, settled: bool = True) -> list[Violation]:
    """Every rule over every world. ``settled``: the system has been left alone for longer
    than a lease plus a reaper period, so nothing may still be running or stranded."""
    violations: list[Violation] = []
    for world in World.objects.order_by("slug"):
        violations += _turns_of(world)
        violations += _attempts_of(world)
        if settled:
            violations += _settled(world)
    violations += _orphan_traces(settled=settled)
    return violations


def _turns_of(world: World) -> list[Violation]:
    """Turns 0…current_turn, each exactly once, each N > 0 from one committed attempt of this
    world that says it produced N, with an intact snapshot."""
    out: list[Violation] = []
    turns = list(
        Turn.objects.filter(world=world)
        .order_by("number")
        .values("number", "attempt_id", "state", "state_hash")
    )
    numbers = [t["number"] for t in turns]
    if numbers != list(range(world.current_turn + 1)):
        out.append(
            Violation(
                "contiguous_turns",
                world.slug,
                f"turns {numbers} but current_turn is {world.current_turn}",
            )
        )
    attempts = {
        a["id"]: a
        for a in TurnAttempt.objects.filter(world=world).values(
            "id", "status", "produced_turn", "seq"
        )
    }
    previous_seq = 0
    for turn in turns:
        if WorldState.from_snapshot(turn["state"]).snapshot_hash() != turn["state_hash"]:
            out.append(
                Violation("turn_snapshot", world.slug, f"turn {turn['number']}: hash mismatch")
            )
        if turn["number"] == 0:
            continue
        attempt = attempts.get(turn["attempt_id"])
        if attempt is None:
            out.append(
                Violation(
                    "turn_from_attempt",
                    world.slug,
                    f"turn {turn['number']} names attempt {turn['attempt_id']} of another world",
                )
            )
            continue
        if attempt["status"] != AttemptStatus.COMMITTED:
            out.append(
                Violation(
                    "turn_from_attempt",
                    world.slug,
                    f"turn {turn['number']} comes from attempt {attempt['id']} "
                    f"which is {attempt['status']}",
                )
            )
        if attempt["produced_turn"] != turn["number"]:
            out.append(
                Violation(
                    "turn_from_attempt",
                    world.slug,
                    f"turn {turn['number']}'s attempt {attempt['id']} says it produced "
                    f"{attempt['produced_turn']}",
                )
            )
        if attempt["seq"] <= previous_seq:
            out.append(
                Violation(
                    "attempt_order",
                    world.slug,
                    f"turn {turn['number']} comes from attempt seq {attempt['seq']}, not after "
                    f"seq {previous_seq} of the turn before",
                )
            )
        previous_seq = attempt["seq"]
    return out


def _attempts_of(world: World) -> list[Violation]:
    """Committed attempts have their turn, events and transitions; no other attempt left a
    turn, a commit event or a transition behind; a batch stops at its first failure."""
    out: list[Violation] = []
    attempts = list(
        TurnAttempt.objects.filter(world=world)
        .order_by("seq")
        .values("id", "status", "produced_turn", "batch_id", "batch_index")
    )
    turn_of = dict(
        Turn.objects.filter(world=world, number__gt=0).values_list("attempt_id", "number")
    )
    committed_events = _count_by_attempt(
        AttemptEvent.objects.filter(attempt__world=world, kind=EventKind.TURN_COMMITTED)
    )
    transition_turns: dict[Any, set[int]] = defaultdict(set)
    for attempt_id, number in PatchTransition.objects.filter(world=world).values_list(
        "attempt_id", "turn_number"
    ):
        transition_turns[attempt_id].add(number)
    committed = 0
    for a in attempts:
        if a["status"] == AttemptStatus.COMMITTED:
            committed += 1
            if turn_of.get(a["id"]) is None or turn_of[a["id"]] != a["produced_turn"]:
                out.append(
                    Violation(
                        "committed_has_turn",
                        world.slug,
                        f"committed attempt {a['id']} (produced_turn {a['produced_turn']}) "
                        f"has turn {turn_of.get(a['id'])}",
                    )
                )
            if committed_events.get(a["id"], 0) != 1:
                out.append(
                    Violation(
                        "committed_has_turn",
                        world.slug,
                        f"committed attempt {a['id']} has "
                        f"{committed_events.get(a['id'], 0)} turn_committed events",
                    )
                )
            if transition_turns.get(a["id"], {a["produced_turn"]}) != {a["produced_turn"]}:
                out.append(
                    Violation(
                        "no_partial_turn",
                        world.slug,
                        f"attempt {a['id']} has transitions for turns "
                        f"{sorted(transition_turns[a['id']])}, not only {a['produced_turn']}",
                    )
                )
        else:
            leftovers = []
            if a["id"] in turn_of:
                leftovers.append(f"turn {turn_of[a['id']]}")
            if a["produced_turn"] is not None:
                leftovers.append(f"produced_turn {a['produced_turn']}")
            if committed_events.get(a["id"]):
                leftovers.append("a turn_committed event")
            if a["id"] in transition_turns:
                leftovers.append("patch transitions")
            if leftovers:
                out.append(
                    Violation(
                        "no_partial_turn",
                        world.slug,
                        f"{a['status']} attempt {a['id']} left {', '.join(leftovers)}",
                    )
                )
    if committed != world.current_turn:
        out.append(
            Violation(
                "committed_has_turn",
                world.slug,
                f"{committed} committed attempts for current_turn {world.current_turn}",
            )
        )
    out += _batches(world, attempts)
    return out


def _batches(world: World, attempts: list[dict[str, Any]]) -> list[Violation]:
    """After a failed or interrupted attempt, nothing later in its batch ran."""
    out: list[Violation] = []
    by_batch: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for a in attempts:
        by_batch[a["batch_id"]].append(a)
    for batch in by_batch.values():
        stopped_at: int | None = None
        for a in sorted(batch, key=lambda a: a["batch_index"]):
            if stopped_at is not None and a["status"] in (
                AttemptStatus.COMMITTED,
                AttemptStatus.RUNNING,
                AttemptStatus.FAILED,
            ):
                out.append(
                    Violation(
                        "batch_stops_at_failure",
                        world.slug,
                        f"attempt {a['id']} (batch index {a['batch_index']}) is {a['status']} "
                        f"after index {stopped_at} ended the batch",
                    )
                )
            if stopped_at is None and a["status"] in (
                AttemptStatus.FAILED,
                AttemptStatus.INTERRUPTED,
            ):
                stopped_at = a["batch_index"]
    return out


def _settled(world: World) -> list[Violation]:
    """Left alone long enough: nothing runs, and no queued attempt waits with nothing running."""
    out: list[Violation] = []
    statuses = _count_by(TurnAttempt.objects.filter(world=world), "status")
    if statuses.get(AttemptStatus.RUNNING):
        out.append(Violation("nothing_left_running", world.slug, "an attempt is still running"))
    elif statuses.get(AttemptStatus.QUEUED):
        out.append(
            Violation(
                "no_stranded_world",
                world.slug,
                f"{statuses[AttemptStatus.QUEUED]} queued attempt(s) and nothing running",
            )
        )
    return out


def _orphan_traces(*, settled: bool) -> list[Violation]:
    """Invocations and LLM calls are finished once their attempt is (the reaper interrupts
    those of dead workers); settled, none is running at all."""
    out: list[Violation] = []
    running = SourceInvocation.objects.filter(status=InvocationStatus.RUNNING)
    calls = LlmCall.objects.filter(status=InvocationStatus.RUNNING)
    if not settled:
        running = running.filter(attempt__status__in=FINISHED)
        calls = calls.filter(invocation__attempt__status__in=FINISHED)
    for slug, invocation_id, kind in running.values_list("world__slug", "id", "kind"):
        out.append(
            Violation("nothing_left_running", slug, f"{kind} invocation {invocation_id} running")
        )
    for slug, call_id in calls.values_list("invocation__world__slug", "id"):
        out.append(Violation("nothing_left_running", slug, f"LLM call {call_id} running"))
    return out


def _count_by_attempt(events: Any) -> dict[Any, int]:
    counts: dict[Any, int] = defaultdict(int)
    for attempt_id in events.values_list("attempt_id", flat=True):
        counts[attempt_id] += 1
    return counts


def _count_by(queryset: Any, field: str) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in queryset.values_list(field, flat=True):
        counts[value] += 1
    return counts
