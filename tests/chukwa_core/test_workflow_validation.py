"""Workflow validation with a hand-built lookup. Pure: no database, no sources."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from chukwa_core import node_types
from chukwa_core.errors import ChukwaError
from chukwa_core.hashing import json_schema_hash, response_source_hash
from chukwa_core.node_types import NodeType
from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA, world_patch_schema_hash
from chukwa_core.prompt_templates import STATIC_PLACEHOLDERS
from chukwa_core.workflow_refs import StoredRef
from chukwa_core.workflow_validation import validate_workflow

LLM_SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "chat",
    "interface": {
        "name": "llm_chat_completions",
        "model": "gpt-4o-mini",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "schema_delivery": "response_format",
        "timeout_ms": 60000,
    },
}
VENDING_SOURCE: dict[str, Any] = {
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
WEATHER_SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "toy_weather",
    "interface": {
        "name": "http_json",
        "method": "POST",
        "url_env": "CHUKWA_TOY_WEATHER_URL",
        "timeout_ms": 5000,
    },
}
ARGS_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
RESULT_SCHEMA: dict[str, Any] = {"type": "object", "required": ["status"]}
WEATHER_SCHEMA: dict[str, Any] = {"type": "object", "required": ["temperature_c"]}

LLM = response_source_hash(LLM_SOURCE)
VENDING = response_source_hash(VENDING_SOURCE)
WEATHER = response_source_hash(WEATHER_SOURCE)
ARGS = json_schema_hash(ARGS_SCHEMA)
RESULT = json_schema_hash(RESULT_SCHEMA)
WEATHER_RESULT = json_schema_hash(WEATHER_SCHEMA)
WORLD_PATCH = world_patch_schema_hash()
MISSING = "f" * 64
ENVIRONMENT_HASH = "e" * 64  # a stored component of another kind

LOOKUP: dict[str, StoredRef] = {
    LLM: StoredRef("response_source", "llm_chat_completions"),
    VENDING: StoredRef("response_source", "http_json"),
    WEATHER: StoredRef("response_source", "http_json"),
    ARGS: StoredRef("json_schema"),
    RESULT: StoredRef("json_schema"),
    WEATHER_RESULT: StoredRef("json_schema"),
    WORLD_PATCH: StoredRef("json_schema"),
    ENVIRONMENT_HASH: StoredRef("environment"),
}


def ref(value: str) -> dict[str, str]:
    return {"hash": value}


def tool(name: str = "buy_candy", **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "description": "Use only if the subject chooses to buy candy.",
        "source_ref": ref(VENDING),
        "arguments_schema_ref": ref(ARGS),
        "result_schema_ref": ref(RESULT),
    }
    spec.update(overrides)
    return spec


def tool_loop_node(
    node_id: str = "act", user: str | None = None, **overrides: Any
) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": node_id,
        "type": "llm_tool_loop",
        "llm_source_ref": ref(LLM),
        "prompt_template": {
            "messages": [
                {"role": "system", "content": "You control the acting subject."},
                {
                    "role": "user",
                    "content": user
                    or (
                        "World:\n{{world.projection}}\n\nActing subject:\n{{subject.rendered}}"
                        "\n\nAmbient context:\n{{ambient.visible}}\n\nAvailable tools:\n"
                        "{{tools.available}}"
                    ),
                },
            ]
        },
        "available_tools": [tool()],
        "max_generation_attempts": 3,
        "max_tool_calls": 3,
        "final_schema_ref": ref(WORLD_PATCH),
    }
    node.update(overrides)
    return node


def text_node(node_id: str, content: str, **overrides: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": node_id,
        "type": "llm_text",
        "llm_source_ref": ref(LLM),
        "prompt_template": {
            "messages": [
                {"role": "system", "content": "Describe briefly."},
                {"role": "user", "content": content},
            ]
        },
        "max_generation_attempts": 2,
    }
    node.update(overrides)
    return node


def tool_loop_workflow() -> dict[str, Any]:
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [tool_loop_node()],
        "apply": {"from": "act.final"},
    }


def three_node_workflow() -> dict[str, Any]:
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            text_node("perceive", "{{environment.rendered}}\n{{subject.rendered}}"),
            text_node(
                "intend", "You perceive: {{nodes.perceive.output}}\nMemory: {{subject.memory}}"
            ),
            tool_loop_node(
                "act",
                user="Perception: {{nodes.perceive.output}}\nIntent: {{nodes.intend.output}}\n"
                "{{tools.available}}",
                available_tools=[],
                max_tool_calls=0,
            ),
        ],
        "apply": {"from": "act.final"},
    }


def weather_ambient(**overrides: Any) -> dict[str, Any]:
    source: dict[str, Any] = {
        "id": "park_weather",
        "source_ref": ref(WEATHER),
        "run": "once_per_turn",
        "scope": {"environment_label": "park"},
        "visible_to": {"environment_label": "park"},
        "request_template": {
            "turn": {"$from": "/world/attempted_turn"},
            "simulation_time": {"$from": "/world/simulation_time"},
            "world": {"$from": "/world/slug"},
        },
        "result_schema_ref": ref(WEATHER_RESULT),
        "inject_as": "/ambient/environments/park/weather",
    }
    source.update(overrides)
    return source


def inbox_ambient(**overrides: Any) -> dict[str, Any]:
    source: dict[str, Any] = {
        "id": "phone_inbox",
        "source_ref": ref(VENDING),
        "run": "before_subject_workflow",
        "scope": "acting_subject",
        "visible_to": "acting_subject",
        "request_template": {
            "subject": {"$from": "/subject/id"},
            "where": {"$from": "/subject/environment"},
            "turn": {"$from": "/world/turn"},
            "weather": {"$from": "/ambient/environments/park/weather"},
            "fixed": {"folder": "inbox", "limit": 3, "tags": ["a", {"b": None}]},
        },
        "inject_as": "/ambient/subjects/inbox",
    }
    source.update(overrides)
    return source


def ambient_workflow() -> dict[str, Any]:
    workflow = tool_loop_workflow()
    workflow["ambient_sources"] = [weather_ambient(), inbox_ambient()]
    workflow["nodes"][0]["available_tools"] = [
        tool(),
        tool("use_drinking_fountain", description="Drink water.", result_schema_ref=ref(RESULT)),
        tool("send_text", description="Send a text message."),
    ]
    del workflow["nodes"][0]["available_tools"][2]["result_schema_ref"]
    return workflow


def validate(content: Any, lookup: Mapping[str, StoredRef] = LOOKUP) -> None:
    validate_workflow(content, lookup=lookup, world_patch_hash=WORLD_PATCH)


@contextmanager
def rejected(code: str, field: str) -> Iterator[pytest.ExceptionInfo[ChukwaError]]:
    with pytest.raises(ChukwaError) as excinfo:
        yield excinfo
    error = excinfo.value
    assert error.code == code, f"expected {code}, got {error.code}: {error.message}"
    assert error.details.get("field") == field, error.details
    assert error.message.startswith(f"{field}: "), error.message


def mutated(workflow: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(workflow)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()


# --- non-string values where a string enum is expected ---------------------------------------


@pytest.mark.parametrize(
    ("path", "code"),
    [
        (["execution"], "unsupported_execution"),
        (["nodes", 0, "type"], "unknown_node_type"),
        (["ambient_sources", 0, "run"], "unsupported_run_mode"),
        (["nodes", 0, "prompt_template", "messages", 0, "role"], "invalid_prompt_template"),
    ],
    ids=["execution", "node_type", "run", "role"],
)
@pytest.mark.parametrize("value", [["x"], {"x": 1}], ids=["list", "object"])
def test_unhashable_enum_values_are_400s_not_crashes(
    path: list[Any], code: str, value: Any
) -> None:
    # BUG (workflow_validation): membership tests against a frozenset/dict —
    # ``workflow["execution"] not in EXECUTIONS``, ``node_type in EXTRA_NODE_VALIDATORS``,
    # ``run not in RUN_MODES``, ``msg["role"] not in ROLES`` — raise TypeError("unhashable
    # type") for a list/object value, which the API turns into a 500 instead of a 400.
    workflow = mutated(ambient_workflow(), path, value)
    try:
        validate(workflow)
    except ChukwaError as exc:
        assert exc.code == code
    except TypeError as exc:
        raise AssertionError(
            f"{'.'.join(map(str, path))}={value!r} crashed with TypeError instead of a "
            f"ChukwaError({code!r}): {exc}"
        ) from exc
    else:
        raise AssertionError(f"{path} = {value!r} was accepted")


# --- valid workflows -------------------------------------------------------------------------


def test_valid_tool_loop_workflow() -> None:
    workflow = tool_loop_workflow()
    before = copy.deepcopy(workflow)
    assert validate(workflow) is None
    assert workflow == before  # validation does not rewrite the content


def test_valid_three_node_workflow() -> None:
    validate(three_node_workflow())


def test_valid_workflow_with_ambient_sources_and_tools() -> None:
    validate(ambient_workflow())


def test_valid_scope_and_visibility_forms() -> None:
    for scope in (
        "world",
        "all_subjects",
        {"environment_label": "park"},
        {"entity_id": "plate.crumb"},
    ):
        for visible in ("world", "all_subjects", {"entity_id": "bob"}):
            workflow = tool_loop_workflow()
            workflow["ambient_sources"] = [weather_ambient(scope=scope, visible_to=visible)]
            validate(workflow)


def test_zero_tool_calls_and_boundaries_are_valid() -> None:
    for attempts, calls in ((1, 0), (10, 16)):
        workflow = tool_loop_workflow()
        workflow["nodes"][0]["max_generation_attempts"] = attempts
        workflow["nodes"][0]["max_tool_calls"] = calls
        validate(workflow)


def test_every_static_placeholder_is_known() -> None:
    workflow = tool_loop_workflow()
    content = " ".join("{{" + p + "}}" for p in sorted(STATIC_PLACEHOLDERS))
    workflow["nodes"][0]["prompt_template"]["messages"][1]["content"] = content
    validate(workflow)
    assert {
        "world.projection",
        "environment.rendered",
        "subject.rendered",
        "subject.id",
        "subject.memory",
        "ambient.visible",
        "tools.available",
        "world.turn",
        "world.attempted_turn",
        "world.simulation_time",
    } == set(STATIC_PLACEHOLDERS)


def test_assistant_messages_and_plain_braces_are_allowed() -> None:
    workflow = tool_loop_workflow()
    workflow["nodes"][0]["prompt_template"]["messages"].append(
        {"role": "assistant", "content": 'Reply as JSON like {"kind": "final_patch"}.'}
    )
    validate(workflow)


# --- top level -------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [None, [], "workflow", 1])
def test_workflow_must_be_an_object(content: object) -> None:
    with rejected("invalid_workflow", "workflow"):
        validate(content)


@pytest.mark.parametrize("key", ["version", "execution", "ambient_sources", "nodes", "apply"])
def test_top_level_fields_are_required(key: str) -> None:
    with rejected("invalid_workflow", key):
        validate(mutated(tool_loop_workflow(), [key], _DELETE))


def test_unknown_top_level_field() -> None:
    with rejected("invalid_workflow", "cognition"):
        validate(mutated(tool_loop_workflow(), ["cognition"], {}))


@pytest.mark.parametrize("version", [2, 0, "1", 1.0, True, None])
def test_unsupported_version(version: object) -> None:
    with rejected("unsupported_version", "version"):
        validate(mutated(tool_loop_workflow(), ["version"], version))


@pytest.mark.parametrize("execution", ["parallel", "", None, "PER_SUBJECT_ORDERED", "Concurrent"])
def test_unsupported_execution(execution: object) -> None:
    with rejected("unsupported_execution", "execution") as excinfo:
        validate(mutated(tool_loop_workflow(), ["execution"], execution))
    assert "supported: concurrent, per_subject_ordered" in excinfo.value.message


@pytest.mark.parametrize("execution", ["per_subject_ordered", "concurrent"])
def test_both_execution_modes_are_accepted(execution: str) -> None:
    validate(mutated(three_node_workflow(), ["execution"], execution))


@pytest.mark.parametrize("value", [{}, "none", None])
def test_ambient_sources_must_be_an_array(value: object) -> None:
    with rejected("invalid_workflow", "ambient_sources"):
        validate(mutated(tool_loop_workflow(), ["ambient_sources"], value))


@pytest.mark.parametrize("value", [[], {}, None])
def test_nodes_must_be_a_non_empty_array(value: object) -> None:
    with rejected("invalid_workflow", "nodes"):
        validate(mutated(tool_loop_workflow(), ["nodes"], value))


# --- nodes -----------------------------------------------------------------------------------


def test_duplicate_node_id() -> None:
    workflow = three_node_workflow()
    workflow["nodes"][1]["id"] = "perceive"
    with rejected("duplicate_node_id", "nodes[1].id"):
        validate(workflow)


@pytest.mark.parametrize("node_id", ["Act", "", "_act", "a" * 65, 3])
def test_node_id_must_be_a_label(node_id: object) -> None:
    with rejected("invalid_label", "nodes[0].id"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "id"], node_id))


@pytest.mark.parametrize("key", ["id", "type"])
def test_node_id_and_type_are_required(key: str) -> None:
    with rejected("invalid_node", f"nodes[0].{key}"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, key], _DELETE))


def test_node_must_be_an_object() -> None:
    with rejected("invalid_node", "nodes[0]"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0], "act"))


@pytest.mark.parametrize("node_type", ["llm_chat", "perceive", "", None, "LLM_TEXT", "rule"])
def test_unknown_node_type(node_type: object) -> None:
    with rejected("unknown_node_type", "nodes[0].type"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "type"], node_type))


def test_registered_node_validator_is_called_and_may_produce_the_patch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, str]] = []

    def rule_policy_validator(node: Mapping[str, Any], field: str, check: Any) -> None:
        calls.append((node["id"], field))

    monkeypatch.setitem(
        node_types.NODE_TYPES,
        "rule_policy",
        NodeType(rule_policy_validator, text_output=False, produces_patch=True),
    )
    workflow = tool_loop_workflow()
    workflow["nodes"] = [{"id": "decide", "type": "rule_policy", "rules": []}]
    workflow["apply"] = {"from": "decide.final"}
    validate(workflow)
    assert calls == [("decide", "nodes[0]")]


@pytest.mark.parametrize(
    "key",
    [
        "llm_source_ref",
        "prompt_template",
        "available_tools",
        "final_schema_ref",
    ],
)
def test_tool_loop_required_fields(key: str) -> None:
    with rejected("invalid_node", f"nodes[0].{key}"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, key], _DELETE))


def test_llm_text_rejects_tool_loop_fields() -> None:
    workflow = three_node_workflow()
    workflow["nodes"][0]["available_tools"] = []
    with rejected("invalid_node", "nodes[0].available_tools"):
        validate(workflow)


# --- references ------------------------------------------------------------------------------


def test_unresolved_reference() -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "llm_source_ref"], ref(MISSING))
    with rejected("unresolved_reference", "nodes[0].llm_source_ref") as excinfo:
        validate(workflow)
    assert excinfo.value.details["hash"] == MISSING
    assert excinfo.value.details["expected_kind"] == "response_source"


def test_unresolved_tool_schema_reference() -> None:
    workflow = mutated(
        tool_loop_workflow(),
        ["nodes", 0, "available_tools", 0, "arguments_schema_ref"],
        ref(MISSING),
    )
    with rejected("unresolved_reference", "nodes[0].available_tools[0].arguments_schema_ref"):
        validate(workflow)


def test_wrong_component_kind_schema_where_source_expected() -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "llm_source_ref"], ref(ARGS))
    with rejected("wrong_component_kind", "nodes[0].llm_source_ref") as excinfo:
        validate(workflow)
    assert excinfo.value.details["actual_kind"] == "json_schema"
    assert excinfo.value.details["expected_kind"] == "response_source"


def test_wrong_component_kind_source_where_schema_expected() -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "result_schema_ref"], ref(VENDING)
    )
    with rejected("wrong_component_kind", "nodes[0].available_tools[0].result_schema_ref"):
        validate(workflow)


def test_wrong_component_kind_other_kind() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["result_schema_ref"] = ref(ENVIRONMENT_HASH)
    with rejected("wrong_component_kind", "ambient_sources[0].result_schema_ref"):
        validate(workflow)


def test_wrong_source_interface_llm_node_with_http_source() -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "llm_source_ref"], ref(VENDING))
    with rejected("wrong_source_interface", "nodes[0].llm_source_ref"):
        validate(workflow)


def test_wrong_source_interface_tool_with_llm_source() -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "source_ref"], ref(LLM)
    )
    with rejected("wrong_source_interface", "nodes[0].available_tools[0].source_ref"):
        validate(workflow)


def test_wrong_source_interface_ambient_with_llm_source() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["source_ref"] = ref(LLM)
    with rejected("wrong_source_interface", "ambient_sources[0].source_ref"):
        validate(workflow)


MCP_LAMP = "c" * 64  # a stored mcp_tool source
MCP_LOOKUP = {**LOOKUP, MCP_LAMP: StoredRef("response_source", "mcp_tool")}


def test_a_tool_may_name_an_mcp_tool_source() -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "source_ref"], ref(MCP_LAMP)
    )
    validate(workflow, MCP_LOOKUP)


def test_an_ambient_source_may_not_name_an_mcp_tool_source() -> None:
    # An mcp_tool's arguments are what the model or a rule plan gives; ambient
    # sources stay http_json.
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["source_ref"] = ref(MCP_LAMP)
    with rejected("wrong_source_interface", "ambient_sources[0].source_ref") as excinfo:
        validate(workflow, MCP_LOOKUP)
    assert "'mcp_tool'" in excinfo.value.message


def test_an_llm_node_may_not_name_an_mcp_tool_source() -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "llm_source_ref"], ref(MCP_LAMP))
    with rejected("wrong_source_interface", "nodes[0].llm_source_ref"):
        validate(workflow, MCP_LOOKUP)


def test_a_tool_naming_an_llm_source_is_told_which_interfaces_are_allowed() -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "source_ref"], ref(LLM)
    )
    with rejected("wrong_source_interface", "nodes[0].available_tools[0].source_ref") as excinfo:
        validate(workflow)
    assert "'http_json' or 'mcp_tool' is required" in excinfo.value.message


@pytest.mark.parametrize(
    "value",
    [{"inline": LLM_SOURCE}, {"hash": LLM, "inline": {}}, LLM, None, {}],
)
def test_stored_references_must_be_hash_objects(value: object) -> None:
    with rejected("invalid_reference", "nodes[0].llm_source_ref"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "llm_source_ref"], value))


@pytest.mark.parametrize("value", [LLM.upper(), LLM[:63], "x" * 64, 5])
def test_reference_hash_grammar(value: object) -> None:
    with rejected("invalid_hash", "nodes[0].llm_source_ref.hash"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "llm_source_ref"], {"hash": value}))


def test_unknown_reference_kind() -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "memory_ref"], ref(ARGS))
    with rejected("unknown_reference_kind", "nodes[0].memory_ref"):
        validate(workflow)


def test_unknown_reference_kind_deep_inside_a_tool() -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "example_ref"], ref(ARGS)
    )
    with rejected("unknown_reference_kind", "nodes[0].available_tools[0].example_ref"):
        validate(workflow)


def test_ref_named_keys_inside_a_request_template_are_data() -> None:
    # BUG (workflow_validation.iter_refs, also _store.Resolver._resolve_inline_refs and
    # put_workflow): a request_template is arbitrary JSON sent to the source, but
    # iter_refs walks into it and treats any "*_ref" key as a component reference. So a body
    # field like "order_ref" is rejected as unknown_reference_kind, and a body field named
    # "source_ref" is accepted here but then makes put_workflow build a WorkflowComponentRef
    # from value["hash"] (KeyError → 500) or store/replace an {"inline": …} body value.
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["request_template"]["order_ref"] = {"$from": "/world/slug"}
    try:
        validate(workflow)
    except ChukwaError as exc:
        raise AssertionError(
            "a request_template body field ending in _ref was treated as a component "
            f"reference: {exc.code}: {exc.message}"
        ) from exc


# --- ambient sources -------------------------------------------------------------------------


def test_duplicate_ambient_id() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][1]["id"] = "park_weather"
    with rejected("duplicate_ambient_id", "ambient_sources[1].id"):
        validate(workflow)


@pytest.mark.parametrize(
    "key", ["id", "source_ref", "run", "scope", "visible_to", "request_template", "inject_as"]
)
def test_invalid_ambient_source_missing_field(key: str) -> None:
    workflow = ambient_workflow()
    del workflow["ambient_sources"][0][key]
    with rejected("invalid_ambient_source", f"ambient_sources[0].{key}"):
        validate(workflow)


def test_ambient_result_schema_is_optional() -> None:
    workflow = ambient_workflow()
    del workflow["ambient_sources"][0]["result_schema_ref"]
    validate(workflow)


def test_invalid_ambient_source_unknown_field() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["url"] = "https://weather.example"
    with rejected("invalid_ambient_source", "ambient_sources[0].url"):
        validate(workflow)


def test_invalid_ambient_source_not_an_object() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0] = "park_weather"
    with rejected("invalid_ambient_source", "ambient_sources[0]"):
        validate(workflow)


@pytest.mark.parametrize("run", ["every_turn", "once_per_subject", "", None, "ONCE_PER_TURN"])
def test_unsupported_run_mode(run: object) -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["run"] = run
    with rejected("unsupported_run_mode", "ambient_sources[0].run"):
        validate(workflow)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("scope", "everyone", "ambient_sources[0].scope"),
        ("scope", None, "ambient_sources[0].scope"),
        ("scope", {"environment": "park"}, "ambient_sources[0].scope"),
        ("scope", {"environment_label": "park", "entity_id": "bob"}, "ambient_sources[0].scope"),
        ("scope", {"environment_label": "Park"}, "ambient_sources[0].scope.environment_label"),
        ("scope", {"environment_label": ""}, "ambient_sources[0].scope.environment_label"),
        ("scope", {"entity_id": "Bad Id"}, "ambient_sources[0].scope.entity_id"),
        ("scope", {"entity_id": "ant."}, "ambient_sources[0].scope.entity_id"),
        ("scope", ["world"], "ambient_sources[0].scope"),
        ("visible_to", "nobody", "ambient_sources[0].visible_to"),
        ("visible_to", {"entity_id": 3}, "ambient_sources[0].visible_to.entity_id"),
    ],
)
def test_invalid_scope_shape(key: str, value: object, field: str) -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0][key] = value
    with rejected("invalid_scope", field):
        validate(workflow)


@pytest.mark.parametrize("key", ["scope", "visible_to"])
def test_acting_subject_requires_before_subject_workflow(key: str) -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0][key] = "acting_subject"  # the once_per_turn weather source
    with rejected("invalid_scope", f"ambient_sources[0].{key}"):
        validate(workflow)


def test_subject_pointer_in_a_once_per_turn_source() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["request_template"]["subject"] = {"$from": "/subject/id"}
    with rejected("invalid_request_template", "ambient_sources[0].request_template.subject.$from"):
        validate(workflow)


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ({"x": {"$from": "/world/nonexistent"}}, "request_template.x.$from"),
        ({"x": {"$from": "world/slug"}}, "request_template.x.$from"),
        ({"x": {"$from": 5}}, "request_template.x.$from"),
        ({"x": {"$from": "/world/slug", "default": 1}}, "request_template.x"),
        ({"$from": "/subject/environment"}, "request_template.$from"),
        ({"x": [1, {"$from": "/secrets/key"}]}, "request_template.x[1].$from"),
    ],
)
def test_invalid_request_template(template: dict[str, Any], field: str) -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["request_template"] = template
    with rejected("invalid_request_template", f"ambient_sources[0].{field}"):
        validate(workflow)


def test_request_template_may_be_any_plain_json() -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["request_template"] = {"a": [1, 2.5, None, True, "x"]}
    validate(workflow)
    workflow["ambient_sources"][0]["request_template"] = {}
    validate(workflow)


@pytest.mark.parametrize(
    "inject_as",
    [
        "ambient/weather",
        "/ambient",
        "/ambient/",
        "/world/weather",
        "/ambient//weather",
        "",
        5,
        None,
    ],
)
def test_invalid_inject_as(inject_as: object) -> None:
    workflow = ambient_workflow()
    workflow["ambient_sources"][0]["inject_as"] = inject_as
    with rejected("invalid_inject_as", "ambient_sources[0].inject_as"):
        validate(workflow)


# --- generation and tool budgets -------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 11, -1, "3", 3.0, True, None])
def test_invalid_max_generation_attempts(value: object) -> None:
    with rejected("invalid_max_generation_attempts", "nodes[0].max_generation_attempts"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "max_generation_attempts"], value))


@pytest.mark.parametrize(
    ("workflow_factory", "index", "key", "code"),
    [
        (three_node_workflow, 1, "max_generation_attempts", "invalid_max_generation_attempts"),
        (tool_loop_workflow, 0, "max_generation_attempts", "invalid_max_generation_attempts"),
        (tool_loop_workflow, 0, "max_tool_calls", "invalid_max_tool_calls"),
    ],
    ids=["text-attempts", "tool-loop-attempts", "tool-loop-calls"],
)
def test_missing_budget_is_rejected_with_its_rule_code(
    workflow_factory: Callable[[], dict[str, Any]], index: int, key: str, code: str
) -> None:
    # DISCREPANCY (workflow_validation._validate_llm_node): the specification states one rule per budget
    # ("max_generation_attempts present and 1…10", "max_tool_calls present and 0…16"), but a
    # missing budget is caught first by check_keys and reported as "invalid_node"; only a
    # present, out-of-range value gets the budget's own code.
    workflow = workflow_factory()
    del workflow["nodes"][index][key]
    with pytest.raises(ChukwaError) as excinfo:
        validate(workflow)
    error = excinfo.value
    assert error.details.get("field") == f"nodes[{index}].{key}", error.details
    assert error.code == code, (
        f"a missing {key} is reported as {error.code!r}, not as its rule's code {code!r}"
    )


def test_invalid_max_generation_attempts_on_a_text_node() -> None:
    workflow = three_node_workflow()
    workflow["nodes"][0]["max_generation_attempts"] = 11
    with rejected("invalid_max_generation_attempts", "nodes[0].max_generation_attempts"):
        validate(workflow)


@pytest.mark.parametrize("value", [-1, 17, "3", 1.5, False, None])
def test_invalid_max_tool_calls(value: object) -> None:
    with rejected("invalid_max_tool_calls", "nodes[0].max_tool_calls"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "max_tool_calls"], value))


# --- tools -----------------------------------------------------------------------------------


def test_duplicate_tool_name() -> None:
    workflow = ambient_workflow()
    workflow["nodes"][0]["available_tools"][2]["name"] = "buy_candy"
    with rejected("duplicate_tool_name", "nodes[0].available_tools[2].name"):
        validate(workflow)


def test_same_tool_name_in_two_nodes_is_fine() -> None:
    workflow = three_node_workflow()
    workflow["nodes"].insert(2, tool_loop_node("first"))
    workflow["nodes"][3]["available_tools"] = [tool()]
    validate(workflow)


@pytest.mark.parametrize("key", ["name", "description", "source_ref", "arguments_schema_ref"])
def test_invalid_tool_missing_field(key: str) -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "available_tools", 0, key], _DELETE)
    with rejected("invalid_tool", f"nodes[0].available_tools[0].{key}"):
        validate(workflow)


@pytest.mark.parametrize("description", ["", "   ", None, 5])
def test_invalid_tool_empty_description(description: object) -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "description"], description
    )
    with rejected("invalid_tool", "nodes[0].available_tools[0].description"):
        validate(workflow)


@pytest.mark.parametrize("name", ["Buy Candy", "", "buy.candy", "_buy"])
def test_invalid_tool_name(name: str) -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "name"], name)
    with rejected("invalid_tool", "nodes[0].available_tools[0].name"):
        validate(workflow)


def test_invalid_tool_unknown_field_and_shapes() -> None:
    workflow = mutated(
        tool_loop_workflow(), ["nodes", 0, "available_tools", 0, "url"], "https://x.example"
    )
    with rejected("invalid_tool", "nodes[0].available_tools[0].url"):
        validate(workflow)
    with rejected("invalid_tool", "nodes[0].available_tools[0]"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "available_tools", 0], "buy_candy"))
    with rejected("invalid_tool", "nodes[0].available_tools"):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "available_tools"], {}))


# --- final schema ----------------------------------------------------------------------------


def test_final_schema_not_world_patch() -> None:
    workflow = mutated(tool_loop_workflow(), ["nodes", 0, "final_schema_ref"], ref(RESULT))
    with rejected("final_schema_not_world_patch", "nodes[0].final_schema_ref") as excinfo:
        validate(workflow)
    assert excinfo.value.details["expected"] == WORLD_PATCH


def test_final_schema_is_checked_against_the_given_world_patch_hash() -> None:
    # The validator compares with the hash it is given, not a module constant.
    with rejected("final_schema_not_world_patch", "nodes[0].final_schema_ref"):
        validate_workflow(tool_loop_workflow(), lookup=LOOKUP, world_patch_hash=RESULT)
    assert WORLD_PATCH == json_schema_hash(WORLD_PATCH_SCHEMA)


# --- prompts and placeholders ----------------------------------------------------------------


@pytest.mark.parametrize(
    "placeholder",
    ["{{world.weather}}", "{{ world.projection }}", "{{subject}}", "{{nodes.act}}", "{{}}"],
)
def test_unknown_placeholder(placeholder: str) -> None:
    workflow = tool_loop_workflow()
    workflow["nodes"][0]["prompt_template"]["messages"][1]["content"] = f"See {placeholder}."
    with rejected("unknown_placeholder", "nodes[0].prompt_template.messages[1].content"):
        validate(workflow)


def test_node_reference_to_a_later_node() -> None:
    workflow = three_node_workflow()
    workflow["nodes"][0]["prompt_template"]["messages"][1]["content"] = "{{nodes.intend.output}}"
    with rejected(
        "node_reference_not_earlier", "nodes[0].prompt_template.messages[1].content"
    ) as excinfo:
        validate(workflow)
    assert "later node" in excinfo.value.message


def test_node_reference_to_an_unknown_node() -> None:
    workflow = three_node_workflow()
    workflow["nodes"][1]["prompt_template"]["messages"][1]["content"] = "{{nodes.dream.output}}"
    with rejected(
        "node_reference_not_earlier", "nodes[1].prompt_template.messages[1].content"
    ) as excinfo:
        validate(workflow)
    assert "no node" in excinfo.value.message


def test_node_reference_to_itself() -> None:
    workflow = three_node_workflow()
    workflow["nodes"][1]["prompt_template"]["messages"][1]["content"] = "{{nodes.intend.output}}"
    with rejected("node_reference_not_earlier", "nodes[1].prompt_template.messages[1].content"):
        validate(workflow)


def test_node_reference_to_an_earlier_tool_loop_node() -> None:
    # Only llm_text nodes have an ``output`` placeholder.
    workflow = three_node_workflow()
    workflow["nodes"].insert(0, tool_loop_node("first", available_tools=[], max_tool_calls=0))
    workflow["nodes"][3]["prompt_template"]["messages"][1]["content"] = "{{nodes.first.output}}"
    with rejected("node_reference_not_earlier", "nodes[3].prompt_template.messages[1].content"):
        validate(workflow)


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ({}, "nodes[0].prompt_template.messages"),
        ({"messages": []}, "nodes[0].prompt_template.messages"),
        ({"messages": "hi"}, "nodes[0].prompt_template.messages"),
        ({"messages": [{"role": "user"}]}, "nodes[0].prompt_template.messages[0].content"),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "nodes[0].prompt_template.messages[0].role",
        ),
        (
            {"messages": [{"role": "user", "content": ""}]},
            "nodes[0].prompt_template.messages[0].content",
        ),
        (
            {"messages": [{"role": "user", "content": "x", "name": "n"}]},
            "nodes[0].prompt_template.messages[0].name",
        ),
        ({"messages": [], "system": "x"}, "nodes[0].prompt_template.system"),
        ("You are an ant.", "nodes[0].prompt_template"),
    ],
)
def test_invalid_prompt_template(template: object, field: str) -> None:
    with rejected("invalid_prompt_template", field):
        validate(mutated(tool_loop_workflow(), ["nodes", 0, "prompt_template"], template))


# --- apply -----------------------------------------------------------------------------------


def test_invalid_apply_names_an_llm_text_node() -> None:
    workflow = three_node_workflow()
    workflow["apply"] = {"from": "intend.final"}
    with rejected("invalid_apply", "apply.from") as excinfo:
        validate(workflow)
    assert "act.final" in excinfo.value.message  # the candidates are listed


def test_invalid_apply_names_an_unknown_node() -> None:
    workflow = tool_loop_workflow()
    workflow["apply"] = {"from": "decide.final"}
    with rejected("invalid_apply", "apply.from"):
        validate(workflow)


@pytest.mark.parametrize("value", ["act", "act.output", "act.final.final", "", None, 5])
def test_invalid_apply_shape_of_from(value: object) -> None:
    with rejected("invalid_apply", "apply.from"):
        validate(mutated(tool_loop_workflow(), ["apply", "from"], value))


def test_invalid_apply_object_shape() -> None:
    with rejected("invalid_apply", "apply"):
        validate(mutated(tool_loop_workflow(), ["apply"], "act.final"))
    with rejected("invalid_apply", "apply.from"):
        validate(mutated(tool_loop_workflow(), ["apply"], {}))
    with rejected("invalid_apply", "apply.to"):
        validate(mutated(tool_loop_workflow(), ["apply", "to"], "world"))


def test_apply_may_name_a_tool_loop_that_is_not_last() -> None:
    workflow = three_node_workflow()
    workflow["nodes"].insert(2, tool_loop_node("first", available_tools=[], max_tool_calls=0))
    workflow["apply"] = {"from": "first.final"}
    validate(workflow)
