"""The MCP tools, one per REST operation, read from the API's OpenAPI document.

The document is generated from the serializers that validate the API's requests
(``surfaces/api``), so a tool's input schema is the operation's path and query parameters plus
its request body's fields, flattened into one object: the one source of truth the REST API, its
OpenAPI document and the MCP server share. A tool is called by dispatching the operation's view
(``surfaces/mcp/calls.py``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, cast

from drf_spectacular.generators import SchemaGenerator
from rest_framework.permissions import SAFE_METHODS

from surfaces.mcp.descriptions import TOOL_DESCRIPTIONS

_COMPONENT_REF = re.compile(r"^#/components/schemas/(?P<name>[^/]+)$")


class CatalogError(RuntimeError):
    """The API's document cannot be turned into tools (a programming error, caught by tests)."""


@dataclass(frozen=True)
class Tool:
    """One REST operation as an MCP tool."""

    name: str
    method: str
    path: str  # the OpenAPI path template, e.g. /api/worlds/{slug}/turns/
    view_class: type
    path_params: tuple[str, ...]
    query_params: tuple[str, ...]
    body_fields: tuple[str, ...]
    has_body: bool
    input_schema: dict[str, Any]
    description: str
    annotations: dict[str, Any] = field(default_factory=dict)

    @property
    def reads_only(self) -> bool:
        return self.method in SAFE_METHODS


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's ``nullable: true`` as JSON Schema (MCP input schemas are JSON Schema)."""
    schema = dict(schema)
    if not schema.pop("nullable", False):
        return schema
    if "type" in schema:
        kind = schema["type"]
        schema["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
        if "enum" in schema and None not in schema["enum"]:
            schema["enum"] = [*schema["enum"], None]
        return schema
    keep: dict[str, Any] = {
        k: schema.pop(k) for k in ("description", "title", "default") if k in schema
    }
    return {"anyOf": [schema, {"type": "null"}], **keep}


def _json_schema(node: Any, refs: set[str]) -> Any:
    """An OpenAPI 3.0 schema as a JSON Schema: refs point into ``$defs`` (collected in
    ``refs``), ``nullable`` becomes a null alternative."""
    if isinstance(node, list):
        return [_json_schema(item, refs) for item in node]
    if not isinstance(node, dict):
        return node
    converted: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            match = _COMPONENT_REF.match(value)
            if match is None:
                raise CatalogError(f"unexpected $ref {value!r}")
            refs.add(match["name"])
            converted[key] = f"#/$defs/{match['name']}"
        elif key in ("properties", "$defs"):
            converted[key] = {name: _json_schema(sub, refs) for name, sub in value.items()}
        else:
            converted[key] = _json_schema(value, refs)
    return _nullable(converted)


def _defs(names: set[str], components: dict[str, Any]) -> dict[str, Any]:
    """The components ``names`` refer to, and those they refer to, as ``$defs``."""
    defs: dict[str, Any] = {}
    pending = sorted(names)
    while pending:
        name = pending.pop()
        if name in defs:
            continue
        found: set[str] = set()
        defs[name] = _json_schema(components[name], found)
        pending.extend(sorted(found - set(defs)))
    return dict(sorted(defs.items()))


def _body_schema(operation: dict[str, Any], components: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("requestBody", {}).get("content", {})
    if not content:
        return None
    schema = content["application/json"]["schema"]
    match = _COMPONENT_REF.match(schema.get("$ref", ""))
    resolved = components[match["name"]] if match else schema
    if resolved.get("type") != "object" or "properties" not in resolved:
        raise CatalogError(f"{operation['operationId']}: the request body is not an object")
    return dict(resolved)


def _input_schema(
    name: str, operation: dict[str, Any], components: dict[str, Any]
) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...], tuple[str, ...], bool]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    refs: set[str] = set()
    path_params: list[str] = []
    query_params: list[str] = []
    for parameter in operation.get("parameters", []):
        where = parameter["in"]
        if where not in ("path", "query"):
            raise CatalogError(f"{name}: unsupported {where} parameter {parameter['name']!r}")
        schema = _json_schema(parameter.get("schema", {}), refs)
        if parameter.get("description"):
            schema = {**schema, "description": parameter["description"]}
        properties[parameter["name"]] = schema
        if where == "path":
            path_params.append(parameter["name"])
            required.append(parameter["name"])
        else:
            query_params.append(parameter["name"])
            if parameter.get("required"):
                required.append(parameter["name"])
    body = _body_schema(operation, components)
    body_fields: list[str] = []
    if body is not None:
        for field_name, schema in body["properties"].items():
            if field_name in properties:
                raise CatalogError(f"{name}: body field {field_name!r} has the name of a parameter")
            properties[field_name] = _json_schema(schema, refs)
            body_fields.append(field_name)
        required.extend(body.get("required", []))
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        input_schema["required"] = required
    if refs:
        input_schema["$defs"] = _defs(refs, components)
    return (
        input_schema,
        tuple(path_params),
        tuple(query_params),
        tuple(body_fields),
        body is not None,
    )


def _annotations(method: str) -> dict[str, Any]:
    """MCP's tool hints: reads are read-only; PUT and DELETE are idempotent."""
    if method in SAFE_METHODS:
        return {"read_only_hint": True, "open_world_hint": False}
    return {
        "read_only_hint": False,
        "destructive_hint": method == "DELETE",
        "idempotent_hint": method in ("PUT", "DELETE"),
        "open_world_hint": False,
    }


def build_tools(document: dict[str, Any], views: dict[tuple[str, str], type]) -> dict[str, Tool]:
    """One tool per operation of ``document``; ``views`` maps (path, method) to the view."""
    components = document.get("components", {}).get("schemas", {})
    tools: dict[str, Tool] = {}
    for path, operations in document["paths"].items():
        for method_lower, operation in operations.items():
            method = method_lower.upper()
            name = operation["operationId"]
            if name in tools:
                raise CatalogError(f"two operations are named {name!r}")
            description = TOOL_DESCRIPTIONS.get(name)
            if description is None:
                # Every operation gets written guidance; a new endpoint without it is a bug.
                description = (
                    f"{method} {path}. {operation.get('description') or ''}".strip()
                    + " (No MCP description was written for this operation.)"
                )
            schema, path_params, query_params, body_fields, has_body = _input_schema(
                name, operation, components
            )
            tools[name] = Tool(
                name=name,
                method=method,
                path=path,
                view_class=views[(path, method)],
                path_params=path_params,
                query_params=query_params,
                body_fields=body_fields,
                has_body=has_body,
                input_schema=schema,
                description=description,
                annotations=_annotations(method),
            )
    return dict(sorted(tools.items()))


@functools.cache
def api_tools() -> dict[str, Tool]:
    """The tools of the API this process serves (built once: the URLconf does not change)."""
    generator = SchemaGenerator()
    document = generator.get_schema(request=None, public=True)
    # The document's paths are the endpoints' paths (no prefix is trimmed or inserted).
    # drf-spectacular's endpoints are (path, path regex, method, view callback).
    endpoints = cast(list[tuple[str, str, str, Any]], generator.endpoints)
    views = {(path, method): callback.cls for path, _, method, callback in endpoints}
    return build_tools(document, views)
