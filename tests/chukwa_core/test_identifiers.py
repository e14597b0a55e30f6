"""Identifier grammars and authoring-input normalization (seed 003 Part A). Pure."""

from __future__ import annotations

import pytest

from chukwa_core.ids import (
    IdentifierError,
    entity_id_problem,
    is_entity_id,
    is_env_var_name,
    is_hash,
    is_label,
    label_problem,
    normalize_entity_id,
    validate_label,
)

# --- entity ids ------------------------------------------------------------------------------

VALID_ENTITY_IDS = [
    "ant",
    "crumb",
    "sugar_grain",
    "ant-alice",
    "first_ant",
    "crumb_east",
    "plate.crumb",
    "plate.crumb_east",
    "room.plate.crumb",
    "ant.1",
    "thing_42",
    "crumb__east",
    "_",
    "-",
    "1",
]

INVALID_ENTITY_IDS = [
    "",
    "ant.",
    ".ant",
    "ant..alpha",
    ".",
    "first ant!",
    "first ant",
    "Ant",
    "ant\n",
    " ant",
    "ant/1",
    "crème",
]


@pytest.mark.parametrize("value", VALID_ENTITY_IDS)
def test_valid_entity_ids_match_the_grammar(value: str) -> None:
    assert is_entity_id(value)
    assert entity_id_problem(value) is None


@pytest.mark.parametrize("value", INVALID_ENTITY_IDS)
def test_invalid_entity_ids_are_rejected(value: str) -> None:
    assert not is_entity_id(value)
    assert entity_id_problem(value) is not None


@pytest.mark.parametrize("value", [None, 1, ["ant"], {"id": "ant"}, b"ant"])
def test_non_strings_are_never_entity_ids(value: object) -> None:
    assert not is_entity_id(value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "is empty"),
        ("ant.", "empty trailing part"),
        (".ant", "empty leading part"),
        ("ant..alpha", "empty part between dots"),
        ("first ant!", "' '"),
        ("ant!", "'!'"),
    ],
)
def test_entity_id_problem_says_why(value: str, problem: str) -> None:
    found = entity_id_problem(value)
    assert found is not None
    assert problem in found


# --- normalization (seed 003 Part A outcomes) ------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("crumb", "crumb"),
        ("Crumb", "crumb"),
        (" CRUMB ", "crumb"),
        ("first ant", "first_ant"),
        ("Ant Alpha", "ant_alpha"),
        ("plate.crumb", "plate.crumb"),
        ("PLATE.Crumb", "plate.crumb"),
        ("ant.1", "ant.1"),
        ("crumb__east", "crumb__east"),
        ("crumb_east", "crumb_east"),
        ("first   ant", "first_ant"),
        ("first\t\nant", "first_ant"),
        ("\tAnt Alpha\n", "ant_alpha"),
        ("Room.Plate.Crumb", "room.plate.crumb"),
    ],
)
def test_normalization_outcomes(raw: str, expected: str) -> None:
    assert normalize_entity_id(raw) == expected
    assert is_entity_id(expected)


def test_normalization_is_idempotent() -> None:
    for raw in ("Crumb", " CRUMB ", "first ant", "Ant Alpha", "PLATE.Crumb", "crumb__east"):
        once = normalize_entity_id(raw)
        assert normalize_entity_id(once) == once


def test_repeated_separators_are_not_collapsed() -> None:
    assert normalize_entity_id("crumb__east") != normalize_entity_id("crumb_east")
    assert normalize_entity_id("crumb__east") == "crumb__east"


def test_first_ant_bang_is_rejected_naming_the_character() -> None:
    with pytest.raises(IdentifierError) as excinfo:
        normalize_entity_id("first ant!")
    message = str(excinfo.value)
    assert "'!'" in message
    assert "first ant!" in message
    # The whitespace was normalized to "_" before validation, so only '!' is offending.
    assert "' '" not in message


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_empty_input_is_rejected(raw: str) -> None:
    with pytest.raises(IdentifierError, match="is empty"):
        normalize_entity_id(raw)


def test_empty_trailing_part_is_rejected() -> None:
    with pytest.raises(IdentifierError, match="empty trailing part"):
        normalize_entity_id("ant.")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (".ant", "empty leading part"),
        ("ant..alpha", "empty part between dots"),
        ("ant/alpha", "'/'"),
        ("crème", "'è'"),
    ],
)
def test_other_normalization_failures_name_the_problem(raw: str, fragment: str) -> None:
    with pytest.raises(IdentifierError) as excinfo:
        normalize_entity_id(raw)
    assert fragment in str(excinfo.value)


def test_whitespace_around_dots_becomes_underscores_not_silently_dropped() -> None:
    # "plate . crumb" → "plate_._crumb": a valid id that differs from "plate.crumb".
    assert normalize_entity_id("plate . crumb") == "plate_._crumb"
    assert normalize_entity_id("plate . crumb") != "plate.crumb"


def test_identifier_error_is_a_value_error() -> None:
    assert issubclass(IdentifierError, ValueError)


# --- labels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "7",
        "ab",
        "park",
        "kitchen_plate",
        "ant-on-plate",
        "a_b",
        "a__b",
        "a-_-b",
        "turn1",
        "a" * 64,
        "a" + "_" * 62 + "b",
    ],
)
def test_valid_labels(value: str) -> None:
    assert is_label(value)
    assert label_problem(value) is None
    assert validate_label(value, "label") == value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "is empty"),
        ("a" * 65, "65 characters"),
        ("a" * 100, "100 characters"),
        ("_", "must start and end"),
        ("-", "must start and end"),
        ("_park", "must start and end"),
        ("park_", "must start and end"),
        ("-park", "must start and end"),
        ("park-", "must start and end"),
        ("Park", "'P'"),
        ("PARK", "'P'"),
        ("parK", "'K'"),
        ("kitchen plate", "' '"),
        ("plate.crumb", "'.'"),
        ("park\n", "'\\n'"),
        ("café", "'é'"),
    ],
)
def test_invalid_labels_say_why(value: str, fragment: str) -> None:
    assert not is_label(value)
    problem = label_problem(value)
    assert problem is not None
    assert fragment in problem
    with pytest.raises(IdentifierError) as excinfo:
        validate_label(value, "environment label")
    assert str(excinfo.value).startswith("environment label ")
    assert fragment in str(excinfo.value)


def test_label_length_boundaries() -> None:
    assert is_label("a")
    assert is_label("a" * 63)
    assert is_label("a" * 64)
    assert not is_label("a" * 65)
    assert is_label("a" + "-" * 62 + "z")
    assert not is_label("a" + "-" * 63 + "z")


@pytest.mark.parametrize("value", [None, 1, True, ["park"], {"park": 1}])
def test_non_string_labels(value: object) -> None:
    assert not is_label(value)
    assert label_problem(value) == "must be a string"
    with pytest.raises(IdentifierError, match="must be a string"):
        validate_label(value, "label")


# --- hashes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "0" * 64,
        "f" * 64,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ],
)
def test_valid_hashes(value: str) -> None:
    assert is_hash(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0" * 63,
        "0" * 65,
        "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
        "g" * 64,
        " " + "0" * 63,
        "0" * 64 + "\n",
        "sha256:" + "0" * 57,
        None,
        0,
        ["0" * 64],
    ],
)
def test_invalid_hashes(value: object) -> None:
    assert not is_hash(value)


# --- environment variable names ----------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "CHUKWA_LLM_BASE_URL",
        "CHUKWA_LLM_API_KEY",
        "CHUKWA_TOY_VENDING_URL",
        "CHUKWA_X",
        "CHUKWA_1",
        "CHUKWA__",
    ],
)
def test_allowed_env_var_names(value: str) -> None:
    assert is_env_var_name(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "HOME",
        "PATH",
        "AWS_SECRET_ACCESS_KEY",
        "CHUKWA_",
        "CHUKWA",
        "chukwa_x",
        "Chukwa_X",
        "CHUKWA_x",
        "CHUKWA_LLM-URL",
        "CHUKWA_LLM URL",
        "XCHUKWA_X",
        " CHUKWA_X",
        "CHUKWA_X\n",
        None,
        ["CHUKWA_X"],
    ],
)
def test_disallowed_env_var_names(value: object) -> None:
    assert not is_env_var_name(value)
