"""WorldPatch validation against the working world, and provisional application. Pure.

Model output is never normalized: ids and labels must match exactly. Rejections are written to
be read by a model (they list the valid ids) and by a reviewer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from chukwa_core.ids import IdentifierError, normalize_entity_id
from chukwa_core.patch_schema import PATCH_OPS, WORLD_PATCH_SCHEMA
from chukwa_core.world_state import WorldState, is_agent

_VALIDATOR = Draft202012Validator(WORLD_PATCH_SCHEMA)


class PatchRejected(Exception):
    """A WorldPatch that cannot be applied; ``message`` names the problem and the valid ids."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pointer = pointer


@dataclass(frozen=True)
class Transition:
    effect_index: int
    op: str
    target_kind: str
    target_id: str
    before: str
    after: str


def entity_roster(world: WorldState) -> str:
    return "\n".join(
        f"  - {e['id']} ({e['name']})"
        for e in sorted(world.entities.values(), key=lambda e: e["id"])
    )


def agent_roster(world: WorldState) -> str:
    agents = [e for e in world.entities.values() if is_agent(e)]
    return "\n".join(f"  - {e['id']} ({e['name']})" for e in sorted(agents, key=lambda e: e["id"]))


def environment_roster(world: WorldState) -> str:
    return "\n".join(f"  - {label}" for label in sorted(world.environments))


# The keys each op's effect has, exactly (the schema's required keys, nothing else allowed).
_EFFECT_KEYS = {
    "set_entity_state": frozenset({"op", "entity_id", "state"}),
    "append_entity_memory": frozenset({"op", "entity_id", "content"}),
    "set_environment_content": frozenset({"op", "environment_label", "content"}),
}


def _plainly_valid(patch: Any) -> bool:
    """True only for a patch WORLD_PATCH_SCHEMA accepts (an exact, fast check of that small
    schema: the common case skips the general validator); False means "ask the validator",
    which finds the error and words it."""
    if not isinstance(patch, dict) or patch.keys() != {"narration", "effects"}:
        return False
    narration, effects = patch["narration"], patch["effects"]
    if not isinstance(narration, str) or not narration or not isinstance(effects, list):
        return False
    for effect in effects:
        if not isinstance(effect, dict):
            return False
        op = effect.get("op")
        keys = _EFFECT_KEYS.get(op) if isinstance(op, str) else None
        if keys is None or effect.keys() != keys:
            return False
        for key in keys:
            value = effect[key]
            if not isinstance(value, str) or not value:
                return False
    return True


def _schema_problem(patch: Any) -> PatchRejected | None:
    if _plainly_valid(patch):
        return None
    errors = sorted(_VALIDATOR.iter_errors(patch), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    # Prefer a precise message over anyOf's summary: look inside the effect's own branch.
    error = errors[0]
    pointer = "".join(f"/{p}" for p in error.absolute_path)
    path = list(error.absolute_path)
    if len(path) >= 2 and path[0] == "effects" and error.validator == "anyOf":
        effect = patch["effects"][path[1]]
        op = effect.get("op") if isinstance(effect, dict) else None
        if op not in PATCH_OPS:
            return PatchRejected(
                f"effects[{path[1]}].op {op!r} is not a WorldPatch op. "
                f"Valid ops: {', '.join(PATCH_OPS)}",
                f"/effects/{path[1]}/op",
            )
        branch = WORLD_PATCH_SCHEMA["properties"]["effects"]["items"]["anyOf"][PATCH_OPS.index(op)]
        sub = sorted(
            Draft202012Validator(branch).iter_errors(effect), key=lambda e: list(e.absolute_path)
        )
        if sub:
            inner = sub[0]
            where = "".join(f".{p}" for p in inner.absolute_path)
            return PatchRejected(
                f"effects[{path[1]}]{where}: {inner.message} (op {op} takes "
                f"{', '.join(branch['required'])} and nothing else)",
                f"/effects/{path[1]}" + "".join(f"/{p}" for p in inner.absolute_path),
            )
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return PatchRejected(f"{where or 'patch'}: {error.message}", pointer)


def check_patch_shape(patch: Any) -> None:
    """What a patch must be whatever world it meets: the WorldPatch schema, a narration that
    says something. :class:`PatchRejected` naming the first problem."""
    problem = _schema_problem(patch)
    if problem is not None:
        raise problem
    if not patch["narration"].strip():
        raise PatchRejected(
            "narration must be a non-empty sentence (it is only whitespace)", "/narration"
        )


def validate_patch(patch: Any, world: WorldState) -> None:
    """Schema first, then the working world: exact ids, agents-only memory, known labels. An
    accepted patch is recorded on the world (see :func:`validate_patch_once`)."""
    check_patch_shape(patch)
    for index, effect in enumerate(patch["effects"]):
        op = effect["op"]
        for key in ("state", "content"):
            if key in effect and not effect[key].strip():
                raise PatchRejected(
                    f"effects[{index}].{key} must be non-empty text (it is only whitespace)",
                    f"/effects/{index}/{key}",
                )
        if op in ("set_entity_state", "append_entity_memory"):
            entity_id = effect["entity_id"]
            if entity_id not in world.entities:
                hint = ""
                try:
                    normalized = normalize_entity_id(entity_id)
                    if normalized in world.entities:
                        hint = f' (did you mean "{normalized}"? ids must match exactly)'
                except IdentifierError:
                    pass
                raise PatchRejected(
                    f"effects[{index}].entity_id {entity_id!r} does not match any entity{hint}. "
                    f"Valid entity ids:\n{entity_roster(world)}",
                    f"/effects/{index}/entity_id",
                )
            if op == "append_entity_memory" and not is_agent(world.entities[entity_id]):
                raise PatchRejected(
                    f"effects[{index}]: append_entity_memory applies to agents only; "
                    f"{entity_id!r} is a prop. Agents:\n{agent_roster(world)}",
                    f"/effects/{index}/entity_id",
                )
        else:
            label = effect["environment_label"]
            if label not in world.environments:
                raise PatchRejected(
                    f"effects[{index}].environment_label {label!r} does not match any "
                    f"environment. Valid environment labels:\n{environment_roster(world)}",
                    f"/effects/{index}/environment_label",
                )
    world.accepted_patches[id(patch)] = patch


def validate_patch_once(patch: Any, world: WorldState) -> None:
    """:func:`validate_patch` when the patch is applied, unless this very patch was accepted
    for this world already — by an LLM node's judge, on the turn-start world or the working
    world: what makes a patch valid (the world's entity ids, which of them are agents, its
    environment labels) no patch changes, and nothing edits a patch between its judge and its
    application. The record is taken, so it holds a patch until it is applied at most."""
    if world.accepted_patches.pop(id(patch), None) is not patch:
        validate_patch(patch, world)
        del world.accepted_patches[id(patch)]


def apply_patch(patch: dict[str, Any], world: WorldState) -> list[Transition]:
    """Apply a validated patch to the working world; before = state just before this patch's
    effect (so two effects on one target chain)."""
    transitions: list[Transition] = []
    for index, effect in enumerate(patch["effects"]):
        op = effect["op"]
        if op == "set_entity_state":
            entity = world.entities[effect["entity_id"]]
            before = entity["state"]
            entity["state"] = effect["state"]
            transitions.append(
                Transition(index, op, "entity_state", entity["id"], before, entity["state"])
            )
        elif op == "append_entity_memory":
            agent = world.entities[effect["entity_id"]]["kind"]["agent"]
            before = agent["memory"]
            agent["memory"] = f"{before}\n{effect['content']}" if before else effect["content"]
            transitions.append(
                Transition(index, op, "entity_memory", effect["entity_id"], before, agent["memory"])
            )
        else:
            label = effect["environment_label"]
            before = world.environments[label]
            world.environments[label] = effect["content"]
            transitions.append(
                Transition(index, op, "environment", label, before, effect["content"])
            )
    return transitions
