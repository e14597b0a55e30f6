"""Two worlds side by side, turn by turn over their common turns.

A turn's ``state_hash`` is the hash of its whole state (environments and entities), so two turns
are identical exactly when their hashes are equal: the first divergent turn comes from the hashes
of the common range alone (one narrow query, whatever the history length), and full states are
read only for the page of turns asked for (one query, streamed in turn order). The metrics both
worlds were measured with are compared too: each turn's value and each world's aggregate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict

from chukwa_core.errors import NotFoundError
from cognition_app.models import InvocationKind, SourceInvocation
from scenarios_app.selectors import parse_paging
from worlds_app.history import first_turn, history_owners, owner_of
from worlds_app.measurement_selectors import world_metric_series
from worlds_app.models import AttemptStatus, Turn, World
from worlds_app.selectors import require_slug

# Values longer than this are cut (and marked ``truncated``): a page of hundreds of turns with
# long memories and narrations must stay a sensible size.
MAX_VALUE_CHARS = 2000


class ValueDiff(TypedDict):
    left: str | None
    right: str | None
    # Characters both values share before ``left``/``right`` start (memories: whole lines).
    common_prefix_chars: int
    truncated: bool


class EntityDiff(TypedDict):
    id: str
    present_in: str  # "both" | "left" | "right"
    state: ValueDiff | None
    memory: ValueDiff | None
    # Other entity fields that differ (name, environment, kind…), by name.
    other_fields: list[str]


class EnvironmentDiff(ValueDiff):
    label: str


class ToolCallDiff(TypedDict):
    # each side's tool calls in the order they were made: "subject: tool {arguments}"
    left: list[str]
    right: list[str]
    differ: bool


class TurnComparison(TypedDict):
    number: int
    identical: bool  # the states (tool calls may differ where states do not)
    left_state_hash: str
    right_state_hash: str
    entities: list[EntityDiff]
    environments: list[EnvironmentDiff]
    tool_calls: ToolCallDiff


class MetricTurn(TypedDict):
    turn: int
    # each world's value that turn (None: not measured, or an error, named by its code)
    world: Any
    other: Any
    world_error: str | None
    other_error: str | None


class MetricComparison(TypedDict):
    """A metric measured on both worlds (an experiment's metrics on its paired worlds): each
    turn's value side by side (the newest SERIES_POINTS turns) and each world's aggregate."""

    hash: str
    label: str
    kind: str
    aggregate: str
    world_value: Any
    other_value: Any
    turns: list[MetricTurn]


class WorldComparison(TypedDict):
    world: str
    other: str
    world_current_turn: int
    other_current_turn: int
    # Which world has more turns: "world", "other" or null when both have as many.
    longer: str | None
    common_turns: int
    first_common_turn: int | None
    # a branch's origin (its turns before it are its parent's): {"world", "turn"} or None
    world_branched_from: dict[str, Any] | None
    other_branched_from: dict[str, Any] | None
    first_divergent_turn: int | None
    count: int
    limit: int
    offset: int
    turns: list[TurnComparison]
    metrics: list[MetricComparison]


def _cut(value: str | None) -> tuple[str | None, bool]:
    if value is None or len(value) <= MAX_VALUE_CHARS:
        return value, False
    return value[:MAX_VALUE_CHARS], True


def _whole(left: str | None, right: str | None) -> ValueDiff:
    """Both values in full (cut to size): states and environment texts are read whole."""
    left_cut, left_truncated = _cut(left)
    right_cut, right_truncated = _cut(right)
    return {
        "left": left_cut,
        "right": right_cut,
        "common_prefix_chars": 0,
        "truncated": left_truncated or right_truncated,
    }


def _memory(left: str | None, right: str | None) -> ValueDiff:
    """What each memory holds after the lines they share: a memory only grows by appended lines,
    so a divergence usually reads as the appended lines on each side."""
    if left is None or right is None:
        return _whole(left, right)
    left_lines, right_lines = left.split("\n"), right.split("\n")
    shared = 0
    for a, b in zip(left_lines, right_lines, strict=False):
        if a != b:
            break
        shared += 1
    prefix = "\n".join(left_lines[:shared])
    # The shared lines plus the newline that separates them from what follows, if anything does.
    start = len(prefix) + 1 if shared else 0
    if left[start:] == right[start:]:
        # They differ only in a line break at the very end: show both whole.
        return _whole(left, right)
    diff = _whole(left[start:], right[start:])
    diff["common_prefix_chars"] = min(start, len(left), len(right))
    return diff


def _agent_memory(entity: Mapping[str, Any]) -> str | None:
    kind = entity.get("kind")
    if isinstance(kind, dict):
        memory = kind.get("agent", {}).get("memory")
        return memory if isinstance(memory, str) else None
    return None


def _other_fields(left: Mapping[str, Any], right: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for key in sorted(set(left) | set(right)):
        if key in ("id", "state"):
            continue
        if key == "kind" and isinstance(left.get(key), dict) and isinstance(right.get(key), dict):
            # Memory is reported on its own; any other agent field (goal, profile) is "kind".
            a = {k: v for k, v in left[key].get("agent", {}).items() if k != "memory"}
            b = {k: v for k, v in right[key].get("agent", {}).items() if k != "memory"}
            if a != b:
                names.append(key)
        elif left.get(key) != right.get(key):
            names.append(key)
    return names


def _entity_diffs(left: Mapping[str, Any], right: Mapping[str, Any]) -> list[EntityDiff]:
    lefts = {e["id"]: e for e in left.get("entities", [])}
    rights = {e["id"]: e for e in right.get("entities", [])}
    diffs: list[EntityDiff] = []
    for entity_id in sorted(set(lefts) | set(rights)):
        a, b = lefts.get(entity_id), rights.get(entity_id)
        if a is not None and b is not None and a == b:
            continue
        present_in = (
            "both" if a is not None and b is not None else ("left" if b is None else "right")
        )
        state_a = a.get("state") if a is not None else None
        state_b = b.get("state") if b is not None else None
        memory_a = _agent_memory(a) if a is not None else None
        memory_b = _agent_memory(b) if b is not None else None
        diffs.append(
            {
                "id": entity_id,
                "present_in": present_in,
                "state": _whole(state_a, state_b) if state_a != state_b else None,
                "memory": _memory(memory_a, memory_b) if memory_a != memory_b else None,
                "other_fields": _other_fields(a, b) if a is not None and b is not None else [],
            }
        )
    return diffs


def _environment_diffs(left: Mapping[str, Any], right: Mapping[str, Any]) -> list[EnvironmentDiff]:
    lefts: Mapping[str, str] = left.get("environments", {})
    rights: Mapping[str, str] = right.get("environments", {})
    diffs: list[EnvironmentDiff] = []
    for label in sorted(set(lefts) | set(rights)):
        a, b = lefts.get(label), rights.get(label)
        if a != b:
            diffs.append({"label": label, **_whole(a, b)})
    return diffs


def _world(slug: str, field: str) -> World:
    require_slug(slug, field)
    world = World.objects.filter(slug=slug).first()
    if world is None:
        raise NotFoundError("world_not_found", f"{field}: no world {slug!r}", {"field": field})
    return world


def _origin(world: World) -> dict[str, Any] | None:
    if world.branched_from_turn is None:
        return None
    return {"world": world.branched_from_slug, "turn": world.branched_from_turn}


def _tool_calls(pairs: dict[int, tuple[int, int]]) -> dict[tuple[int, int], list[str]]:
    """(turn, world id) → the tool calls of the attempt that committed that turn, in order:
    one query for a page of turns."""
    owners = {world_id for pair in pairs.values() for world_id in pair}
    calls: dict[tuple[int, int], list[str]] = {}
    rows = (
        SourceInvocation.objects.filter(
            world_id__in=owners,
            attempted_turn__in=list(pairs),
            kind=InvocationKind.MODEL_ELECTED_TOOL,
            attempt__status=AttemptStatus.COMMITTED,
        )
        .order_by("attempted_turn", "seq")
        .values_list("attempted_turn", "world_id", "subject_id", "tool_name", "request")
    )
    for number, world_id, subject, tool, request in rows:
        body = request if isinstance(request, dict) else {}
        arguments = body.get("arguments", body.get("body"))
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        calls.setdefault((number, world_id), []).append(f"{subject}: {tool} {text}")
    return calls


def _paired_states(
    pairs: dict[int, tuple[int, int]],
) -> Iterator[tuple[int, dict[str, Any], dict[str, Any]]]:
    """Both sides' states for each turn number of ``pairs`` (number → (left owner, right
    owner)), in turn order: one query, streamed so a page of large states is never held in
    memory at once."""
    owners = {world_id for pair in pairs.values() for world_id in pair}
    rows = (
        Turn.objects.filter(world_id__in=owners, number__in=list(pairs))
        .order_by("number", "world_id")
        .values_list("number", "world_id", "state")
        .iterator(chunk_size=50)
    )
    pending: dict[int, dict[str, Any]] = {}
    current = -1
    for number, world_id, state in rows:
        if number != current:
            pending, current = {}, number
        pending[world_id] = state
        left, right = pairs[number]
        if left in pending and right in pending:
            yield number, pending[left], pending[right]


def metric_comparison(*, slug: str, other: str) -> list[MetricComparison]:
    """The metrics measured on both worlds, by label, each turn's values side by side."""
    left = {s["hash"]: s for s in world_metric_series(slug=slug)}
    right = {s["hash"]: s for s in world_metric_series(slug=other)}
    shared: list[MetricComparison] = []
    for metric_hash, a in left.items():
        b = right.get(metric_hash)
        if b is None:
            continue
        a_points = {p["turn"]: p for p in a["points"]}
        b_points = {p["turn"]: p for p in b["points"]}
        turns: list[MetricTurn] = []
        for number in sorted(set(a_points) | set(b_points)):
            pa, pb = a_points.get(number, {}), b_points.get(number, {})
            turns.append(
                {
                    "turn": number,
                    "world": pa.get("value"),
                    "other": pb.get("value"),
                    "world_error": pa.get("error"),
                    "other_error": pb.get("error"),
                }
            )
        shared.append(
            {
                "hash": metric_hash,
                "label": a["label"],
                "kind": a["kind"],
                "aggregate": a["aggregate"],
                "world_value": a["value"],
                "other_value": b["value"],
                "turns": turns,
            }
        )
    return shared


def world_compare(*, slug: str, other: str, params: Mapping[str, Any]) -> WorldComparison:
    """Per common turn (paged with limit/offset), the entities and environments whose values
    differ, and the first turn whose states differ (null if none). A branch is aligned with
    its parent by turn number: its turns before the branch point are its parent's."""
    limit, offset = parse_paging(params)
    left = _world(slug, "slug")
    right = _world(other, "other")
    left_owners, right_owners = history_owners(left), history_owners(right)
    first_common = max(first_turn(left_owners), first_turn(right_owners))
    last_common = min(left.current_turn, right.current_turn)
    owner_ids = {world_id for world_id, _ in left_owners + right_owners}
    by_world: dict[tuple[int, int], str] = {
        (number, world_id): state_hash
        for number, world_id, state_hash in Turn.objects.filter(
            world_id__in=owner_ids, number__gte=first_common, number__lte=last_common
        ).values_list("number", "world_id", "state_hash")
    }
    hashes: dict[int, tuple[str, str]] = {}
    pairs: dict[int, tuple[int, int]] = {}
    for number in range(first_common, last_common + 1):
        a, b = owner_of(left_owners, number), owner_of(right_owners, number)
        if a is None or b is None or (number, a) not in by_world or (number, b) not in by_world:
            continue
        pairs[number] = (a, b)
        hashes[number] = (by_world[(number, a)], by_world[(number, b)])
    numbers = sorted(hashes)
    first_divergent = next((n for n in numbers if hashes[n][0] != hashes[n][1]), None)
    common = len(numbers)
    page = numbers[offset : offset + limit]
    differing = {n: pairs[n] for n in page if hashes[n][0] != hashes[n][1]}
    diffs: dict[int, tuple[list[EntityDiff], list[EnvironmentDiff]]] = {}
    if differing:
        for number, a_state, b_state in _paired_states(differing):
            diffs[number] = (_entity_diffs(a_state, b_state), _environment_diffs(a_state, b_state))
    tools = _tool_calls({n: pairs[n] for n in page})
    turns: list[TurnComparison] = []
    for number in page:
        entities, environments = diffs.get(number, ([], []))
        left_calls = tools.get((number, pairs[number][0]), [])
        right_calls = tools.get((number, pairs[number][1]), [])
        turns.append(
            {
                "number": number,
                "identical": number not in diffs,
                "left_state_hash": hashes[number][0],
                "right_state_hash": hashes[number][1],
                "entities": entities,
                "environments": environments,
                "tool_calls": {
                    "left": left_calls,
                    "right": right_calls,
                    "differ": left_calls != right_calls,
                },
            }
        )
    longer = None
    if left.current_turn != right.current_turn:
        longer = "world" if left.current_turn > right.current_turn else "other"
    return {
        "world": left.slug,
        "other": right.slug,
        "world_current_turn": left.current_turn,
        "other_current_turn": right.current_turn,
        "longer": longer,
        "common_turns": common,
        "first_common_turn": numbers[0] if numbers else None,
        "world_branched_from": _origin(left),
        "other_branched_from": _origin(right),
        "first_divergent_turn": first_divergent,
        "count": common,
        "limit": limit,
        "offset": offset,
        "turns": turns,
        "metrics": metric_comparison(slug=left.slug, other=right.slug),
    }
