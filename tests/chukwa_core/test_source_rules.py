"""Source security at put: variables by role and bound keys, http_json paths, mcp_tool
fields, LLM params, self-contained JSON Schemas, and validators that never retrieve anything."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from referencing.exceptions import Unresolvable

from chukwa_core.component_validation import (
    schema_validator_for,
    validate_json_schema_content,
)
from chukwa_core.errors import ChukwaError
from chukwa_core.ids import bound_key_env_name
from chukwa_core.source_validation import validate_response_source_content
from tests.chukwa_core.test_component_validation import HTTP_SOURCE, LLM_SOURCE

LLM = LLM_SOURCE
HTTP = HTTP_SOURCE


def _iface(source: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(source)
    for key, value in changes.items():
        if value is None:
            out["interface"].pop(key, None)
        else:
            out["interface"][key] = value
    return out


def _code(content: Any, validate: Any = validate_response_source_content) -> tuple[str, str]:
    with pytest.raises(ChukwaError) as excinfo:
        validate(content)
    return excinfo.value.code, excinfo.value.details.get("field", "")


# --- variables by role ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url_env", "key"),
    [
        ("CHUKWA_LLM_BASE_URL", "CHUKWA_LLM_API_KEY"),
        ("CHUKWA_OPENAI_URL", "CHUKWA_OPENAI_API_KEY"),
        ("CHUKWA_A_B_BASE_URL", "CHUKWA_A_B_API_KEY"),
    ],
)
def test_a_key_bound_to_its_url_variable_is_accepted(url_env: str, key: str) -> None:
    assert bound_key_env_name(url_env) == key
    validate_response_source_content(_iface(LLM, base_url_env=url_env, api_key_env=key))


@pytest.mark.parametrize(
    "url_env",
    ["CHUKWA_LLM_API_KEY", "CHUKWA_LLM", "CHUKWA_LLM_BASE", "CHUKWA_SECRET", "HOME_URL"],
)
def test_a_url_variable_must_be_named_like_a_url(url_env: str) -> None:
    assert _code(_iface(LLM, base_url_env=url_env)) == (
        "invalid_env_var_name",
        "content.interface.base_url_env",
    )
    assert _code(_iface(HTTP, url_env=url_env)) == (
        "invalid_env_var_name",
        "content.interface.url_env",
    )


@pytest.mark.parametrize("key", ["CHUKWA_LLM_BASE_URL", "CHUKWA_LLM_TOKEN", "CHUKWA_API_KEY"])
def test_a_key_variable_must_be_named_like_a_key(key: str) -> None:
    assert _code(_iface(LLM, api_key_env=key)) == (
        "invalid_env_var_name",
        "content.interface.api_key_env",
    )


@pytest.mark.parametrize("key", ["CHUKWA_OTHER_API_KEY", "CHUKWA_LLM_BASE_API_KEY"])
def test_a_key_of_another_host_is_refused(key: str) -> None:
    with pytest.raises(ChukwaError) as excinfo:
        validate_response_source_content(_iface(LLM, api_key_env=key))
    assert excinfo.value.code == "key_not_bound_to_url"
    assert excinfo.value.details["field"] == "content.interface.api_key_env"
    assert "CHUKWA_LLM_API_KEY" in excinfo.value.message


def test_http_json_sources_carry_no_key() -> None:
    assert _code(_iface(HTTP, api_key_env="CHUKWA_TOY_VENDING_API_KEY"))[0] == (
        "invalid_response_source"
    )


# --- http_json paths --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/buy_candy", "/v1/buy.json", "/a/b-c/~d/", "/"])
def test_plain_paths_are_accepted(path: str) -> None:
    validate_response_source_content(_iface(HTTP, path=path))


@pytest.mark.parametrize(
    "path",
    [
        "/buy\r\nX-Injected: 1",
        "/buy\n",
        "/../admin",
        "/a/../../b",
        "/a/./b",
        "/a\\b",
        "\\\\evil.example\\x",
        "/a%2e%2e/b",
        "/a?x=1",
        "/a#frag",
        "/a b",
        "//evil.example/x",
        "/a@evil.example",
        "buy",
        "/é",
        "/a\x00",
    ],
)
def test_paths_that_could_smuggle_are_refused(path: str) -> None:
    assert _code(_iface(HTTP, path=path)) == ("invalid_response_source", "content.interface.path")


# --- mcp_tool ---------------------------------------------------------------------------------

MCP: dict[str, Any] = {
    "version": 1,
    "label": "toy_mcp_lamp",
    "interface": {
        "name": "mcp_tool",
        "url_env": "CHUKWA_MCP_LAMP_URL",
        "api_key_env": "CHUKWA_MCP_LAMP_API_KEY",
        "tool": "toggle_lamp",
        "timeout_ms": 5000,
    },
}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"api_key_env": None},
        {"url_env": "CHUKWA_MCP_LAMP_BASE_URL", "api_key_env": "CHUKWA_MCP_LAMP_API_KEY"},
        {"tool": "a"},
        {"tool": "Lamp.toggle-2_b"},
        {"tool": "x" * 128},
        {"timeout_ms": 1},
        {"timeout_ms": 600_000},
    ],
)
def test_mcp_tool_sources_are_accepted(changes: dict[str, Any]) -> None:
    validate_response_source_content(_iface(MCP, **changes))


@pytest.mark.parametrize(
    ("changes", "code", "field", "message_part"),
    [
        pytest.param(
            {"url_env": "CHUKWA_MCP_LAMP"},
            "invalid_env_var_name",
            "url_env",
            "^CHUKWA_[A-Z0-9_]+_URL$",
            id="url_env_not_a_url_variable",
        ),
        pytest.param(
            {"url_env": "HOME_URL"}, "invalid_env_var_name", "url_env", "HOME_URL", id="not_chukwa"
        ),
        pytest.param(
            {"url_env": "CHUKWA_MCP_LAMP_API_KEY"},
            "invalid_env_var_name",
            "url_env",
            "URL variable",
            id="url_env_names_a_key",
        ),
        pytest.param(
            {"api_key_env": "CHUKWA_LLM_API_KEY"},
            "key_not_bound_to_url",
            "api_key_env",
            "may only name CHUKWA_MCP_LAMP_API_KEY",
            id="key_of_another_host",
        ),
        pytest.param(
            {"api_key_env": "CHUKWA_MCP_LAMP_TOKEN"},
            "invalid_env_var_name",
            "api_key_env",
            "^CHUKWA_[A-Z0-9_]+_API_KEY$",
            id="key_not_named_like_a_key",
        ),
        pytest.param(
            {"path": "/mcp"}, "invalid_response_source", "path", "unknown field", id="unknown_field"
        ),
        pytest.param(
            {"headers": {"Authorization": "Bearer x"}},
            "invalid_response_source",
            "headers",
            "allowed fields are api_key_env, name, retry, timeout_ms, tool, url_env",
            id="headers_refused",
        ),
        pytest.param(
            {"tool": None}, "invalid_response_source", "tool", "is required", id="tool_missing"
        ),
        pytest.param(
            {"tool": 5}, "invalid_response_source", "tool", "must be a string", id="tool_type"
        ),
        pytest.param(
            {"tool": ""}, "invalid_response_source", "tool", "not an MCP tool name", id="tool_empty"
        ),
        pytest.param(
            {"tool": "toggle lamp"},
            "invalid_response_source",
            "tool",
            "not an MCP tool name",
            id="tool_space",
        ),
        pytest.param(
            {"tool": "lamp/toggle"},
            "invalid_response_source",
            "tool",
            "not an MCP tool name",
            id="tool_slash",
        ),
        pytest.param(
            {"tool": "x" * 129},
            "invalid_response_source",
            "tool",
            "1…128 characters",
            id="tool_too_long",
        ),
        pytest.param(
            {"timeout_ms": 0}, "invalid_response_source", "timeout_ms", "1…600000", id="timeout_0"
        ),
        pytest.param(
            {"timeout_ms": 600_001},
            "invalid_response_source",
            "timeout_ms",
            "1…600000",
            id="timeout_too_long",
        ),
        pytest.param(
            {"timeout_ms": "5000"},
            "invalid_response_source",
            "timeout_ms",
            "integer",
            id="timeout_type",
        ),
        pytest.param(
            {"timeout_ms": None},
            "invalid_response_source",
            "timeout_ms",
            "is required",
            id="timeout_missing",
        ),
    ],
)
def test_mcp_tool_fields_are_checked_strictly(
    changes: dict[str, Any], code: str, field: str, message_part: str
) -> None:
    with pytest.raises(ChukwaError) as excinfo:
        validate_response_source_content(_iface(MCP, **changes))
    assert (excinfo.value.code, excinfo.value.details["field"]) == (
        code,
        f"content.interface.{field}",
    )
    assert message_part in excinfo.value.message
    assert excinfo.value.message.startswith(f"content.interface.{field}")


@pytest.mark.django_db
def test_an_mcp_tool_source_is_put_through_the_api_and_a_bad_one_writes_nothing(
    operator_client: Any,
) -> None:
    from scenarios_app.models import ResponseSource

    bad = _iface(MCP, api_key_env="CHUKWA_LLM_API_KEY")
    response = operator_client.post("/api/response-sources/", {"content": bad}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == (
        "key_not_bound_to_url",
        "content.interface.api_key_env",
    )
    assert not ResponseSource.objects.exists()
    response = operator_client.post("/api/response-sources/", {"content": MCP}, format="json")
    assert response.status_code == 201, response.json()
    assert ResponseSource.objects.get().content == MCP


# --- LLM params -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "base_url",
        "headers",
        "extra_headers",
        "extra_body",
        "timeout",
        "url",
        "n",
        "tools",
        "tool_choice",
        "stream",
        "stream_options",
        "messages",
        "model",
        "response_format",
        "logit_bias",
        "Authorization",
    ],
)
def test_params_that_are_not_sampling_parameters_are_refused(key: str) -> None:
    assert _code(_iface(LLM, params={key: "x"})) == (
        "invalid_response_source",
        f"content.interface.params.{key}",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("temperature", "hot"),
        ("temperature", True),
        ("max_tokens", 1.5),
        ("max_tokens", "100"),
        ("seed", None),
        ("stop", ["a"]),
    ],
)
def test_param_values_have_their_type(key: str, value: Any) -> None:
    assert _code(_iface(LLM, params={key: value})) == (
        "invalid_response_source",
        f"content.interface.params.{key}",
    )


def test_sampling_params_are_accepted() -> None:
    validate_response_source_content(
        _iface(
            LLM,
            params={"temperature": 0, "top_p": 0.9, "seed": 7, "stop": "END", "max_tokens": 5},
        )
    )


# --- concurrency: one setting, limits.concurrency -------------------------------------------


@pytest.mark.parametrize("limit", [1, 4, 256])
def test_an_llm_source_may_bound_its_concurrency(limit: int) -> None:
    validate_response_source_content(_iface(LLM, limits={"concurrency": limit}))


@pytest.mark.parametrize("limit", [0, -1, 257, 2.0, "4", True])
def test_limits_concurrency_is_an_integer_1_to_256(limit: Any) -> None:
    assert _code(_iface(LLM, limits={"concurrency": limit})) == (
        "invalid_response_source",
        "content.interface.limits.concurrency",
    )


@pytest.mark.parametrize("limit", [1, 4])
def test_the_old_max_concurrency_is_refused_naming_limits_concurrency(limit: int) -> None:
    with pytest.raises(ChukwaError) as caught:
        validate_response_source_content(_iface(LLM, max_concurrency=limit))
    assert caught.value.details["field"] == "content.interface.max_concurrency"
    assert "content.interface.limits.concurrency" in caught.value.message


def test_http_json_sources_have_no_concurrency_setting() -> None:
    assert _code(_iface(HTTP, max_concurrency=2))[0] == "invalid_response_source"
    assert _code(_iface(HTTP, limits={"concurrency": 2}))[0] == "invalid_response_source"


# --- batch: the provider's Batch API for calls nobody waits for ----------------------------


def test_an_llm_source_may_declare_a_batch_api() -> None:
    validate_response_source_content(
        _iface(LLM, batch={"api": "openai", "completion_window": "24h"})
    )


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ("openai", "content.interface.batch"),
        ({"api": "openai"}, "content.interface.batch.completion_window"),
        ({"completion_window": "24h"}, "content.interface.batch.api"),
        ({"api": "openai", "completion_window": "24h", "x": 1}, "content.interface.batch.x"),
        ({"api": "anthropic", "completion_window": "24h"}, "content.interface.batch.api"),
        ({"api": ["openai"], "completion_window": "24h"}, "content.interface.batch.api"),
        ({"api": "openai", "completion_window": "1h"}, "content.interface.batch.completion_window"),
        ({"api": "openai", "completion_window": 24}, "content.interface.batch.completion_window"),
    ],
)
def test_a_bad_batch_is_refused_naming_the_field(batch: Any, field: str) -> None:
    assert _code(_iface(LLM, batch=batch)) == ("invalid_response_source", field)


def test_http_json_sources_have_no_batch() -> None:
    assert _code(_iface(HTTP, batch={"api": "openai", "completion_window": "24h"})) == (
        "invalid_response_source",
        "content.interface.batch",
    )


@pytest.mark.django_db
def test_a_batch_source_is_put_through_the_api_and_a_bad_one_writes_nothing(
    operator_client: Any,
) -> None:
    from scenarios_app.models import ResponseSource

    bad = _iface(LLM, batch={"api": "openai", "completion_window": "7d"})
    response = operator_client.post("/api/response-sources/", {"content": bad}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == (
        "invalid_response_source",
        "content.interface.batch.completion_window",
    )
    assert not ResponseSource.objects.exists()
    good = _iface(LLM, batch={"api": "openai", "completion_window": "24h"})
    response = operator_client.post("/api/response-sources/", {"content": good}, format="json")
    assert response.status_code == 201, response.json()
    assert ResponseSource.objects.get().content == good


# --- JSON Schemas are self-contained ---------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "code", "field"),
    [
        ({"$ref": "https://evil.example/s.json"}, "schema_reference_not_local", "content/$ref"),
        ({"$ref": "other.json#/a"}, "schema_reference_not_local", "content/$ref"),
        (
            {"properties": {"a": {"$ref": "file:///etc/passwd"}}},
            "schema_reference_not_local",
            "content/properties/a/$ref",
        ),
        (
            {"$dynamicRef": "http://127.0.0.1:1/x#meta"},
            "schema_reference_not_local",
            "content/$dynamicRef",
        ),
        ({"$ref": 5}, "schema_reference_not_local", "content/$ref"),
        ({"$id": "https://evil.example/root"}, "schema_id_not_allowed", "content/$id"),
        (
            {"$defs": {"a": {"$id": "urn:x", "type": "string"}}},
            "schema_id_not_allowed",
            "content/$defs/a/$id",
        ),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#"},
            "unsupported_meta_schema",
            "content/$schema",
        ),
        (
            {"$schema": "https://evil.example/meta"},
            "unsupported_meta_schema",
            "content/$schema",
        ),
        (
            {"items": {"$schema": "https://json-schema.org/draft/2020-12/schema"}},
            "unsupported_meta_schema",
            "content/items/$schema",
        ),
    ],
)
def test_schemas_with_outside_references_are_refused(
    schema: dict[str, Any], code: str, field: str
) -> None:
    assert _code(schema, validate_json_schema_content) == (code, field)


def test_local_references_are_accepted() -> None:
    validate_json_schema_content(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$defs": {"item": {"type": "string"}},
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/item"}},
        }
    )


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_validation_never_retrieves_a_reference(counting_server: tuple[str, list[str]]) -> None:
    """Even a schema that bypassed the put rules (a row written by hand) retrieves nothing."""
    base, hits = counting_server
    validator = schema_validator_for({"properties": {"a": {"$ref": f"{base}/s.json"}}})
    with pytest.raises(Unresolvable):
        list(validator.iter_errors({"a": 1}))
    validator = schema_validator_for({"$schema": f"{base}/meta", "type": "object"})
    assert list(validator.iter_errors({})) == []
    assert hits == []
