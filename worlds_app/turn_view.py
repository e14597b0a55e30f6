"""The turn view: one committed turn of a world as the JSON every metric reads
(docs/measurement.md, "The turn view").

```
{"world": slug, "turn": n, "simulation_time": ISO 8601,
 "entities": {id: {"kind": "agent" | "prop", "environment", "state", "memory": [lines]}},
 "environments": {label: {"content"}},
 "patches": [{"subject", "narration", "effects"}],
 "calls": [{"subject", "source", "kind", "status"}],
 "tokens": int, "cost": number | null}
```

``patches`` are the turn's patches in the order they were applied (an operator's intervention
first, ``subject`` null); ``calls`` every source call of the attempt that committed the turn, in
the order they were opened (``source``: a tool call's tool name, else the source's label;
``kind``: the source's interface); ``tokens`` and ``cost`` are those calls' (prompt and
completion tokens; ``cost`` null when a call had no price). A world's first turn (turn 0) has
no patches and no calls. A branch's turns before its branch point are its parent's, and its
first turn (a copy of the parent's state) shows the parent's patches and calls of that turn.

Views of any number of turns are read with five queries (``turn_views``).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any, TypedDict

from chukwa_core.errors import NotFoundError
from chukwa_core.world_state import is_agent
from cognition_app.models import SourceInvocation
from scenarios_app.selectors import source_interfaces
from worlds_app.history import Owners, first_turn, history_owners
from worlds_app.models import AttemptEvent, EventKind, Turn, World
from worlds_app.selectors import require_slug, require_turn_number


class EntityView(TypedDict):
    kind: str
    environment: str
    state: str
    memory: list[str]


class EnvironmentView(TypedDict):
    content: str


class PatchView(TypedDict):
    subject: str | None
    narration: str
    effects: list[dict[str, Any]]


class CallView(TypedDict):
    subject: str | None
    source: str
    kind: str
    status: str


class TurnView(TypedDict):
    world: str
    turn: int
    simulation_time: str
    entities: dict[str, EntityView]
    environments: dict[str, EnvironmentView]
    patches: list[PatchView]
    calls: list[CallView]
    tokens: int
    cost: float | None


def _entities(state: dict[str, Any]) -> dict[str, EntityView]:
    views: dict[str, EntityView] = {}
    for entity in state["entities"]:
        memory = entity["kind"]["agent"].get("memory", "") if is_agent(entity) else ""
        views[entity["id"]] = {
            "kind": "agent" if is_agent(entity) else str(entity["kind"]),
            "environment": entity["environment"],
            "state": entity.get("state", ""),
            "memory": [line for line in memory.split("\n") if line] if memory else [],
        }
    return views


def _patches(attempt_ids: set[Any]) -> dict[Any, list[PatchView]]:
    """Each attempt's applied patches, in order: one query."""
    patches: dict[Any, list[PatchView]] = {}
    rows = (
        AttemptEvent.objects.filter(attempt_id__in=attempt_ids, kind=EventKind.WORLD_PATCH_APPLIED)
        .order_by("attempt_id", "seq")
        .values_list("attempt_id", "subject_id", "payload")
    )
    for attempt_id, subject, payload in rows:
        patch = payload.get("patch", {})
        patches.setdefault(attempt_id, []).append(
            {
                "subject": subject or None,
                "narration": patch.get("narration", ""),
                "effects": list(patch.get("effects", [])),
            }
        )
    return patches


class _Calls(TypedDict):
    calls: list[CallView]
    tokens: int
    cost: Decimal
    unpriced: bool


def _calls(attempt_ids: set[Any]) -> dict[Any, _Calls]:
    """Each attempt's source calls in order, with their LLM calls' tokens and cost: two queries
    (the calls, then the interfaces of the sources they name)."""
    rows = list(
        SourceInvocation.objects.filter(attempt_id__in=attempt_ids)
        .order_by("attempt_id", "seq")
        .values_list(
            "attempt_id",
            "subject_id",
            "source_hash",
            "source_label",
            "tool_name",
            "status",
            "llm_call__id",
            "llm_call__prompt_tokens",
            "llm_call__completion_tokens",
            "llm_call__cost",
        )
    )
    interfaces = source_interfaces(source_hashes={row[2] for row in rows})
    found: dict[Any, _Calls] = {}
    for attempt_id, subject, source, label, tool, status, call, prompt, completion, cost in rows:
        entry = found.setdefault(
            attempt_id, {"calls": [], "tokens": 0, "cost": Decimal(0), "unpriced": False}
        )
        entry["calls"].append(
            {
                "subject": subject or None,
                "source": tool or label,
                "kind": interfaces.get(source, ""),
                "status": status,
            }
        )
        if call is not None:
            entry["tokens"] += (prompt or 0) + (completion or 0)
            if cost is None:
                entry["unpriced"] = True
            else:
                entry["cost"] += cost
    return found


def _picked(world: World, numbers: Iterable[int]) -> dict[int, tuple[dict[str, Any], Any]]:
    """Per committed turn among ``numbers``: its turn row (state, time) and the attempt whose
    patches and calls it shows."""
    owners: Owners = history_owners(world)
    wanted = sorted({n for n in numbers if first_turn(owners) <= n <= world.current_turn})
    if not wanted:
        return {}
    rows: dict[tuple[int, int], dict[str, Any]] = {
        (row["world_id"], row["number"]): dict(row)
        for row in Turn.objects.filter(
            world_id__in=[world_id for world_id, _ in owners], number__in=wanted
        ).values("world_id", "number", "simulation_time", "state", "attempt_id")
    }
    picked: dict[int, tuple[dict[str, Any], Any]] = {}
    for number in wanted:
        # The state is the newest owner's holding the turn; the patches and calls are those of
        # the attempt that committed it, which for a branch's first turn (a copy, no attempt)
        # is its parent's.
        holders = [rows.get((world_id, number)) for world_id, start in owners if number >= start]
        held = [row for row in holders if row is not None]
        if not held:
            continue
        attempt = next((row["attempt_id"] for row in held if row["attempt_id"]), None)
        picked[number] = (held[0], attempt)
    return picked


def turn_states(*, world: World, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The world state snapshots of a world's committed turns among ``numbers`` (an
    interviewed subject's own view is rendered from them)."""
    return {number: row["state"] for number, (row, _) in _picked(world, numbers).items()}


def turn_views(*, world: World, numbers: Iterable[int]) -> dict[int, TurnView]:
    """The views of a world's committed turns among ``numbers`` (those it has none of are left
    out), read with five queries whatever their count (and one more per branch parent)."""
    picked = _picked(world, numbers)
    if not picked:
        return {}
    attempt_ids = {attempt for _, attempt in picked.values() if attempt is not None}
    patches = _patches(attempt_ids) if attempt_ids else {}
    calls = _calls(attempt_ids) if attempt_ids else {}
    views: dict[int, TurnView] = {}
    for number, (row, attempt) in picked.items():
        spent = calls.get(attempt)
        cost: float | None = 0.0
        if spent is not None:
            cost = None if spent["unpriced"] else float(spent["cost"])
        state = row["state"]
        views[number] = {
            "world": world.slug,
            "turn": number,
            "simulation_time": row["simulation_time"].isoformat(),
            "entities": _entities(state),
            "environments": {
                label: {"content": text} for label, text in state["environments"].items()
            },
            "patches": patches.get(attempt, []),
            "calls": spent["calls"] if spent else [],
            "tokens": spent["tokens"] if spent else 0,
            "cost": cost,
        }
    return views


def turn_view(*, slug: str, number: int) -> TurnView:
    """The view of one committed turn of a world; 404 when the world has no such turn."""
    require_slug(slug)
    require_turn_number(number)
    world = World.objects.select_related("branch_parent").filter(slug=slug).first()
    if world is None:
        raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
    views = turn_views(world=world, numbers=[number])
    if number not in views:
        raise NotFoundError(
            "turn_not_found",
            f"number: world {slug!r} has no committed turn {number} "
            f"(current: {world.current_turn})",
            {"field": "number"},
        )
    return views[number]
