"""The MCP tools are the REST API's operations: one tool per operation of the OpenAPI
document, its input schema made of the same serializers' schemas, each with written guidance."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from scenarios_app.fixture_files import fixture_names, load_fixture
from surfaces.mcp.catalog import CatalogError, api_tools, build_tools
from surfaces.mcp.descriptions import TOOL_DESCRIPTIONS
from tests.support.mcp_steps import SPEC_TOOLS
from tests.support.schema_portability import lint, lint_tools


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def test_every_operation_is_a_tool_with_written_guidance(document: dict[str, Any]) -> None:
    operations = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    tools = api_tools()
    assert set(tools) == operations
    assert SPEC_TOOLS <= set(tools)
    missing = sorted(name for name in tools if name not in TOOL_DESCRIPTIONS)
    assert missing == [], f"write a description in surfaces/mcp/descriptions.py for {missing}"
    for tool in tools.values():
        assert tool.description == TOOL_DESCRIPTIONS[tool.name]
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        # MCP clients require an object at the root.
        assert tool.input_schema["type"] == "object"


def test_a_tool_input_is_its_parameters_and_its_body(document: dict[str, Any]) -> None:
    tools = api_tools()
    fork = tools["scenario_fork"]
    body = document["components"]["schemas"]["ScenarioForkInput"]
    assert fork.body_fields == tuple(body["properties"])
    assert fork.input_schema["required"] == body["required"]
    assert fork.input_schema["properties"]["changes"] == {"$ref": "#/$defs/ScenarioForkChanges"}
    assert "ScenarioForkChanges" in fork.input_schema["$defs"]
    enqueue = tools["turn_enqueue"]
    assert (enqueue.method, enqueue.path_params, enqueue.body_fields) == (
        "POST",
        ("slug",),
        ("count",),
    )
    diff = tools["world_diff"]
    assert diff.query_params == ("from", "to")
    assert set(diff.input_schema["required"]) == {"slug", "from", "to"}
    # A DELETE's body is described too: unsetting a name takes a compare-and-set hash.
    unset = tools["scenario_name_unset"]
    assert unset.body_fields == ("expected_current_hash", "note", "operator")
    assert unset.input_schema["properties"]["expected_current_hash"]["anyOf"][-1] == {
        "type": "null"
    }
    assert not tools["world_get"].has_body
    assert tools["world_get"].annotations["read_only_hint"] is True
    assert tools["world_delete"].annotations["destructive_hint"] is True


@pytest.mark.parametrize("name", fixture_names())
def test_the_fixture_api_bodies_satisfy_the_assemble_tool_schema(name: str) -> None:
    schema = api_tools()["scenario_assemble"].input_schema
    jsonschema.validate(load_fixture(name), schema)


def test_nullable_fields_accept_null_in_the_tool_schema() -> None:
    schema = api_tools()["scenario_name_set"].input_schema
    jsonschema.validate({"name": "ant", "hash": "a" * 64, "expected_current_hash": None}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "ant", "hash": "a" * 64, "surprise": 1}, schema)


def _document(parameters: list[dict[str, Any]], body_field: str) -> dict[str, Any]:
    return {
        "paths": {
            "/api/things/{slug}/": {
                "post": {
                    "operationId": "thing_put",
                    "parameters": parameters,
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        body_field: {"type": "string", "nullable": True}
                                    },
                                }
                            }
                        }
                    },
                }
            }
        }
    }


def test_a_body_field_named_like_a_parameter_is_refused() -> None:
    slug = {"name": "slug", "in": "path", "required": True, "schema": {"type": "string"}}
    views = {("/api/things/{slug}/", "POST"): object}
    with pytest.raises(CatalogError, match="slug"):
        build_tools(_document([slug], "slug"), views)
    tools = build_tools(_document([slug], "note"), views)
    assert tools["thing_put"].input_schema["properties"]["note"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}]
    }
    # No written guidance: the fallback says so rather than passing for a description.
    assert "No MCP description" in tools["thing_put"].description
    assert json.dumps(tools["thing_put"].input_schema)


def test_every_tool_schema_passes_the_inspector_portability_rules() -> None:
    """Zero findings of the MCP Inspector's portability check (its rules, in Python), for every
    tool: nullable fields as ``anyOf`` with a null branch, never a ``type`` list, and no schema
    that constrains nothing."""
    tools = api_tools()
    findings = lint_tools([(tool.name, tool.input_schema) for tool in tools.values()])
    assert findings == {}, {name: [str(f) for f in items] for name, items in findings.items()}
    # The rules themselves can fail: the schemas the catalog used to write are flagged.
    assert [f.rule for f in lint({"type": ["string", "null"]})] == ["type-union"]
    assert [f.rule for f in lint({"type": "object", "properties": {"x": {}}})] == ["untyped-schema"]
    assert [f.rule for f in lint({"type": "object", "properties": {"x": True}})] == [
        "boolean-schema"
    ]
    assert lint({"type": "object", "additionalProperties": True}) == []


def test_free_json_keeps_its_contract_in_a_portable_spelling() -> None:
    """What drf-spectacular writes for free JSON (``{}``, ``additionalProperties: {}``, a bare
    ``nullable``) constrains nothing; the tool schema spells it with typed branches or ``true``
    and still accepts every value the API accepts."""
    body = {
        "type": "object",
        "properties": {
            "free": {"description": "anything"},
            "maybe": {"nullable": True},
            "meta": {"type": "object", "additionalProperties": {}},
            "status": {"type": "string", "enum": ["a", "b", None], "nullable": True},
        },
    }
    document = {
        "paths": {
            "/api/things/": {
                "post": {
                    "operationId": "thing_post",
                    "requestBody": {"content": {"application/json": {"schema": body}}},
                }
            }
        }
    }
    (tool,) = build_tools(document, {("/api/things/", "POST"): object}).values()
    schema = tool.input_schema
    assert lint(schema) == []
    assert schema["properties"]["free"]["description"] == "anything"
    assert schema["properties"]["meta"]["additionalProperties"] is True
    assert schema["properties"]["status"] == {
        "anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]
    }
    for value in ({"a": [1]}, [1, "x"], "text", 1.5, True, None):
        jsonschema.validate({"free": value, "maybe": value, "meta": {"k": value}}, schema)
    jsonschema.validate({"status": None}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"status": "c"}, schema)
    # The real content fields: any keys, any values, as the API takes them.
    content = api_tools()["entities_put"].input_schema["properties"]["content"]
    assert content["additionalProperties"] is True


def test_nothing_a_client_reads_points_at_a_document_it_cannot_read() -> None:
    """Tool descriptions, input schemas (their field descriptions included) and the server's
    instructions stand alone: no references to the product specification's sections."""
    from surfaces.mcp.descriptions import INSTRUCTIONS

    for tool in api_tools().values():
        text = json.dumps({"d": tool.description, "s": tool.input_schema}, ensure_ascii=False)
        assert "SPEC" not in text and "§" not in text, tool.name
    assert "SPEC" not in INSTRUCTIONS and "§" not in INSTRUCTIONS
