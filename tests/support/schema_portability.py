"""The tool-schema portability rules of the official MCP Inspector CLI (2.x, ``--strict``),
written again in Python so that every run of the suite checks them, with or without Node.

A schema is portable when a client that maps tool schemas onto a one-type-per-field dialect
(the OpenAPI subset of Gemini's function declarations, for one) reads it as written:

- ``type-union`` (warning): ``type`` is a list, e.g. ``["string", "null"]``; write
  ``anyOf`` branches of one type each instead.
- ``untyped-schema`` (warning): a schema with no validation keyword at all (``{}``, or only a
  description) accepts any value.
- ``boolean-schema`` (error): a bare ``true``/``false`` where a schema object is expected
  (allowed only as the value of ``additionalProperties`` and its kin).
- ``remote-ref`` (warning): a ``$ref`` outside the document.

``tests/surfaces/mcp/test_mcp_inspector.py`` runs the Inspector itself on the same tools when
it can, so a divergence between these rules and the Inspector's shows up there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_BOOLEAN_VALUED = {
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
}
_SUBSCHEMA = (
    "items",
    "contains",
    "not",
    "propertyNames",
    "if",
    "then",
    "else",
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
    "contentSchema",
)
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = (
    "properties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "$defs",
    "definitions",
)
_CONSTRAINING = {
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "items",
    "prefixItems",
    "contains",
    "additionalItems",
    "unevaluatedItems",
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "dependentSchemas",
    "dependencies",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
}
_JSON_TYPES = {"null", "boolean", "object", "array", "number", "string", "integer"}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # "error" | "warning"
    path: str

    def __str__(self) -> str:
        return f"{self.severity} {self.rule} at {self.path or '(root)'}"


def _children(node: dict[str, Any], path: str) -> Iterator[tuple[Any, str, str]]:
    for key in _SUBSCHEMA_MAPS:
        mapping = node.get(key)
        if isinstance(mapping, dict):
            for name, sub in mapping.items():
                yield sub, f"{path}.{key}.{name}", key
    for key in _SUBSCHEMA_LISTS:
        items = node.get(key)
        if isinstance(items, list):
            for i, sub in enumerate(items):
                yield sub, f"{path}.{key}[{i}]", key
    for key in _SUBSCHEMA:
        if key not in node:
            continue
        value = node[key]
        if key == "items" and isinstance(value, list):
            for i, sub in enumerate(value):
                yield sub, f"{path}.{key}[{i}]", key
        else:
            yield value, f"{path}.{key}", key


def _portable_union(kind: list[Any]) -> bool:
    names = [k for k in kind if isinstance(k, str) and k in _JSON_TYPES]
    return bool(kind) and len(names) == len(kind) == len(set(names))


def lint(schema: Any) -> list[Finding]:
    """The findings for one tool input schema (empty: portable)."""
    findings: list[Finding] = []

    def walk(node: Any, path: str, keyword: str | None, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(node, bool):
            if keyword is None or keyword not in _BOOLEAN_VALUED:
                findings.append(Finding("boolean-schema", "error", path))
            return
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if isinstance(kind, list) and _portable_union(kind):
            findings.append(Finding("type-union", "warning", path))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref and not ref.startswith("#"):
            findings.append(Finding("remote-ref", "warning", path))
        constrains = any(key in _CONSTRAINING for key in node) or (
            "if" in node and ("then" in node or "else" in node)
        )
        if not constrains and keyword != "not":
            findings.append(Finding("untyped-schema", "warning", path))
        for child, child_path, child_keyword in _children(node, path):
            walk(child, child_path, child_keyword, depth + 1)

    walk(schema, "", None, 0)
    return findings


def lint_tools(tools: list[tuple[str, Any]]) -> dict[str, list[Finding]]:
    """Findings per tool name, for ``(name, input schema)`` pairs; tools without any are left out."""
    found = {name: lint(schema) for name, schema in tools}
    return {name: items for name, items in found.items() if items}
