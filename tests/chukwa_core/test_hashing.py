"""Canonical hashing: RFC 8785 for JSON, UTF-8 bytes for text. Pure."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from chukwa_core import hashing
from chukwa_core.errors import ChukwaError
from chukwa_core.ids import is_hash

H1 = "1" * 64
H2 = "2" * 64
H3 = "3" * 64
H4 = "4" * 64

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ok"],
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "maximum": 10}},
}
SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "chat",
    "interface": {
        "name": "llm_chat_completions",
        "model": "gpt-4o-mini",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "schema_delivery": "response_format",
        "timeout_ms": 60000,
        "params": {"temperature": 0.7, "max_tokens": 800},
    },
}
WORKFLOW: dict[str, Any] = {
    "version": 1,
    "execution": "per_subject_ordered",
    "ambient_sources": [],
    "nodes": [
        {
            "id": "act",
            "type": "llm_tool_loop",
            "llm_source_ref": {"hash": H1},
            "prompt_template": {
                "messages": [
                    {"role": "system", "content": "You control the acting subject."},
                    {"role": "user", "content": "{{world.projection}}"},
                ]
            },
            "available_tools": [],
            "max_generation_attempts": 3,
            "max_tool_calls": 0,
            "final_schema_ref": {"hash": H2},
        }
    ],
    "apply": {"from": "act.final"},
}
ENTITY: dict[str, Any] = {
    "id": "bob",
    "name": "Bob",
    "state": "hungry, beside the vending machine",
    "environment": "park",
    "kind": {
        "agent": {"goal": "get something to eat", "memory": "", "cognition_profile": "walker"}
    },
}
ENVIRONMENT = "A small white plate under a lamp. Crème brûlée crumbs. 🐜"

JSON_KINDS: list[tuple[str, Callable[[Any], str], dict[str, Any]]] = [
    ("json_schema", hashing.json_schema_hash, SCHEMA),
    ("response_source", hashing.response_source_hash, SOURCE),
    ("cognition_workflow", hashing.cognition_workflow_hash, WORKFLOW),
    ("entity", hashing.entity_hash, ENTITY),
]
JSON_KIND_IDS = [kind for kind, _, _ in JSON_KINDS]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _reverse_keys(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse insertion order."""
    if isinstance(value, dict):
        return {k: _reverse_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(item) for item in value]
    return value


def _flip(char: str) -> str:
    return "b" if char != "b" else "c"


def _one_character_variants(value: Any) -> Iterator[tuple[str, Any]]:
    """Every variant of ``value`` that differs in exactly one character of one string or key,
    or by one in one number."""
    if isinstance(value, str):
        for i, char in enumerate(value):
            yield f"[{i}]", value[:i] + _flip(char) + value[i + 1 :]
    elif isinstance(value, bool):
        yield "", not value
    elif isinstance(value, int | float):
        yield "", value + 1
    elif isinstance(value, dict):
        for key in value:
            for where, variant in _one_character_variants(value[key]):
                changed = dict(value)
                changed[key] = variant
                yield f".{key}{where}", changed
            for i, char in enumerate(key):
                new_key = key[:i] + _flip(char) + key[i + 1 :]
                renamed = {(new_key if k == key else k): v for k, v in value.items()}
                yield f".<key {key}>[{i}]", renamed
    elif isinstance(value, list):
        for index, item in enumerate(value):
            for where, variant in _one_character_variants(item):
                changed = list(value)
                changed[index] = variant
                yield f"[{index}]{where}", changed


# --- canonical JSON --------------------------------------------------------------------------


def test_canonical_bytes_follow_rfc8785() -> None:
    value = {"b": 1, "a": [1.0, "é", None, True, 1e-7, 0.5], "c": {"z": "x", "y": -0.0}}
    assert hashing.canonical_json_bytes(value) == (
        '{"a":[1,"é",null,true,1e-7,0.5],"b":1,"c":{"y":0,"z":"x"}}'.encode()
    )


@settings(max_examples=3000, deadline=None)
@given(
    st.floats(
        allow_nan=False, allow_infinity=False, min_value=-(2.0**53 - 1), max_value=2.0**53 - 1
    )
    | st.sampled_from([1e-4, 0.0001000001, 4503599627370495.5, 0.1, 0.7, 1.5, 2.5e-4, 123.456])
)
def test_floats_written_by_the_fast_path_are_exactly_rfc8785(number: float) -> None:
    # Non-integral floats of magnitude 1e-4 to 1e16 take json.dumps (Python's shortest repr),
    # the rest the rfc8785 library; either way the bytes are the library's.
    value = {"n": number, "list": [number, -number], "s": "x"}
    assert hashing.canonical_json_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("number", [1e21, 2.0**53, -1e300, 9007199254740992.0])
def test_floats_that_jsonb_would_read_back_as_integers_are_refused(number: float) -> None:
    # JSONB keeps 1e+21 as the decimal 1000000000000000000000, which reads back as an integer
    # beyond 2^53: the stored row would no longer hash to its key.
    with pytest.raises(ChukwaError) as excinfo:
        hashing.canonical_json_bytes({"n": number})
    assert excinfo.value.code == "not_canonicalizable"
    assert excinfo.value.details["field"] == "content/n"


def test_canonical_key_order_is_utf16_code_unit_order() -> None:
    # RFC 8785 §3.2.3: keys sort by UTF-16 code units, so U+1F600 (D83D DE00) sorts before
    # U+FB33 even though its code point is larger.
    value = {"\ufb33": 1, "\U0001f600": 2, "\u20ac": 3, "1": 4, "\r": 5, "\u0080": 6, "\u00f6": 7}
    keys = list(json.loads(hashing.canonical_json_bytes(value)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_json_hash_is_sha256_of_canonical_bytes() -> None:
    for _, fn, content in JSON_KINDS:
        assert fn(content) == _sha(hashing.canonical_json_bytes(content))
        assert is_hash(fn(content))


@pytest.mark.parametrize(("kind", "fn", "content"), JSON_KINDS, ids=JSON_KIND_IDS)
def test_json_kinds_are_deterministic(kind: str, fn: Callable[[Any], str], content: Any) -> None:
    first = hashing.canonical_json_bytes(content)
    again = hashing.canonical_json_bytes(copy.deepcopy(content))
    assert first == again
    assert fn(content) == fn(copy.deepcopy(content))
    # A round trip through ordinary JSON text (spacing, escapes) changes nothing.
    reparsed = json.loads(json.dumps(content, indent=4, ensure_ascii=True))
    assert hashing.canonical_json_bytes(reparsed) == first
    assert fn(reparsed) == fn(content)


@pytest.mark.parametrize(("kind", "fn", "content"), JSON_KINDS, ids=JSON_KIND_IDS)
def test_json_kinds_ignore_key_order(kind: str, fn: Callable[[Any], str], content: Any) -> None:
    reordered = _reverse_keys(content)
    assert json.dumps(reordered) != json.dumps(content)  # the test really reorders
    assert hashing.canonical_json_bytes(reordered) == hashing.canonical_json_bytes(content)
    assert fn(reordered) == fn(content)


@pytest.mark.parametrize(("kind", "fn", "content"), JSON_KINDS, ids=JSON_KIND_IDS)
def test_json_kinds_change_with_any_single_character(
    kind: str, fn: Callable[[Any], str], content: Any
) -> None:
    original = fn(content)
    seen = {original}
    count = 0
    for where, variant in _one_character_variants(content):
        variant_hash = fn(variant)
        assert variant_hash != original, f"{kind}: changing {where} did not change the hash"
        seen.add(variant_hash)
        count += 1
    assert count > 50
    assert len(seen) == count + 1  # no two single-character variants collide either


@pytest.mark.parametrize(("kind", "fn", "content"), JSON_KINDS, ids=JSON_KIND_IDS)
def test_json_kinds_see_list_order(kind: str, fn: Callable[[Any], str], content: Any) -> None:
    assert fn({"items": [1, 2]}) != fn({"items": [2, 1]})


def test_all_json_kinds_share_one_hash_function() -> None:
    # Same content → same hash whichever kind function computes it: the hash is of content.
    for _, fn, content in JSON_KINDS:
        assert fn(content) == hashing.json_hash(content)


# --- text ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [ENVIRONMENT, "a", " leading and trailing whitespace \n", "line\r\nbreak", "日本語のテキスト"],
)
def test_environment_hash_is_sha256_of_utf8_bytes(text: str) -> None:
    assert hashing.environment_hash(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert hashing.text_hash(text) == hashing.environment_hash(text)


def test_environment_text_is_not_json_quoted_or_normalized() -> None:
    assert hashing.environment_hash(ENVIRONMENT) != hashing.json_hash(ENVIRONMENT)
    # No Unicode normalization, no trimming: different bytes, different hash.
    nfc, nfd = "Cr\u00e8me", "Cre\u0300me"
    assert hashing.environment_hash(nfc) != hashing.environment_hash(nfd)
    assert hashing.environment_hash("plate") != hashing.environment_hash("plate\n")
    assert hashing.environment_hash("plate") != hashing.environment_hash("Plate")


def test_environment_hash_is_deterministic() -> None:
    assert hashing.environment_hash(ENVIRONMENT) == hashing.environment_hash(str(ENVIRONMENT))


def test_environment_hash_changes_with_any_single_character() -> None:
    original = hashing.environment_hash(ENVIRONMENT)
    hashes = set()
    for i, char in enumerate(ENVIRONMENT):
        variant = ENVIRONMENT[:i] + _flip(char) + ENVIRONMENT[i + 1 :]
        variant_hash = hashing.environment_hash(variant)
        assert variant_hash != original, f"changing character {i} did not change the hash"
        hashes.add(variant_hash)
    assert len(hashes) == len(ENVIRONMENT)


def test_environment_hash_sees_one_byte_inside_a_multibyte_character() -> None:
    # "é" (C3 A9) vs "è" (C3 A8): one byte apart in UTF-8.
    assert "é".encode()[:1] == "è".encode()[:1]
    assert hashing.environment_hash("café") != hashing.environment_hash("cafè")


# --- cognition profile -----------------------------------------------------------------------


def test_profile_hash_is_sha256_of_jcs_workflow_hash_object() -> None:
    workflow_hash = hashing.cognition_workflow_hash(WORKFLOW)
    expected_bytes = b'{"workflow_hash":"' + workflow_hash.encode() + b'"}'
    assert hashing.canonical_json_bytes({"workflow_hash": workflow_hash}) == expected_bytes
    assert hashing.cognition_profile_hash(workflow_hash) == _sha(expected_bytes)
    assert hashing.cognition_profile_content(workflow_hash) == {"workflow_hash": workflow_hash}


def test_profile_hash_differs_from_its_workflow_hash() -> None:
    workflow_hash = hashing.cognition_workflow_hash(WORKFLOW)
    assert hashing.cognition_profile_hash(workflow_hash) != workflow_hash


def test_profile_hash_changes_with_any_character_of_the_workflow_hash() -> None:
    original = hashing.cognition_profile_hash(H1)
    assert hashing.cognition_profile_hash(H1) == original
    for i in range(64):
        variant = H1[:i] + "a" + H1[i + 1 :]
        assert hashing.cognition_profile_hash(variant) != original, f"position {i}"


def test_one_byte_in_a_prompt_changes_workflow_and_profile_hashes() -> None:
    changed = copy.deepcopy(WORKFLOW)
    changed["nodes"][0]["prompt_template"]["messages"][0]["content"] = (
        "You control the acting subject!"
    )
    assert hashing.cognition_workflow_hash(changed) != hashing.cognition_workflow_hash(WORKFLOW)
    assert hashing.cognition_profile_hash(
        hashing.cognition_workflow_hash(changed)
    ) != hashing.cognition_profile_hash(hashing.cognition_workflow_hash(WORKFLOW))


# --- scenario --------------------------------------------------------------------------------


def _scenario(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scenario_slug": "ant_on_plate",
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
        "cognition_profiles": {"ant": H1, "walker": H2},
        "environments": {"kitchen_plate": H3, "park": H4},
        "entities": [H1, H2, H3],
    }
    base.update(overrides)
    return base


def test_scenario_hash_is_deterministic() -> None:
    assert hashing.scenario_hash(**_scenario()) == hashing.scenario_hash(**_scenario())
    assert is_hash(hashing.scenario_hash(**_scenario()))


def test_scenario_hash_is_the_hash_of_its_manifest() -> None:
    manifest = hashing.scenario_manifest(**_scenario())
    assert hashing.scenario_hash(**_scenario()) == _sha(hashing.canonical_json_bytes(manifest))
    assert manifest == {
        "scenario_slug": "ant_on_plate",
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
        "cognition_profiles": {"ant": H1, "walker": H2},
        "environments": {"kitchen_plate": H3, "park": H4},
        "entities": [H1, H2, H3],
    }


def test_scenario_label_maps_are_order_independent() -> None:
    shuffled = _scenario(
        cognition_profiles={"walker": H2, "ant": H1},
        environments={"park": H4, "kitchen_plate": H3},
    )
    assert hashing.scenario_hash(**shuffled) == hashing.scenario_hash(**_scenario())
    assert list(hashing.scenario_manifest(**shuffled)["cognition_profiles"]) == ["ant", "walker"]
    assert list(hashing.scenario_manifest(**shuffled)["environments"]) == ["kitchen_plate", "park"]


def test_scenario_entity_order_matters() -> None:
    assert hashing.scenario_hash(**_scenario(entities=[H3, H2, H1])) != hashing.scenario_hash(
        **_scenario()
    )
    assert hashing.scenario_hash(**_scenario(entities=[H2, H1, H3])) != hashing.scenario_hash(
        **_scenario()
    )


def test_scenario_entities_accept_any_sequence() -> None:
    assert hashing.scenario_hash(**_scenario(entities=(H1, H2, H3))) == hashing.scenario_hash(
        **_scenario()
    )


def test_swapping_two_label_bindings_changes_the_scenario_hash() -> None:
    base = hashing.scenario_hash(**_scenario())
    swapped_profiles = _scenario(cognition_profiles={"ant": H2, "walker": H1})
    swapped_envs = _scenario(environments={"kitchen_plate": H4, "park": H3})
    assert hashing.scenario_hash(**swapped_profiles) != base
    assert hashing.scenario_hash(**swapped_envs) != base
    assert hashing.scenario_hash(**swapped_profiles) != hashing.scenario_hash(**swapped_envs)


def test_a_label_in_the_other_map_is_a_different_scenario() -> None:
    # Profiles and environments are separate maps; moving a binding between them matters.
    a = _scenario(cognition_profiles={"ant": H1}, environments={"park": H4, "x": H2})
    b = _scenario(cognition_profiles={"ant": H1, "x": H2}, environments={"park": H4})
    assert hashing.scenario_hash(**a) != hashing.scenario_hash(**b)


@pytest.mark.parametrize(
    "change",
    [
        {"scenario_slug": "ant_on_plate2"},
        {"description": "An ant on a plate!"},
        {"chronon_seconds": 61},
        {"cognition_profiles": {"ant": H1, "walker": H3}},
        {"cognition_profiles": {"ant": H1, "walkers": H2}},
        {"cognition_profiles": {"ant": H1}},
        {"environments": {"kitchen_plate": H3, "park": H1}},
        {"environments": {"kitchen_plate": H3, "park": H4, "attic": H4}},
        {"entities": [H1, H2]},
        {"entities": [H1, H2, H3, H3]},
    ],
)
def test_scenario_hash_sees_every_part(change: dict[str, Any]) -> None:
    assert hashing.scenario_hash(**_scenario(**change)) != hashing.scenario_hash(**_scenario())


def test_scenario_chronon_is_an_integer_not_a_string() -> None:
    assert hashing.scenario_hash(**_scenario(chronon_seconds="60")) != hashing.scenario_hash(
        **_scenario()
    )


# --- not canonicalizable ---------------------------------------------------------------------


@pytest.mark.parametrize("number", [2**53, -(2**53), 2**63, 10**30])
def test_integers_beyond_2_53_are_not_canonicalizable(number: int) -> None:
    for _, fn, _content in JSON_KINDS:
        with pytest.raises(ChukwaError) as excinfo:
            fn({"maximum": number})
        assert excinfo.value.code == "not_canonicalizable"
        assert excinfo.value.message.startswith("content/maximum: numbers must lie within")
        assert excinfo.value.details["field"] == "content/maximum"
    with pytest.raises(ChukwaError) as excinfo:
        hashing.canonical_json_bytes([number])
    assert excinfo.value.code == "not_canonicalizable"


@pytest.mark.parametrize("number", [2**53 - 1, -(2**53) + 1, 0, -1])
def test_integers_within_2_53_are_fine(number: int) -> None:
    assert hashing.canonical_json_bytes({"n": number}) == b'{"n":' + str(number).encode() + b"}"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_not_canonicalizable(value: float) -> None:
    with pytest.raises(ChukwaError) as excinfo:
        hashing.json_hash({"x": value})
    assert excinfo.value.code == "not_canonicalizable"


def test_lone_surrogate_in_a_string_value_is_not_canonicalizable() -> None:
    # A JSON body may carry "\ud800"; Python's json module accepts it.
    value = json.loads('{"name": "\\ud800"}')
    with pytest.raises(ChukwaError) as excinfo:
        hashing.json_hash(value)
    assert excinfo.value.code == "not_canonicalizable"


def test_lone_surrogate_in_an_object_key_is_not_canonicalizable() -> None:
    # BUG (hashing.canonical_json_bytes): rfc8785 sorts keys by encoding them as UTF-16, and a
    # lone surrogate in a *key* raises UnicodeEncodeError, which is not a CanonicalizationError
    # and escapes as a 500. Expected: ChukwaError("not_canonicalizable").
    value = json.loads('{"\\ud800": 1}')
    try:
        hashing.json_hash(value)
    except ChukwaError as exc:
        assert exc.code == "not_canonicalizable"
    except UnicodeError as exc:
        raise AssertionError(
            "canonical_json_bytes let UnicodeEncodeError escape for a lone-surrogate key "
            f"instead of raising ChukwaError('not_canonicalizable'): {exc}"
        ) from exc
    else:
        raise AssertionError("a lone-surrogate key was canonicalized")


def test_non_string_keys_are_not_canonicalizable() -> None:
    with pytest.raises(ChukwaError) as excinfo:
        hashing.json_hash({1: "a"})
    assert excinfo.value.code == "not_canonicalizable"


def test_simple_values_take_the_fast_path_with_the_exact_rfc8785_bytes() -> None:
    """A world snapshot (strings, ASCII keys, arrays, integers, booleans, null) is written by
    the C JSON encoder; the bytes must be RFC 8785's for every escape and ordering case."""
    import random

    import rfc8785

    from chukwa_core.json_values import simple_json

    tricky = ['"', "\\", "\x01", "\x1f", "\n", "\t", "\x7f", "é", "\u2028", "\ufeff", "😀", "/"]
    random.seed(7)
    for _ in range(300):
        text = "".join(random.choice([*tricky, "a", "Z", " "]) for _ in range(12))
        value = {
            "environments": {"b_room": text, "a_room": "x", "Z": ""},
            "entities": [{"id": "e", "state": text, "n": random.randint(-(2**53) + 1, 2**53 - 1)}],
            "flags": [True, False, None, 0],
        }
        assert simple_json(value) is True
        assert hashing.canonical_json_bytes(value) == rfc8785.dumps(value)
    # what is not simple goes through the library: floats ECMAScript writes otherwise than
    # Python's repr (integral, tiny, huge), non-ASCII keys (UTF-16 order)
    assert simple_json({"x": 1.5}) is True
    for number in (1.0, -0.0, 1e-7, 5e-5, 2.0**52):
        assert simple_json({"x": number}) is False
    assert simple_json({"\ue000": 1, "😀": 2}) is False
    assert hashing.canonical_json_bytes({"\ue000": 1, "😀": 2}) == rfc8785.dumps(
        {"\ue000": 1, "😀": 2}
    )
    # and what cannot be hashed is still refused with its pointer
    assert simple_json({"a": ["\x00"]}) is None
    with pytest.raises(ChukwaError, match="/a/0"):
        hashing.canonical_json_bytes({"a": ["\x00"]})


def test_a_simple_value_nested_deeper_than_orjson_goes_has_the_same_bytes() -> None:
    """orjson stops at 255 levels; ``json`` writes the rest, with the same bytes."""
    import json

    for depth in (100, 127, 128, 300):  # two levels each, a dict and a list
        value: Any = {"leaf": "é\x01"}
        for level in range(depth):
            value = {"b": [value], "a": level}
        expected = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        assert hashing.canonical_json_bytes(value) == expected.encode()
