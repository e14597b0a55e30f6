"""Branches (docs/worlds.md, "Branches"): a new world that starts at a committed turn of another,
with a copy of that turn's state and the cognition of the scenario it is given. Nothing is
re-run: the branch's first turn is a copy of one snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import invalid
from chukwa_core.experiment_design import BranchFrom
from chukwa_core.ids import label_problem
from chukwa_core.world_state import WorldState, copy_entity, is_agent
from worlds_app.models import Turn, World


@dataclass(frozen=True)
class BranchPoint:
    """The parent world and its committed turn a branch starts from."""

    parent: World
    turn: Turn

    def recorded(self) -> dict[str, Any]:
        return {"world": self.parent.slug, "turn": self.turn.number}


def branch_point(value: Any) -> BranchPoint:
    """Check ``{"world": slug, "turn": n}``: an existing world and one of its committed turns."""
    body = require_object(value, "branch_from", "invalid_branch_from")
    check_keys(body, "branch_from", required=("world", "turn"), code="invalid_branch_from")
    slug, number = body["world"], body["turn"]
    problem = label_problem(slug) if isinstance(slug, str) else "is not a string"
    if problem is not None:
        raise invalid("invalid_branch_from", "branch_from.world", f"{slug!r} {problem}")
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise invalid(
            "invalid_branch_from",
            "branch_from.turn",
            f"must be an integer ≥ 0, got {number!r}",
        )
    parent = World.objects.filter(slug=slug).first()
    if parent is None:
        raise invalid("invalid_branch_from", "branch_from.world", f"no world {slug!r}")
    turn = Turn.objects.filter(world=parent, number=number).first()
    if turn is None:
        raise invalid(
            "invalid_branch_from",
            "branch_from.turn",
            f"world {slug!r} has no committed turn {number} (its turns run from "
            f"{_first_turn(parent)} to {parent.current_turn})",
        )
    return BranchPoint(parent, turn)


def design_branch_point(branch: BranchFrom | None) -> BranchPoint | None:
    """The branch point an experiment's typed design names, checked again (the parent may have
    been deleted since the design was made); None for a design that does not branch."""
    if branch is None:
        return None
    return branch_point({"world": branch.world, "turn": branch.turn})


def _first_turn(world: World) -> int:
    return world.branched_from_turn if world.branched_from_turn is not None else 0


def _same_names(what: str, ours: set[str], theirs: set[str], where: str) -> None:
    """400 ``branch_mismatch`` naming the first name (in order) only one side has."""
    for name in sorted(ours ^ theirs):
        side, other = ("the scenario", where) if name in ours else (where, "the scenario")
        raise invalid(
            "branch_mismatch",
            "scenario_ref",
            f"{what} {name!r} is in {side} but not in {other}",
            **{what: name},
        )


def _kind_name(entity: dict[str, Any]) -> str:
    return "agent" if is_agent(entity) else str(entity.get("kind"))


def branch_state(point: BranchPoint, snapshot: dict[str, Any]) -> WorldState:
    """The branch's first state: what a patch can change (environment texts, each entity's
    state, location and memory) from the parent's turn; everything else (names, goals, the
    cognition profile each agent thinks with) from the branch's scenario. 400
    ``branch_mismatch`` naming the first difference when the scenario does not have exactly the
    parent's entity ids, entity kinds and environment labels."""
    parent = WorldState.from_snapshot(point.turn.state)
    where = f"world {point.parent.slug!r} at turn {point.turn.number}"
    labels = sorted(snapshot["environments"])
    _same_names("environment", set(labels), set(parent.environments), where)
    _same_names("entity", {e["id"] for e in snapshot["entities"]}, set(parent.entities), where)
    entities: dict[str, dict[str, Any]] = {}
    for own in snapshot["entities"]:
        before = parent.entities[own["id"]]
        if _kind_name(own) != _kind_name(before):
            raise invalid(
                "branch_mismatch",
                "scenario_ref",
                f"entity {own['id']!r} is {_kind_name(own)!r} in the scenario but "
                f"{_kind_name(before)!r} in {where}",
                entity=own["id"],
            )
        entity = copy_entity(own)
        entity["state"] = before["state"]
        entity["environment"] = before["environment"]
        if is_agent(entity):
            entity["kind"]["agent"]["memory"] = before["kind"]["agent"]["memory"]
        entities[own["id"]] = entity
    # Environments in label order and entities in the scenario's order, as a new world's are.
    return WorldState(
        environments={label: parent.environments[label] for label in labels},
        entities=entities,
    )
