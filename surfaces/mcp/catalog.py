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


# Keywords that describe a value rather than constrain it: on a nullable field they stay on the
# outer schema, beside the ``anyOf``, where clients look for a field's description.
_ANNOTATIONS = ("description", "title", "default", "readOnly", "writeOnly", "examples")

# JSON Schema's "any JSON value", spelled so that one-type-per-field clients can read it: the
# serializers' free JSON fields (drf-spectacular writes them as ``{}``, which the MCP Inspector's
# portability check flags and which such clients cannot map). The same values are accepted.
ANY_JSON_VALUE: tuple[dict[str, Any], ...] = (
    {"type": "object", "additionalProperties": True},
    {"type": "array"},
    {"type": "string"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
)


def _constrains(schema: dict[str, Any]) -> bool:
    """Whether a schema has any keyword that restricts its value (not only annotations)."""
    return any(key not in _ANNOTATIONS and not key.startswith("x-") for key in schema)


def _portable(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's schema idioms as portable JSON Schema: ``nullable: true`` becomes an
    ``anyOf`` with a ``{"type": "null"}`` branch (never a ``type`` list, which one-type clients
    reject), ``minimum: 0, exclusiveMinimum: true`` becomes ``exclusiveMinimum: 0``, and a
    schema that constrains nothing becomes :data:`ANY_JSON_VALUE`."""
    schema = dict(schema)
    nullable = bool(schema.pop("nullable", False))
    # OpenAPI 3.0's boolean exclusive bounds are JSON Schema's numeric ones
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(exclusive), bool):
            if schema.pop(exclusive) and bound in schema:
                schema[exclusive] = schema.pop(bound)
    keep = {k: schema.pop(k) for k in _ANNOTATIONS if k in schema}
    if not _constrains(schema):
        return {"anyOf": [dict(branch) for branch in ANY_JSON_VALUE], **keep}
    if not nullable:
        return {**schema, **keep}
    if "enum" in schema:
        schema["enum"] = [value for value in schema["enum"] if value is not None]
    if set(schema) == {"anyOf"}:
        branches = [b for b in schema["anyOf"] if b != {"type": "null"}]
        return {"anyOf": [*branches, {"type": "null"}], **keep}
    return {"anyOf": [schema, {"type": "null"}], **keep}


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames")


def _json_schema(node: Any, refs: set[str]) -> Any:
    """An OpenAPI 3.0 schema as a JSON Schema: refs point into ``$defs`` (collected in
    ``refs``), each schema made portable (:func:`_portable`). Only schema positions are
    converted; values (``default``, ``enum``, ``example``) are kept as they are."""
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
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            converted[key] = {name: _json_schema(sub, refs) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            converted[key] = [_json_schema(sub, refs) for sub in value]
        elif key == "additionalProperties" and value == {}:
            converted[key] = True  # "any value" in the spelling made for this keyword
        elif key in _SCHEMA_ONE:
            converted[key] = _json_schema(value, refs)
        else:
            converted[key] = value
    return _portable(converted)


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
