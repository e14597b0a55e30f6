"""Component content validators and scenario rules. Pure: no database."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chukwa_core import hashing
from chukwa_core.component_validation import (
    CHRONON_MAX_SECONDS,
    ENVIRONMENT_MAX_BYTES,
    SCENARIO_MAX_BYTES,
    check_scenario_size,
    normalize_entity_content,
    validate_environment_content,
    validate_json_schema_content,
    validate_scenario_bindings,
    validate_scenario_scalars,
)
from chukwa_core.errors import ChukwaError
from chukwa_core.source_validation import TIMEOUT_MS_MAX, validate_response_source_content

LLM_SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "chat",
    "interface": {
        "name": "llm_chat_completions",
        "model": "gpt-4o-mini",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "api_key_env": "CHUKWA_LLM_API_KEY",
        "schema_delivery": "response_format",
        "timeout_ms": 60000,
        "params": {"temperature": 0.7, "max_tokens": 800},
    },
}
HTTP_SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "toy_vending_machine",
    "interface": {
        "name": "http_json",
        "method": "POST",
        "url_env": "CHUKWA_TOY_VENDING_URL",
        "path": "/buy_candy",
        "timeout_ms": 5000,
    },
}
AGENT: dict[str, Any] = {
    "id": "bob",
    "name": "Bob",
    "state": "hungry, beside the vending machine",
    "environment": "park",
    "kind": {
        "agent": {"goal": "get something to eat", "memory": "", "cognition_profile": "walker"}
    },
}
PROP: dict[str, Any] = {
    "id": "crumb",
    "name": "Crumb",
    "state": "a bread crumb 3cm east of centre",
    "environment": "kitchen_plate",
    "kind": "prop",
}


@contextmanager
def rejected(code: str, field: str) -> Iterator[None]:
    """Expect a ChukwaError with ``code`` whose message starts with ``field`` and whose
    ``details.field`` is ``field``."""
    with pytest.raises(ChukwaError) as excinfo:
        yield
    error = excinfo.value
    assert error.code == code, f"expected {code}, got {error.code}: {error.message}"
    assert error.details.get("field") == field, error.details
    assert error.message.startswith(f"{field}: "), error.message
    assert error.status_code == 400


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with the dotted ``path`` set to ``value`` (or removed when
    ``value`` is ``_DELETE``)."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    target = out
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return out


_DELETE = object()


# --- json_schema -----------------------------------------------------------------------------


def test_valid_json_schema_is_returned() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    assert validate_json_schema_content(schema) == schema
    assert validate_json_schema_content({}) == {}


def test_invalid_json_schema_names_the_pointer() -> None:
    with rejected("invalid_json_schema", "content/type"):
        validate_json_schema_content({"type": 12})


def test_invalid_nested_json_schema_names_the_nested_pointer() -> None:
    with rejected("invalid_json_schema", "content/properties/ok/minLength"):
        validate_json_schema_content({"properties": {"ok": {"minLength": -1}}})


def test_invalid_json_schema_uses_the_given_field() -> None:
    with rejected("invalid_json_schema", "nodes[0].inline/type"):
        validate_json_schema_content({"type": "nonsense"}, "nodes[0].inline")


@pytest.mark.parametrize("content", [[], "schema", 1, None, True])
def test_non_object_schema_is_rejected(content: object) -> None:
    with rejected("invalid_json_schema", "content"):
        validate_json_schema_content(content)


def test_boolean_schema_is_rejected_with_its_type_named() -> None:
    with pytest.raises(ChukwaError) as excinfo:
        validate_json_schema_content(True)
    assert "boolean" in excinfo.value.message


# --- response_source: shape ------------------------------------------------------------------


@pytest.mark.parametrize("source", [LLM_SOURCE, HTTP_SOURCE], ids=["llm", "http"])
def test_valid_sources_pass(source: dict[str, Any]) -> None:
    assert validate_response_source_content(copy.deepcopy(source)) == source


def test_minimal_sources_pass() -> None:
    llm = _with(_with(LLM_SOURCE, "interface.api_key_env", _DELETE), "interface.params", _DELETE)
    assert validate_response_source_content(llm) == llm
    http = _with(HTTP_SOURCE, "interface.path", _DELETE)
    assert validate_response_source_content(http) == http


def test_prompt_only_schema_delivery_is_allowed() -> None:
    source = _with(LLM_SOURCE, "interface.schema_delivery", "prompt_only")
    assert validate_response_source_content(source) == source


@pytest.mark.parametrize("content", [[], "chat", None])
def test_source_must_be_an_object(content: object) -> None:
    with rejected("invalid_response_source", "content"):
        validate_response_source_content(content)


@pytest.mark.parametrize("key", ["version", "label", "interface"])
def test_source_top_level_fields_are_required(key: str) -> None:
    with rejected("invalid_response_source", f"content.{key}"):
        validate_response_source_content(_with(LLM_SOURCE, key, _DELETE))


@pytest.mark.parametrize("key", ["url", "base_url", "api_key", "headers"])
def test_source_top_level_unknown_fields_are_rejected(key: str) -> None:
    with rejected("invalid_response_source", f"content.{key}"):
        validate_response_source_content(_with(LLM_SOURCE, key, "https://evil.example"))


@pytest.mark.parametrize("version", [2, 0, "1", 1.0, True, None])
def test_source_version_must_be_integer_1(version: object) -> None:
    with rejected("unsupported_version", "content.version"):
        validate_response_source_content(_with(LLM_SOURCE, "version", version))


@pytest.mark.parametrize("label", ["", "Chat", "_chat", "a" * 65, 7])
def test_source_label_must_be_a_label(label: object) -> None:
    with rejected("invalid_label", "content.label"):
        validate_response_source_content(_with(LLM_SOURCE, "label", label))


def test_source_interface_must_be_an_object() -> None:
    with rejected("invalid_response_source", "content.interface"):
        validate_response_source_content(_with(LLM_SOURCE, "interface", "llm_chat_completions"))


def test_source_interface_name_is_required() -> None:
    with rejected("invalid_response_source", "content.interface.name"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.name", _DELETE))


@pytest.mark.parametrize("name", ["grpc", "LLM_CHAT_COMPLETIONS", "", "openai"])
def test_unknown_interface(name: str) -> None:
    with rejected("unknown_interface", "content.interface.name"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.name", name))


def test_mcp_tool_is_an_executable_interface() -> None:
    source = {
        "version": 1,
        "label": "lamp",
        "interface": {
            "name": "mcp_tool",
            "url_env": "CHUKWA_MCP_LAMP_URL",
            "api_key_env": "CHUKWA_MCP_LAMP_API_KEY",
            "tool": "toggle_lamp",
            "timeout_ms": 5000,
        },
    }
    assert validate_response_source_content(source) == source


@pytest.mark.parametrize("name", [["llm_chat_completions"], {"x": 1}])
def test_unhashable_interface_name_is_a_400_not_a_crash(name: object) -> None:
    # BUG (validation.validate_response_source_content): ``name in EXECUTABLE_INTERFACES`` raises
    # TypeError ("unhashable type") for a list/dict name, which the API turns into a 500.
    try:
        validate_response_source_content(_with(LLM_SOURCE, "interface.name", name))
    except ChukwaError as exc:
        assert exc.code in {"unknown_interface", "invalid_response_source"}
        assert exc.details["field"] == "content.interface.name"
    except TypeError as exc:
        raise AssertionError(
            f"interface.name={name!r} crashed with TypeError instead of a ChukwaError: {exc}"
        ) from exc
    else:
        raise AssertionError("a non-string interface name was accepted")


# --- response_source: environment variable names ---------------------------------------------


@pytest.mark.parametrize("key", ["base_url_env", "api_key_env"])
@pytest.mark.parametrize(
    "value", ["HOME", "chukwa_x", "CHUKWA_", "PATH", "CHUKWA_llm", "CHUKWA_LLM-URL", "", 5, None]
)
def test_llm_env_var_names_must_be_chukwa_names(key: str, value: object) -> None:
    with rejected("invalid_env_var_name", f"content.interface.{key}"):
        validate_response_source_content(_with(LLM_SOURCE, f"interface.{key}", value))


@pytest.mark.parametrize("value", ["HOME", "chukwa_x", "CHUKWA_", "AWS_SECRET_ACCESS_KEY"])
def test_http_url_env_must_be_a_chukwa_name(value: str) -> None:
    with rejected("invalid_env_var_name", "content.interface.url_env"):
        validate_response_source_content(_with(HTTP_SOURCE, "interface.url_env", value))


def test_env_var_error_message_names_the_variable_and_rule() -> None:
    with pytest.raises(ChukwaError) as excinfo:
        validate_response_source_content(_with(LLM_SOURCE, "interface.base_url_env", "HOME"))
    assert "'HOME'" in excinfo.value.message
    assert "^CHUKWA_[A-Z0-9_]+_URL$" in excinfo.value.message


# --- response_source: no URLs in authored data -----------------------------------------------


@pytest.mark.parametrize(
    "key", ["url", "base_url", "api_key", "endpoint", "host", "headers", "api_base"]
)
def test_llm_interface_rejects_unknown_fields_such_as_urls(key: str) -> None:
    with rejected("invalid_response_source", f"content.interface.{key}"):
        validate_response_source_content(
            _with(LLM_SOURCE, f"interface.{key}", "https://evil.example/v1")
        )


@pytest.mark.parametrize("key", ["url", "base_url", "host", "headers", "api_key_env"])
def test_http_interface_rejects_unknown_fields_such_as_urls(key: str) -> None:
    with rejected("invalid_response_source", f"content.interface.{key}"):
        validate_response_source_content(
            _with(HTTP_SOURCE, f"interface.{key}", "https://evil.example/buy")
        )


def test_unknown_field_error_lists_allowed_fields() -> None:
    with pytest.raises(ChukwaError) as excinfo:
        validate_response_source_content(_with(LLM_SOURCE, "interface.url", "https://x"))
    assert "base_url_env" in excinfo.value.message
    assert excinfo.value.details["unknown"] == ["url"]


# --- response_source: LLM fields -------------------------------------------------------------


@pytest.mark.parametrize("key", ["model", "base_url_env", "schema_delivery", "timeout_ms"])
def test_llm_required_fields(key: str) -> None:
    with rejected("invalid_response_source", f"content.interface.{key}"):
        validate_response_source_content(_with(LLM_SOURCE, f"interface.{key}", _DELETE))


def test_schema_delivery_missing_is_rejected() -> None:
    with rejected("invalid_response_source", "content.interface.schema_delivery"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.schema_delivery", _DELETE))


@pytest.mark.parametrize("value", ["json_mode", "RESPONSE_FORMAT", "", None, "tools"])
def test_schema_delivery_unknown_is_rejected(value: object) -> None:
    with rejected("invalid_response_source", "content.interface.schema_delivery"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.schema_delivery", value))


def test_unhashable_schema_delivery_is_a_400_not_a_crash() -> None:
    # BUG (validation.validate_response_source_content): ``interface["schema_delivery"] not in
    # SCHEMA_DELIVERIES`` raises TypeError for a list value, which the API turns into a 500.
    source = _with(LLM_SOURCE, "interface.schema_delivery", ["response_format"])
    try:
        validate_response_source_content(source)
    except ChukwaError as exc:
        assert exc.code == "invalid_response_source"
        assert exc.details["field"] == "content.interface.schema_delivery"
    except TypeError as exc:
        raise AssertionError(
            f"schema_delivery=['response_format'] crashed with TypeError: {exc}"
        ) from exc
    else:
        raise AssertionError("a list schema_delivery was accepted")


@pytest.mark.parametrize("value", ["", "   ", 4, None])
def test_llm_model_must_be_a_non_empty_string(value: object) -> None:
    with rejected("invalid_response_source", "content.interface.model"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.model", value))


@pytest.mark.parametrize("source", [LLM_SOURCE, HTTP_SOURCE], ids=["llm", "http"])
@pytest.mark.parametrize("value", [0, -1, TIMEOUT_MS_MAX + 1, "5000", 5000.0, True, None])
def test_timeout_ms_bounds(source: dict[str, Any], value: object) -> None:
    with rejected("invalid_response_source", "content.interface.timeout_ms"):
        validate_response_source_content(_with(source, "interface.timeout_ms", value))


@pytest.mark.parametrize("source", [LLM_SOURCE, HTTP_SOURCE], ids=["llm", "http"])
@pytest.mark.parametrize("value", [1, TIMEOUT_MS_MAX])
def test_timeout_ms_boundaries_are_inclusive(source: dict[str, Any], value: int) -> None:
    changed = _with(source, "interface.timeout_ms", value)
    assert validate_response_source_content(changed) == changed


@pytest.mark.parametrize("key", ["messages", "stream", "response_format", "model", "tools"])
def test_llm_params_cannot_set_what_chukwa_sets(key: str) -> None:
    with rejected("invalid_response_source", f"content.interface.params.{key}"):
        validate_response_source_content(_with(LLM_SOURCE, f"interface.params.{key}", True))


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2]])
def test_llm_params_must_be_scalars(value: object) -> None:
    with rejected("invalid_response_source", "content.interface.params.stop"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.params.stop", value))


def test_llm_params_must_be_an_object() -> None:
    with rejected("invalid_response_source", "content.interface.params"):
        validate_response_source_content(_with(LLM_SOURCE, "interface.params", [1]))


# --- response_source: http_json fields -------------------------------------------------------


@pytest.mark.parametrize("key", ["method", "url_env", "timeout_ms"])
def test_http_required_fields(key: str) -> None:
    with rejected("invalid_response_source", f"content.interface.{key}"):
        validate_response_source_content(_with(HTTP_SOURCE, f"interface.{key}", _DELETE))


@pytest.mark.parametrize("method", ["GET", "post", "PUT", "DELETE", "", None])
def test_http_method_must_be_post(method: object) -> None:
    with rejected("invalid_response_source", "content.interface.method"):
        validate_response_source_content(_with(HTTP_SOURCE, "interface.method", method))


@pytest.mark.parametrize("path", ["/", "/buy_candy", "/v1/tools/buy", "/a-b_c.d"])
def test_http_valid_paths(path: str) -> None:
    changed = _with(HTTP_SOURCE, "interface.path", path)
    assert validate_response_source_content(changed) == changed


@pytest.mark.parametrize(
    "path",
    [
        "buy_candy",
        "",
        "  ",
        "//evil.example/buy",
        "/a//b",
        "https://evil.example/buy",
        "/redirect?to=http://evil.example",
        "/@evil.example",
        "@evil.example/buy",
        7,
    ],
)
def test_http_path_rules(path: object) -> None:
    with rejected("invalid_response_source", "content.interface.path"):
        validate_response_source_content(_with(HTTP_SOURCE, "interface.path", path))


# --- environments ----------------------------------------------------------------------------


def test_environment_text_is_returned_unchanged() -> None:
    text = "  A small white plate under a lamp.\n"
    assert validate_environment_content(text) == text


@pytest.mark.parametrize("text", ["", " ", "\n\t ", "\u00a0\u2003"])
def test_empty_environment(text: str) -> None:
    with rejected("empty_environment", "content"):
        validate_environment_content(text)


@pytest.mark.parametrize("content", [None, 1, ["text"], {"text": "x"}])
def test_environment_must_be_text(content: object) -> None:
    with rejected("invalid_environment", "environments.park.inline"):
        validate_environment_content(content, "environments.park.inline")


def test_environment_of_exactly_64_kib_is_allowed() -> None:
    text = "x" * ENVIRONMENT_MAX_BYTES
    assert ENVIRONMENT_MAX_BYTES == 65536
    assert validate_environment_content(text) == text


def test_environment_of_64_kib_plus_one_byte_is_too_large() -> None:
    with rejected("environment_too_large", "content"):
        validate_environment_content("x" * (ENVIRONMENT_MAX_BYTES + 1))


def test_environment_size_counts_utf8_bytes_not_characters() -> None:
    # "é" is 2 bytes: 32768 of them are exactly 65536 bytes; one more ASCII byte is too many.
    exact = "é" * (ENVIRONMENT_MAX_BYTES // 2)
    assert len(exact) == 32768
    assert validate_environment_content(exact) == exact
    with rejected("environment_too_large", "content"):
        validate_environment_content(exact + "x")
    # 🐜 is 4 bytes: 16385 of them is 65540 bytes, though only 16385 characters.
    with pytest.raises(ChukwaError) as excinfo:
        validate_environment_content("🐜" * (ENVIRONMENT_MAX_BYTES // 4 + 1))
    assert excinfo.value.code == "environment_too_large"
    assert "65540 bytes" in excinfo.value.message


def test_environment_with_a_lone_surrogate_is_a_400_not_a_crash() -> None:
    # BUG (validation.validate_environment_content): a JSON body may carry "\ud800" (Python's
    # json accepts it); ``content.encode("utf-8")`` then raises UnicodeEncodeError → 500.
    text = json.loads('"plate \\ud800"')
    try:
        validate_environment_content(text)
    except ChukwaError as exc:
        assert exc.details["field"] == "content"
    except UnicodeError as exc:
        raise AssertionError(
            f"a lone surrogate crashed validate_environment_content with {type(exc).__name__}"
        ) from exc
    else:
        raise AssertionError("environment text with a lone surrogate was accepted")


# --- entities --------------------------------------------------------------------------------


def test_valid_agent_and_prop_are_returned_in_canonical_form() -> None:
    assert normalize_entity_content(copy.deepcopy(AGENT)) == AGENT
    assert normalize_entity_content(copy.deepcopy(PROP)) == PROP


def test_entity_id_is_normalized() -> None:
    entity = normalize_entity_content(_with(AGENT, "id", "  Ant Alpha "))
    assert entity["id"] == "ant_alpha"
    assert normalize_entity_content(_with(PROP, "id", "PLATE.Crumb"))["id"] == "plate.crumb"


def test_normalized_id_gives_the_same_hash() -> None:
    a = normalize_entity_content(_with(PROP, "id", "Crumb"))
    b = normalize_entity_content(_with(PROP, "id", " CRUMB "))
    c = normalize_entity_content(PROP)
    assert hashing.entity_hash(a) == hashing.entity_hash(b) == hashing.entity_hash(c)


def test_crumb__east_is_not_collapsed() -> None:
    assert normalize_entity_content(_with(PROP, "id", "crumb__east"))["id"] == "crumb__east"


def test_entity_input_is_not_mutated() -> None:
    raw = _with(AGENT, "id", "Bob")
    before = copy.deepcopy(raw)
    normalize_entity_content(raw)
    assert raw == before


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "is empty"),
        ("ant.", "empty trailing part"),
        (".ant", "empty leading part"),
        ("ant..alpha", "empty part between dots"),
        ("first ant!", "'!'"),
        ("   ", "is empty"),
    ],
)
def test_invalid_entity_id(raw: str, fragment: str) -> None:
    with rejected("invalid_entity_id", "content.id"):
        normalize_entity_content(_with(PROP, "id", raw))
    with pytest.raises(ChukwaError) as excinfo:
        normalize_entity_content(_with(PROP, "id", raw))
    assert fragment in excinfo.value.message


@pytest.mark.parametrize("raw", [None, 1, ["ant"]])
def test_non_string_entity_id(raw: object) -> None:
    with rejected("invalid_entity_id", "entities[2].inline.id"):
        normalize_entity_content(_with(PROP, "id", raw), "entities[2].inline")


@pytest.mark.parametrize("key", ["id", "name", "state", "environment", "kind"])
def test_entity_fields_are_required(key: str) -> None:
    with rejected("invalid_entity", f"content.{key}"):
        normalize_entity_content(_with(AGENT, key, _DELETE))


@pytest.mark.parametrize("key", ["inventory", "position", "cognition_profile"])
def test_entity_unknown_fields_are_rejected(key: str) -> None:
    with rejected("invalid_entity", f"content.{key}"):
        normalize_entity_content(_with(PROP, key, "x"))


@pytest.mark.parametrize("content", [None, "bob", ["bob"]])
def test_entity_must_be_an_object(content: object) -> None:
    with rejected("invalid_entity", "content"):
        normalize_entity_content(content)


@pytest.mark.parametrize("value", ["", "  ", None, 3])
def test_entity_name_must_be_non_empty_text(value: object) -> None:
    with rejected("invalid_entity", "content.name"):
        normalize_entity_content(_with(PROP, "name", value))


def test_entity_state_may_be_empty_but_must_be_text() -> None:
    assert normalize_entity_content(_with(PROP, "state", ""))["state"] == ""
    with rejected("invalid_entity", "content.state"):
        normalize_entity_content(_with(PROP, "state", None))


@pytest.mark.parametrize("value", ["Park", "", "kitchen plate", "_park", None])
def test_entity_environment_must_be_a_label(value: object) -> None:
    with rejected("invalid_label", "content.environment"):
        normalize_entity_content(_with(PROP, "environment", value))


@pytest.mark.parametrize(
    "kind",
    [
        "agent",
        "Prop",
        "",
        None,
        ["prop"],
        {},
        {"agent": {"goal": "eat", "memory": "", "cognition_profile": "ant"}, "prop": {}},
        {"npc": {}},
        {"prop": {}},
        {"prop": None},
    ],
)
def test_entity_kind_shapes(kind: object) -> None:
    with rejected("invalid_entity", "content.kind"):
        normalize_entity_content(_with(PROP, "kind", kind))


def test_agent_kind_must_be_an_object() -> None:
    with rejected("invalid_entity", "content.kind.agent"):
        normalize_entity_content(_with(AGENT, "kind", {"agent": "walker"}))


@pytest.mark.parametrize("key", ["goal", "memory", "cognition_profile"])
def test_agent_fields_are_required(key: str) -> None:
    with rejected("invalid_entity", f"content.kind.agent.{key}"):
        normalize_entity_content(_with(AGENT, f"kind.agent.{key}", _DELETE))


def test_agent_unknown_fields_are_rejected() -> None:
    with rejected("invalid_entity", "content.kind.agent.workflow"):
        normalize_entity_content(_with(AGENT, "kind.agent.workflow", {"hash": "0" * 64}))


def test_agent_goal_must_be_non_empty_and_memory_may_be_empty() -> None:
    with rejected("invalid_entity", "content.kind.agent.goal"):
        normalize_entity_content(_with(AGENT, "kind.agent.goal", " "))
    assert normalize_entity_content(AGENT)["kind"]["agent"]["memory"] == ""
    with rejected("invalid_entity", "content.kind.agent.memory"):
        normalize_entity_content(_with(AGENT, "kind.agent.memory", None))


@pytest.mark.parametrize("value", ["Walker", "", None, "walker!"])
def test_agent_cognition_profile_must_be_a_label(value: object) -> None:
    with rejected("invalid_label", "content.kind.agent.cognition_profile"):
        normalize_entity_content(_with(AGENT, "kind.agent.cognition_profile", value))


def test_prop_has_profile() -> None:
    with rejected("prop_has_profile", "content.kind"):
        normalize_entity_content(_with(PROP, "kind", {"prop": {"cognition_profile": "walker"}}))


# --- scenario scalars ------------------------------------------------------------------------


def _scalars(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scenario_slug": "ant_on_plate",
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
    }
    base.update(overrides)
    return base


def test_valid_scalars_pass() -> None:
    validate_scenario_scalars(**_scalars())
    validate_scenario_scalars(**_scalars(chronon_seconds=1))
    validate_scenario_scalars(**_scalars(chronon_seconds=CHRONON_MAX_SECONDS))
    assert CHRONON_MAX_SECONDS == 31_536_000


@pytest.mark.parametrize("slug", ["", "Ant", "ant on plate", "_ant", "a" * 65, None, 5])
def test_invalid_slug(slug: object) -> None:
    with rejected("invalid_slug", "scenario_slug"):
        validate_scenario_scalars(**_scalars(scenario_slug=slug))


@pytest.mark.parametrize("description", ["", "   ", None, 5, ["An ant"]])
def test_invalid_description(description: object) -> None:
    with rejected("invalid_description", "description"):
        validate_scenario_scalars(**_scalars(description=description))


@pytest.mark.parametrize("chronon", [0, -60, 31_536_001, "60", True, False, 60.0, None])
def test_invalid_chronon(chronon: object) -> None:
    with rejected("invalid_chronon", "chronon_seconds"):
        validate_scenario_scalars(**_scalars(chronon_seconds=chronon))


# --- scenario bindings -----------------------------------------------------------------------

PROFILES = {"walker": "1" * 64}
ENVIRONMENTS = {"park": "2" * 64, "kitchen_plate": "3" * 64}


def _entity(
    entity_id: str, environment: str = "park", profile: str | None = None
) -> dict[str, Any]:
    kind: Any = (
        "prop"
        if profile is None
        else {"agent": {"goal": "eat", "memory": "", "cognition_profile": profile}}
    )
    return {
        "id": entity_id,
        "name": entity_id,
        "state": "",
        "environment": environment,
        "kind": kind,
    }


def _bindings(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cognition_profiles": dict(PROFILES),
        "environments": dict(ENVIRONMENTS),
        "entities": [_entity("bob", profile="walker"), _entity("crumb", "kitchen_plate")],
    }
    base.update(overrides)
    return base


def test_valid_bindings_pass() -> None:
    validate_scenario_bindings(**_bindings())


def test_unreferenced_profiles_and_environments_are_allowed() -> None:
    validate_scenario_bindings(
        **_bindings(
            cognition_profiles={**PROFILES, "staged": "4" * 64},
            environments={**ENVIRONMENTS, "attic": "5" * 64},
        )
    )


def test_no_cognition_profiles() -> None:
    with rejected("no_cognition_profiles", "cognition_profiles"):
        validate_scenario_bindings(**_bindings(cognition_profiles={}))


def test_no_environments() -> None:
    with rejected("no_environments", "environments"):
        validate_scenario_bindings(**_bindings(environments={}))


def test_no_entities() -> None:
    with rejected("no_entities", "entities"):
        validate_scenario_bindings(**_bindings(entities=[]))
    with rejected("no_entities", "changes.entities"):
        validate_scenario_bindings(**_bindings(entities=[]), entities_field="changes.entities")


def test_no_agent() -> None:
    with rejected("no_agent", "entities"):
        validate_scenario_bindings(**_bindings(entities=[_entity("crumb"), _entity("seed")]))


def test_unknown_environment_label() -> None:
    entities = [_entity("bob", profile="walker"), _entity("crumb", "kitchen")]
    with rejected("unknown_environment_label", "entities[1].environment"):
        validate_scenario_bindings(**_bindings(entities=entities))
    with pytest.raises(ChukwaError) as excinfo:
        validate_scenario_bindings(**_bindings(entities=entities))
    # No guessing: the message lists what is bound.
    assert "kitchen_plate" in excinfo.value.message
    assert "park" in excinfo.value.message


def test_unknown_cognition_profile_label() -> None:
    entities = [_entity("crumb"), _entity("bob", profile="runner")]
    with rejected("unknown_cognition_profile_label", "entities[1].kind.agent.cognition_profile"):
        validate_scenario_bindings(**_bindings(entities=entities))


def test_duplicate_entity_id() -> None:
    entities = [
        _entity("bob", profile="walker"),
        _entity("crumb"),
        _entity("crumb", "kitchen_plate"),
    ]
    with rejected("duplicate_entity_id", "entities[2].id"):
        validate_scenario_bindings(**_bindings(entities=entities))
    with pytest.raises(ChukwaError) as excinfo:
        validate_scenario_bindings(**_bindings(entities=entities))
    assert "entities[1]" in excinfo.value.message


def test_duplicates_after_normalization_are_caught() -> None:
    entities = [
        normalize_entity_content(_entity("bob", profile="walker")),
        normalize_entity_content({**_entity("x"), "id": "Ant Alpha"}),
        normalize_entity_content({**_entity("x"), "id": " ant_alpha"}),
    ]
    with rejected("duplicate_entity_id", "entities[2].id"):
        validate_scenario_bindings(**_bindings(entities=entities))


@pytest.mark.parametrize("label", ["Park", "_park", "kitchen plate"])
def test_binding_labels_must_be_labels(label: str) -> None:
    with rejected("invalid_label", f"environments.{label}"):
        validate_scenario_bindings(**_bindings(environments={**ENVIRONMENTS, label: "6" * 64}))
    with rejected("invalid_label", f"cognition_profiles.{label}"):
        validate_scenario_bindings(**_bindings(cognition_profiles={**PROFILES, label: "6" * 64}))


# --- scenario size ---------------------------------------------------------------------------


def test_scenario_size_limit() -> None:
    assert SCENARIO_MAX_BYTES == 262144
    check_scenario_size(0)
    check_scenario_size(SCENARIO_MAX_BYTES)
    with pytest.raises(ChukwaError) as excinfo:
        check_scenario_size(SCENARIO_MAX_BYTES + 1)
    error = excinfo.value
    assert error.code == "scenario_too_large"
    assert error.details == {"field": "scenario", "size": 262145, "limit": 262144}
    assert error.message.startswith("scenario: ")
    assert "262145" in error.message


def test_every_validator_error_serializes() -> None:
    checks: list[Callable[[], object]] = [
        lambda: validate_json_schema_content({"type": 12}),
        lambda: validate_environment_content(""),
        lambda: normalize_entity_content(_with(PROP, "id", "ant.")),
    ]
    for check in checks:
        with pytest.raises(ChukwaError) as excinfo:
            check()
        as_dict = excinfo.value.as_dict()
        assert set(as_dict) == {"code", "message", "details"}
        json.dumps(as_dict)
