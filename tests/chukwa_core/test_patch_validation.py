"""WorldPatch validation and application against a hand-built working world.

Pure: no database. Model output is never normalized, so every near miss is a rejection whose
message a model can act on: it names the offending value and lists what would have been valid.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chukwa_core.patch_schema import PATCH_OPS
from chukwa_core.patching import PatchRejected, apply_patch, validate_patch
from chukwa_core.world_state import WorldState


def agent(entity_id: str, name: str, environment: str, memory: str = "") -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": name,
        "state": f"{name} is idle",
        "environment": environment,
        "kind": {"agent": {"goal": "eat", "memory": memory, "cognition_profile": "p"}},
    }


def prop(entity_id: str, name: str, environment: str) -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": name,
        "state": f"{name} lies still",
        "environment": environment,
        "kind": "prop",
    }


@pytest.fixture
def world() -> WorldState:
    return WorldState(
        environments={"kitchen_plate": "A white plate.", "pantry": "A dark pantry shelf."},
        entities={
            e["id"]: e
            for e in (
                agent("ant", "Ant", "kitchen_plate"),
                prop("crumb", "Crumb", "kitchen_plate"),
                prop("sugar_grain", "Sugar grain", "kitchen_plate"),
                agent("mite", "Mite", "pantry", memory="I live here."),
            )
        },
    )


def rejection(patch: Any, world: WorldState) -> PatchRejected:
    before = copy.deepcopy(world)
    with pytest.raises(PatchRejected) as caught:
        validate_patch(patch, world)
    assert world == before, "validation must never touch the working world"
    return caught.value


def state_effect(entity_id: str, state: str = "moved") -> dict[str, Any]:
    return {"op": "set_entity_state", "entity_id": entity_id, "state": state}


def patch_of(*effects: dict[str, Any], narration: str = "Something happens.") -> dict[str, Any]:
    return {"narration": narration, "effects": list(effects)}


ROSTER = ["  - ant (Ant)", "  - crumb (Crumb)", "  - mite (Mite)", "  - sugar_grain (Sugar grain)"]


# --- ids and labels must match exactly ------------------------------------------------------


def test_unknown_entity_names_the_id_and_lists_every_valid_id_with_its_name(
    world: WorldState,
) -> None:
    error = rejection(patch_of(state_effect("beetle")), world)
    assert "effects[0].entity_id 'beetle' does not match any entity" in error.message
    assert error.message.endswith("Valid entity ids:\n" + "\n".join(ROSTER))
    assert "did you mean" not in error.message
    assert error.pointer == "/effects/0/entity_id"


@pytest.mark.parametrize(
    ("given", "suggested"),
    [("CRUMB", "crumb"), (" crumb ", "crumb"), ("Sugar Grain", "sugar_grain")],
)
def test_id_that_normalizes_to_a_valid_one_is_still_rejected_with_a_hint(
    world: WorldState, given: str, suggested: str
) -> None:
    error = rejection(patch_of(state_effect(given)), world)
    assert f"{given!r} does not match any entity" in error.message
    assert f'(did you mean "{suggested}"? ids must match exactly)' in error.message
    assert all(line in error.message for line in ROSTER)


def test_id_that_normalizes_to_nothing_known_gets_no_hint(world: WorldState) -> None:
    # "Crumb East" normalizes to crumb_east, which is not in the world; "first ant!" does not
    # normalize at all. Neither may produce a suggestion.
    for given in ("Crumb East", "first ant!"):
        error = rejection(patch_of(state_effect(given)), world)
        assert "did you mean" not in error.message
        assert "Valid entity ids:" in error.message


def test_error_names_the_index_of_the_offending_effect(world: WorldState) -> None:
    error = rejection(
        patch_of(state_effect("ant"), state_effect("crumb"), state_effect("x")), world
    )
    assert error.message.startswith("effects[2].entity_id 'x'")
    assert error.pointer == "/effects/2/entity_id"


def test_unknown_environment_label_lists_valid_labels(world: WorldState) -> None:
    effect = {"op": "set_environment_content", "environment_label": "kitchen", "content": "Dim."}
    error = rejection(patch_of(effect), world)
    assert "effects[0].environment_label 'kitchen' does not match any environment" in error.message
    assert error.message.endswith("Valid environment labels:\n  - kitchen_plate\n  - pantry")
    assert error.pointer == "/effects/0/environment_label"


def test_append_memory_on_a_prop_is_rejected_and_lists_the_agents(world: WorldState) -> None:
    effect = {"op": "append_entity_memory", "entity_id": "crumb", "content": "I was eaten."}
    error = rejection(patch_of(effect), world)
    assert "append_entity_memory applies to agents only; 'crumb' is a prop" in error.message
    agents = error.message.split("Agents:\n", 1)[1]
    assert agents == "  - ant (Ant)\n  - mite (Mite)"
    assert error.pointer == "/effects/0/entity_id"


# --- shape ------------------------------------------------------------------------------------


def test_empty_narration_is_rejected(world: WorldState) -> None:
    error = rejection(patch_of(narration=""), world)
    assert error.message.startswith("narration:")
    assert error.pointer == "/narration"


@pytest.mark.parametrize(
    ("effect", "field"),
    [
        ({"op": "set_entity_state", "entity_id": "ant", "state": ""}, "state"),
        ({"op": "append_entity_memory", "entity_id": "ant", "content": ""}, "content"),
        (
            {"op": "set_environment_content", "environment_label": "pantry", "content": ""},
            "content",
        ),
        ({"op": "set_entity_state", "entity_id": "", "state": "x"}, "entity_id"),
    ],
)
def test_empty_strings_in_effects_are_rejected(
    world: WorldState, effect: dict[str, Any], field: str
) -> None:
    error = rejection(patch_of(effect), world)
    assert error.message.startswith(f"effects[0].{field}:")
    assert f"(op {effect['op']} takes" in error.message
    assert error.pointer == f"/effects/0/{field}"


def test_whitespace_only_narration_is_rejected(world: WorldState) -> None:
    error = rejection(patch_of(narration=" \n\t "), world)
    assert "narration" in error.message
    assert error.pointer == "/narration"


@pytest.mark.parametrize(
    ("effect", "field"),
    [
        ({"op": "set_entity_state", "entity_id": "ant", "state": "   "}, "state"),
        ({"op": "append_entity_memory", "entity_id": "ant", "content": "\n"}, "content"),
        (
            {"op": "set_environment_content", "environment_label": "pantry", "content": "\t"},
            "content",
        ),
    ],
)
def test_whitespace_only_effect_text_is_rejected(
    world: WorldState, effect: dict[str, Any], field: str
) -> None:
    error = rejection(patch_of(effect), world)
    assert error.message.startswith(f"effects[0].{field}")
    assert error.pointer == f"/effects/0/{field}"


@pytest.mark.parametrize("op", ["delete_entity", "create_entity", "SET_ENTITY_STATE", None])
def test_unknown_op_lists_the_valid_ops(world: WorldState, op: Any) -> None:
    error = rejection(patch_of({"op": op, "entity_id": "ant", "state": "gone"}), world)
    assert f"effects[0].op {op!r} is not a WorldPatch op" in error.message
    assert error.message.endswith("Valid ops: " + ", ".join(PATCH_OPS))
    assert error.pointer == "/effects/0/op"


def test_effect_without_op_is_rejected(world: WorldState) -> None:
    error = rejection(patch_of({"entity_id": "ant", "state": "gone"}), world)
    assert "effects[0].op None is not a WorldPatch op" in error.message


def test_extra_field_in_an_effect_is_rejected(world: WorldState) -> None:
    effect = {**state_effect("ant"), "mood": "cheerful"}
    error = rejection(patch_of(effect), world)
    assert error.message.startswith("effects[0]")
    assert "'mood'" in error.message
    assert "op set_entity_state takes op, entity_id, state and nothing else" in error.message


def test_field_of_another_op_is_rejected(world: WorldState) -> None:
    # set_entity_state carrying "content" (append_entity_memory's field) instead of "state".
    error = rejection(
        patch_of({"op": "set_entity_state", "entity_id": "ant", "content": "x"}), world
    )
    # One problem is reported, and the op's full field list tells the model how to fix both.
    assert error.message.startswith("effects[0]")
    assert "'content'" in error.message or "'state'" in error.message
    assert "op set_entity_state takes op, entity_id, state and nothing else" in error.message


def test_extra_top_level_field_is_rejected(world: WorldState) -> None:
    error = rejection({**patch_of(), "turn": 3}, world)
    assert error.message.startswith("patch:")
    assert "'turn'" in error.message


def test_root_level_problem_points_at_the_whole_document(world: WorldState) -> None:
    # RFC 6901: the whole document is "", while "/" is the member named "" (which a patch
    # cannot have). BUG: _schema_problem builds "/" + "" for root-level errors.
    error = rejection({**patch_of(), "turn": 3}, world)
    assert error.pointer == ""


def test_missing_narration_is_rejected(world: WorldState) -> None:
    error = rejection({"effects": []}, world)
    assert error.message == "patch: 'narration' is a required property"


def test_missing_effects_is_rejected(world: WorldState) -> None:
    error = rejection({"narration": "Nothing."}, world)
    assert error.message == "patch: 'effects' is a required property"


@pytest.mark.parametrize("effects", [state_effect("ant"), "set ant hungry", None])
def test_effects_must_be_a_list(world: WorldState, effects: Any) -> None:
    error = rejection({"narration": "x", "effects": effects}, world)
    assert error.message.startswith("effects:")
    assert "is not of type 'array'" in error.message
    assert error.pointer == "/effects"


@pytest.mark.parametrize("patch", ["The ant eats.", ["narration"], None, 3])
def test_patch_must_be_an_object(world: WorldState, patch: Any) -> None:
    error = rejection(patch, world)
    assert error.message.startswith("patch:")
    assert "is not of type 'object'" in error.message


def test_a_later_bad_effect_rejects_the_whole_patch_before_anything_applies(
    world: WorldState,
) -> None:
    rejection(patch_of(state_effect("ant", "fed"), state_effect("nobody")), world)
    assert world.entities["ant"]["state"] == "Ant is idle"


# --- valid patches and application ----------------------------------------------------------


def test_valid_patch_with_all_three_ops(world: WorldState) -> None:
    patch = patch_of(
        state_effect("crumb", "half eaten"),
        {"op": "append_entity_memory", "entity_id": "mite", "content": "Crumbs fell."},
        {"op": "set_environment_content", "environment_label": "pantry", "content": "Lit."},
        narration="The mite nibbles.",
    )
    validate_patch(patch, world)
    transitions = apply_patch(patch, world)
    assert [(t.effect_index, t.op, t.target_kind, t.target_id) for t in transitions] == [
        (0, "set_entity_state", "entity_state", "crumb"),
        (1, "append_entity_memory", "entity_memory", "mite"),
        (2, "set_environment_content", "environment", "pantry"),
    ]
    assert [(t.before, t.after) for t in transitions] == [
        ("Crumb lies still", "half eaten"),
        ("I live here.", "I live here.\nCrumbs fell."),
        ("A dark pantry shelf.", "Lit."),
    ]
    assert world.entities["crumb"]["state"] == "half eaten"
    assert world.entities["mite"]["kind"]["agent"]["memory"] == "I live here.\nCrumbs fell."
    assert world.environments["pantry"] == "Lit."
    assert world.environments["kitchen_plate"] == "A white plate."


def test_two_effects_on_one_target_chain(world: WorldState) -> None:
    patch = patch_of(
        state_effect("ant", "walking east"),
        state_effect("ant", "beside the crumb"),
        {"op": "set_environment_content", "environment_label": "pantry", "content": "One."},
        {"op": "set_environment_content", "environment_label": "pantry", "content": "Two."},
    )
    validate_patch(patch, world)
    first, second, third, fourth = apply_patch(patch, world)
    assert (first.before, first.after) == ("Ant is idle", "walking east")
    assert second.before == first.after
    assert second.after == "beside the crumb"
    assert fourth.before == third.after == "One."
    assert world.entities["ant"]["state"] == "beside the crumb"


def test_memory_append_joins_with_a_newline(world: WorldState) -> None:
    patch = patch_of(
        {"op": "append_entity_memory", "entity_id": "ant", "content": "Turn 1: I woke."},
        {"op": "append_entity_memory", "entity_id": "ant", "content": "Turn 1: I looked."},
    )
    validate_patch(patch, world)
    first, second = apply_patch(patch, world)
    # An empty memory gets no leading newline.
    assert (first.before, first.after) == ("", "Turn 1: I woke.")
    assert (second.before, second.after) == (
        "Turn 1: I woke.",
        "Turn 1: I woke.\nTurn 1: I looked.",
    )
    assert world.entities["ant"]["kind"]["agent"]["memory"] == "Turn 1: I woke.\nTurn 1: I looked."


def test_empty_effects_list_is_valid_and_changes_nothing(world: WorldState) -> None:
    before = copy.deepcopy(world)
    patch = patch_of(narration="The ant waits.")
    validate_patch(patch, world)
    assert apply_patch(patch, world) == []
    assert world == before


def test_validation_is_against_the_given_working_world(world: WorldState) -> None:
    # The same patch is valid in one world and rejected in another that lacks the target.
    patch = patch_of(state_effect("mite", "asleep"))
    validate_patch(patch, world)
    del world.entities["mite"]
    error = rejection(patch, world)
    assert "'mite' does not match any entity" in error.message


def test_the_quick_schema_check_agrees_with_the_validator() -> None:
    """validate_patch skips the general JSON Schema validator for a plainly valid patch; the
    quick check may only say "valid" where the schema does."""
    import itertools

    from chukwa_core.patching import _VALIDATOR, _plainly_valid

    values: list[Any] = ["", "x", 1, None, [], {}]
    ops: list[Any] = ["set_entity_state", "append_entity_memory", "set_environment_content"]
    ops += ["bogus", None, ["set_entity_state"]]
    key_sets = [
        ("op", "entity_id", "state"),
        ("op", "entity_id", "content"),
        ("op", "environment_label", "content"),
        ("op", "entity_id"),
        ("op", "entity_id", "state", "extra"),
    ]
    effects: list[Any] = ["x", None]
    for keys, op, value in itertools.product(key_sets, ops, values):
        effects.append({k: (op if k == "op" else value) for k in keys})
    patches: list[Any] = [None, [], {"narration": "x"}, {"narration": "x", "effects": [], "y": 1}]
    for narration, effect in itertools.product(["", "x", 3], effects):
        patches.append({"narration": narration, "effects": [effect]})
        patches.append({"narration": narration, "effects": [effect, effect]})
    verdicts = [(_plainly_valid(p), _VALIDATOR.is_valid(p)) for p in patches]
    assert all(quick == full for quick, full in verdicts)
    assert sum(full for _, full in verdicts) > 3  # valid patches were among them


def test_a_patch_accepted_for_the_world_is_not_validated_again_when_applied(
    world: WorldState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge of an LLM node validated it; its application does not check it twice."""
    from chukwa_core import patching

    patch = {
        "narration": "Ant rests.",
        "effects": [{"op": "set_entity_state", "entity_id": "ant", "state": "resting"}],
    }
    validate_patch(patch, world)  # the judge
    checks: list[Any] = []
    monkeypatch.setattr(patching, "_schema_problem", lambda p: checks.append(p))
    patching.validate_patch_once(patch, world)  # the application
    assert checks == []
    assert world.accepted_patches == {}
    # an equal patch that was never accepted is validated; so is this one a second time
    patching.validate_patch_once(copy.deepcopy(patch), world)
    patching.validate_patch_once(patch, world)
    assert len(checks) == 2
    assert world.accepted_patches == {}


def test_a_patch_never_accepted_is_validated_when_applied(world: WorldState) -> None:
    from chukwa_core import patching

    bad = {
        "narration": "Ant eats.",
        "effects": [{"op": "set_entity_state", "entity_id": "Ant", "state": "eating"}],
    }
    with pytest.raises(PatchRejected, match="did you mean"):
        patching.validate_patch_once(bad, world)
    assert world.accepted_patches == {}
