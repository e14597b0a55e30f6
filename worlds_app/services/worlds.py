"""World creation (from a scenario, or as a branch of another world) and deletion."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from django.db import IntegrityError, transaction

from chukwa_core import clock
from chukwa_core.component_validation import check_keys, require_object, type_name
from chukwa_core.errors import ConflictError, NotFoundError, invalid
from chukwa_core.ids import is_hash, label_problem
from chukwa_core.seeds import seed_problem
from chukwa_core.world_state import WorldState
from cognition_app.sources import REPLAY_MODES, REUSE_MODES
from scenarios_app import selectors as scenario_selectors
from scenarios_app.services import scenario_assemble_within
from scenarios_app.services._store import reject_nul
from worlds_app.models import AttemptStatus, DeletedWorld, Turn, TurnAttempt, World
from worlds_app.selectors import require_slug
from worlds_app.services.branches import BranchPoint, branch_point, branch_state
from worlds_app.services.budgets import BudgetInput, parse_budget, world_budget_record
from worlds_app.services.world_inputs import no_start_time_on_branch

CREATE_FIELDS = ("slug",)
CREATE_OPTIONAL = (
    "scenario_ref",
    "name",
    "start_time",
    "replay_from",
    "budget",
    "seed",
    "branch_from",
    "reuse",
)


def scenario_hash_from_ref(ref: Any) -> tuple[str, dict[str, Any]]:
    """{"name"} | {"hash"} | {"data"} → (scenario hash, the ref as recorded on the world)."""
    if (
        not isinstance(ref, dict)
        or len(ref) != 1
        or next(iter(ref)) not in ("name", "hash", "data")
    ):
        raise invalid(
            "invalid_scenario_ref",
            "scenario_ref",
            'must be {"name": N}, {"hash": H} or {"data": <full scenario input>}',
        )
    ((mode, value),) = ref.items()
    if mode == "hash":
        if not is_hash(value):
            raise invalid(
                "invalid_hash", "scenario_ref.hash", f"{value!r} is not a lowercase sha256 hex"
            )
        return scenario_selectors.scenario_hash_for_ref(ref=value), {"hash": value}
    if mode == "name":
        current = scenario_selectors.scenario_name_resolve(name=value, field="scenario_ref.name")
        return current, {"name": value, "resolved_hash": current}
    result = scenario_assemble_within(data=value)
    return result["scenario_hash"], {"data": "assembled", "resolved_hash": result["scenario_hash"]}


def scenario_snapshot(scenario_hash: str) -> dict[str, Any]:
    """The frozen, self-describing copy of a scenario a world keeps."""
    full = scenario_selectors.scenario_get(ref=scenario_hash)
    scenario = full["scenario"]
    return {
        "hash": scenario_hash,
        "scenario_slug": scenario["scenario_slug"],
        "description": scenario["description"],
        "chronon_seconds": scenario["chronon_seconds"],
        "cognition_profiles": {
            label: {"hash": full["cognition_profiles"][label], **profile}
            for label, profile in scenario["cognition_profiles"].items()
        },
        "environments": scenario["environments"],
        "environment_hashes": full["environments"],
        "entities": scenario["entities"],
        "entity_hashes": full["entities"],
    }


def parse_start_time(value: Any) -> datetime:
    """An ISO 8601 instant with an offset, in UTC."""
    if value is None:
        return datetime.now(UTC)
    shown = repr(value) if not isinstance(value, str) or len(value) <= 64 else f"{value[:64]!r}…"
    if not isinstance(value, str):
        raise invalid("invalid_start_time", "start_time", f"must be a string, got {shown}")
    try:
        return clock.parse_instant(value)
    except clock.NotAnInstant as exc:
        raise invalid("invalid_start_time", "start_time", f"{exc}, got {shown}") from None
    except clock.CalendarOverflow as exc:
        raise invalid("invalid_start_time", "start_time", str(exc)) from None


def _check_room_to_run(start: datetime, chronon_seconds: int) -> None:
    """A world must be able to advance at least one chronon inside the calendar."""
    try:
        clock.advance(start, chronon_seconds)
    except clock.CalendarOverflow:
        raise invalid(
            "invalid_start_time",
            "start_time",
            f"{start.isoformat()} leaves no room for one turn of {chronon_seconds} s before "
            f"the end of the calendar ({clock.CALENDAR_END.isoformat()})",
        ) from None


class ReplayFromInput(TypedDict):
    """Replay: the world whose recordings serve this one's calls, and the mode."""

    world: str
    mode: str  # replay_then_live | replay_strict


def replay_ref(value: Any, what: str) -> tuple[str, str]:
    """Check ``{<what>: slug, "mode": mode}`` (what is replayed: a world or an experiment):
    a well-formed slug, a known mode; 400 naming ``replay_from.<field>``."""
    body = require_object(value, "replay_from", "invalid_replay_from")
    check_keys(body, "replay_from", required=(what, "mode"), code="invalid_replay_from")
    slug, mode = body[what], body["mode"]
    if mode not in REPLAY_MODES:
        raise invalid(
            "invalid_replay_from",
            "replay_from.mode",
            f"must be one of {', '.join(REPLAY_MODES)}, got {mode!r}",
        )
    problem = label_problem(slug) if isinstance(slug, str) else "is not a string"
    if problem is not None:
        raise invalid("invalid_replay_from", f"replay_from.{what}", f"{slug!r} {problem}")
    return slug, mode


def _replay_from(value: Any) -> tuple[World, ReplayFromInput]:
    """Check ``{"world": slug, "mode": mode}``: an existing world, a known mode."""
    slug, mode = replay_ref(value, "world")
    source = World.objects.filter(slug=slug).first()
    if source is None:
        raise invalid("invalid_replay_from", "replay_from.world", f"no world {slug!r}")
    return source, {"world": slug, "mode": mode}


class BranchFromInput(TypedDict):
    """A branch (docs/worlds.md): the parent world and its committed turn to start from."""

    world: str
    turn: int


class WorldCreateInput(TypedDict, total=False):
    """World creation (docs/worlds.md); the service checks it in full (the CLI hands it raw
    input). ``scenario_ref`` is required unless ``branch_from`` is given."""

    slug: str
    scenario_ref: dict[str, Any]  # {"name"} | {"hash"} | {"data": <assembly input>}
    name: str
    start_time: str
    replay_from: ReplayFromInput
    budget: BudgetInput
    seed: int
    branch_from: BranchFromInput
    reuse: str  # "exact" | "off" (default "off")


def reuse_mode(value: Any, field: str) -> str:
    """A world's or an experiment's ``reuse``: "exact" or "off" (400 naming ``field``)."""
    if value not in REUSE_MODES:
        raise invalid(
            "invalid_reuse",
            field,
            f"must be one of {', '.join(map(repr, REUSE_MODES))}, got {value!r}",
        )
    assert isinstance(value, str)
    return value


def _seed(value: Any) -> int:
    problem = seed_problem(value)
    if problem is not None:
        raise invalid("invalid_seed", "seed", problem)
    assert isinstance(value, int)
    return value


def world_create(*, data: WorldCreateInput, created_by: str = "") -> World:
    """Create a world and its first turn from ``{"slug", "scenario_ref"?, "name"?,
    "start_time"?, "replay_from"?, "budget"?, "seed"?, "branch_from"?}``: turn 0 from the
    scenario, or, for a branch, the parent's turn n copied as this world's turn n (an
    experiment makes its worlds in bulk from the same pieces: world_start, new_world_rows)."""
    body = require_object(data, "body", "invalid_input")
    check_keys(body, "", required=CREATE_FIELDS, optional=CREATE_OPTIONAL, code="invalid_input")
    slug = body["slug"]
    problem = label_problem(slug)
    if problem is not None:
        raise invalid("invalid_slug", "slug", f"{slug!r} {problem}")
    if "scenario_ref" not in body and "branch_from" not in body:
        raise invalid("invalid_input", "scenario_ref", "is required (unless branch_from is given)")
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > 200):
        raise invalid(
            "invalid_input",
            "name",
            f"must be a non-empty string ≤ 200 chars, got {type_name(name)}",
        )
    if name is not None:
        reject_nul(name, "name")
    if "branch_from" in body:
        no_start_time_on_branch(body.get("start_time"))
    start = parse_start_time(body.get("start_time"))
    seed = _seed(body["seed"]) if body.get("seed") is not None else None
    budget = parse_budget(body["budget"]) if body.get("budget") is not None else None
    reuse = reuse_mode(body["reuse"], "reuse") if "reuse" in body else "off"
    with transaction.atomic(durable=True):
        if World.objects.filter(slug=slug).exists():
            raise ConflictError(
                "world_exists", f"slug: a world {slug!r} already exists", {"field": "slug"}
            )
        replay_source, replay_from = (
            _replay_from(body["replay_from"]) if "replay_from" in body else (None, None)
        )
        if seed is None and replay_source is not None:
            seed = replay_source.seed  # a replay draws what the replayed world drew
        point = branch_point(body["branch_from"]) if "branch_from" in body else None
        if "scenario_ref" in body:
            scenario_hash, recorded_ref = scenario_hash_from_ref(body["scenario_ref"])
        else:
            assert point is not None
            scenario_hash = point.parent.scenario_id
            recorded_ref = {"branch_parent": point.parent.slug, "resolved_hash": scenario_hash}
        begin = world_start(scenario_hash, recorded_ref, start, point)
        world, turn = new_world_rows(
            begin,
            slug=slug,
            name=name,
            seed=seed,
            replay_source=replay_source,
            replay_from=replay_from,
            reuse=reuse,
        )
        try:
            with transaction.atomic():
                world.save(force_insert=True)
        except IntegrityError:
            # Two creates racing on one slug: the unique constraint decides.
            raise ConflictError(
                "world_exists", f"slug: a world {slug!r} already exists", {"field": "slug"}
            ) from None
        turn.world = world
        turn.save(force_insert=True)
        if budget is not None:
            world_budget_record(world=world, limits=budget, set_by=created_by)
    return world


@dataclass(frozen=True)
class WorldStart:
    """Where new worlds start: the scenario's frozen copy and the first turn's state, time and
    number (turn 0, or a branch's turn) — computed once, shared by every world that starts
    there (an experiment's arm)."""

    scenario_hash: str
    recorded_ref: dict[str, Any]
    snapshot: dict[str, Any]
    state: dict[str, Any]
    state_hash: str
    start: datetime
    first_turn: int
    point: BranchPoint | None

    def starting_at(self, start: datetime) -> WorldStart:
        """The same start at another simulation time (not for a branch: it has its parent's)."""
        assert self.point is None
        _check_room_to_run(start, self.snapshot["chronon_seconds"])
        return dataclasses.replace(self, start=start)


def world_start(
    scenario_hash: str,
    recorded_ref: dict[str, Any],
    start: datetime,
    point: BranchPoint | None,
) -> WorldStart:
    """The start of a world of ``scenario_hash`` at ``start``, or at a branch ``point`` (its
    parent's turn and time; 400 ``branch_mismatch`` when the scenario does not fit it)."""
    snapshot = scenario_snapshot(scenario_hash)
    if point is not None:
        state = branch_state(point, snapshot)
        start, first_turn = point.turn.simulation_time, point.turn.number
    else:
        state, first_turn = WorldState.from_scenario(snapshot), 0
    _check_room_to_run(start, snapshot["chronon_seconds"])
    return WorldStart(
        scenario_hash=scenario_hash,
        recorded_ref=recorded_ref,
        snapshot=snapshot,
        state=state.to_snapshot(),
        state_hash=state.snapshot_hash(),
        start=start,
        first_turn=first_turn,
        point=point,
    )


def new_world_rows(
    begin: WorldStart,
    *,
    slug: str,
    name: str | None,
    seed: int | None,
    replay_source: World | None = None,
    replay_from: ReplayFromInput | None = None,
    **fields: Any,
) -> tuple[World, Turn]:
    """A world and its first turn, not yet saved (the caller saves them, one by one or in
    bulk); ``fields``: more of the world's columns (an experiment's arm and replicate)."""
    label = begin.snapshot["scenario_slug"]
    point = begin.point
    world = World(
        slug=slug,
        name=name or f"{label} #{slug}",
        scenario_id=begin.scenario_hash,
        scenario_snapshot=begin.snapshot,
        scenario_ref=begin.recorded_ref,
        label=label,
        chronon_seconds=begin.snapshot["chronon_seconds"],
        current_turn=begin.first_turn,
        replay_from=replay_from,
        replay_source=replay_source,
        seed=seed,
        branched_from_slug=point.parent.slug if point else "",
        branched_from_turn=begin.first_turn if point else None,
        branch_parent=point.parent if point else None,
        **fields,
    )
    turn = Turn(
        world=world,
        number=begin.first_turn,
        simulation_time=begin.start,
        state=begin.state,
        state_hash=begin.state_hash,
    )
    return world, turn


def world_delete(*, slug: str, deleted_by: str = "") -> DeletedWorld:
    """Delete a world (its turns, attempts and events); keep a deleted-world record.
    Scenarios are untouched. A world with a running attempt cannot be deleted."""
    require_slug(slug)
    with transaction.atomic(durable=True):
        world = World.objects.select_for_update().filter(slug=slug).first()
        if world is None:
            raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
        if TurnAttempt.objects.filter(world=world, status=AttemptStatus.RUNNING).exists():
            raise ConflictError(
                "world_busy",
                f"slug: world {slug!r} has a running attempt; delete it when the attempt ends",
                {"field": "slug"},
            )
        record = DeletedWorld.objects.create(
            slug=world.slug,
            name=world.name,
            label=world.label,
            scenario_hash=world.scenario_id,
            final_turn=world.current_turn,
            created_at=world.created_at,
            deleted_by=deleted_by,
        )
        world.delete()
    return record
