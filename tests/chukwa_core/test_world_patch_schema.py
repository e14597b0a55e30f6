"""The kernel's WorldPatch JSON Schema. Pure: no database."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from chukwa_core.component_validation import validate_json_schema_content
from chukwa_core.hashing import json_schema_hash
from chukwa_core.patch_schema import PATCH_OPS, WORLD_PATCH_SCHEMA, world_patch_schema_hash

SPEC_EXAMPLE: dict[str, Any] = {
    "narration": "Bob buys a candy bar.",
    "effects": [
        {"op": "set_entity_state", "entity_id": "bob", "state": "holding a candy bar"},
        {"op": "append_entity_memory", "entity_id": "bob", "content": "I bought candy."},
        {"op": "set_environment_content", "environment_label": "park", "content": "…"},
    ],
}

VALIDATOR = Draft202012Validator(WORLD_PATCH_SCHEMA)


def errors(instance: Any) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(instance)]


def with_effect(effect: dict[str, Any]) -> dict[str, Any]:
    return {"narration": "Something happens.", "effects": [effect]}


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(WORLD_PATCH_SCHEMA)
    assert WORLD_PATCH_SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # The store's own validator accepts it too (it is stored as an ordinary json_schema).
    assert validate_json_schema_content(copy.deepcopy(WORLD_PATCH_SCHEMA)) == WORLD_PATCH_SCHEMA


def test_schema_hash_is_the_json_schema_hash() -> None:
    assert world_patch_schema_hash() == json_schema_hash(WORLD_PATCH_SCHEMA)
    assert world_patch_schema_hash() == world_patch_schema_hash()


def test_only_three_ops_exist() -> None:
    assert PATCH_OPS == ("set_entity_state", "append_entity_memory", "set_environment_content")
    branches = WORLD_PATCH_SCHEMA["properties"]["effects"]["items"]["anyOf"]
    assert sorted(b["properties"]["op"]["const"] for b in branches) == sorted(PATCH_OPS)


def test_accepts_the_spec_example() -> None:
    assert errors(SPEC_EXAMPLE) == []


def test_accepts_empty_effects() -> None:
    assert errors({"narration": "Nothing changes.", "effects": []}) == []


@pytest.mark.parametrize("op", ["create_entity", "delete_entity", "move", "SET_ENTITY_STATE", ""])
def test_rejects_unknown_op(op: str) -> None:
    assert errors(with_effect({"op": op, "entity_id": "bob", "state": "gone"}))


def test_rejects_effect_without_op() -> None:
    assert errors(with_effect({"entity_id": "bob", "state": "gone"}))


@pytest.mark.parametrize("index", [0, 1, 2])
def test_rejects_extra_fields_on_each_op(index: int) -> None:
    effect = copy.deepcopy(SPEC_EXAMPLE["effects"][index])
    effect["reason"] = "because"
    assert errors(with_effect(effect))


def test_rejects_extra_top_level_fields() -> None:
    for key in ("environment_after", "agent_state_after", "entity_mutations", "inner_monologue"):
        patch = copy.deepcopy(SPEC_EXAMPLE)
        patch[key] = "x"
        assert errors(patch), key


@pytest.mark.parametrize(
    ("index", "key"),
    [
        (0, "entity_id"),
        (0, "state"),
        (1, "entity_id"),
        (1, "content"),
        (2, "environment_label"),
        (2, "content"),
    ],
)
def test_rejects_empty_strings(index: int, key: str) -> None:
    effect = copy.deepcopy(SPEC_EXAMPLE["effects"][index])
    effect[key] = ""
    assert errors(with_effect(effect))


@pytest.mark.parametrize(
    ("index", "key"),
    [
        (0, "entity_id"),
        (0, "state"),
        (1, "entity_id"),
        (1, "content"),
        (2, "environment_label"),
        (2, "content"),
    ],
)
def test_rejects_missing_or_non_string_fields(index: int, key: str) -> None:
    missing = copy.deepcopy(SPEC_EXAMPLE["effects"][index])
    del missing[key]
    assert errors(with_effect(missing))
    wrong_type = copy.deepcopy(SPEC_EXAMPLE["effects"][index])
    wrong_type[key] = 42
    assert errors(with_effect(wrong_type))


def test_rejects_mixed_up_fields_between_ops() -> None:
    # An environment label where an entity id belongs, and vice versa.
    assert errors(
        with_effect({"op": "set_entity_state", "environment_label": "park", "state": "x"})
    )
    assert errors(
        with_effect({"op": "set_environment_content", "entity_id": "bob", "content": "x"})
    )
    assert errors(with_effect({"op": "append_entity_memory", "entity_id": "bob", "state": "x"}))


def test_rejects_missing_narration() -> None:
    patch = copy.deepcopy(SPEC_EXAMPLE)
    del patch["narration"]
    assert errors(patch)


def test_rejects_empty_or_non_string_narration() -> None:
    assert errors({"narration": "", "effects": []})
    assert errors({"narration": None, "effects": []})


def test_rejects_missing_or_non_array_effects() -> None:
    assert errors({"narration": "x"})
    assert errors({"narration": "x", "effects": {}})
    assert errors({"narration": "x", "effects": [None]})


@pytest.mark.parametrize("instance", [None, [], "patch", 1])
def test_rejects_non_objects(instance: object) -> None:
    assert errors(instance)
