"""References from a workflow to stored components: which key names which kind, how
a reference is checked against what the store holds, and the tool lists that carry them. Pure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from chukwa_core.component_validation import (
    check_keys,
    is_int,
    require_label,
    require_object,
    require_string,
    type_name,
)
from chukwa_core.errors import invalid
from chukwa_core.ids import is_hash
from chukwa_core.source_validation import TOOL_INTERFACES

JSON_SCHEMA = "json_schema"
RESPONSE_SOURCE = "response_source"

# Which component kind each reference key names; any other "*_ref" key is rejected.
REF_KINDS: dict[str, str] = {
    "source_ref": RESPONSE_SOURCE,
    "llm_source_ref": RESPONSE_SOURCE,
    "result_schema_ref": JSON_SCHEMA,
    "arguments_schema_ref": JSON_SCHEMA,
    "final_schema_ref": JSON_SCHEMA,
}

# Keys whose values are authored data sent elsewhere, never component references.
OPAQUE_KEYS = frozenset({"request_template"})


@dataclass(frozen=True)
class StoredRef:
    """What the store knows about a referenced hash."""

    kind: str
    interface: str | None = None


RefLookup = Mapping[str, StoredRef]


def iter_refs(value: Any, path: str = "") -> Iterator[tuple[str, str, str, Any]]:
    """Yield (path, key, expected kind, ref value) for every ``*_ref`` key in a workflow."""
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if isinstance(key, str) and key.endswith("_ref"):
                yield child, key, REF_KINDS.get(key, ""), item
            elif key not in OPAQUE_KEYS:
                yield from iter_refs(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_refs(item, f"{path}[{index}]")


def check_ref(value: Any, field: str, expected: str, lookup: RefLookup) -> StoredRef:
    if not isinstance(value, dict) or set(value) != {"hash"}:
        raise invalid(
            "invalid_reference",
            field,
            f'must be {{"hash": "<sha256>"}} once stored (or {{"inline": …}} when authoring), '
            f"got {value!r}",
        )
    ref_hash = value["hash"]
    if not is_hash(ref_hash):
        raise invalid(
            "invalid_hash", f"{field}.hash", f"{ref_hash!r} is not a lowercase sha256 hex"
        )
    stored = lookup.get(ref_hash)
    if stored is None:
        raise invalid(
            "unresolved_reference",
            field,
            f"no stored {expected} has hash {ref_hash}",
            hash=ref_hash,
            expected_kind=expected,
        )
    if stored.kind != expected:
        raise invalid(
            "wrong_component_kind",
            field,
            f"hash {ref_hash} is a stored {stored.kind}, but a {expected} is required here",
            hash=ref_hash,
            expected_kind=expected,
            actual_kind=stored.kind,
        )
    return stored


def check_interface(stored: StoredRef, field: str, expected: str | frozenset[str]) -> None:
    allowed = frozenset({expected}) if isinstance(expected, str) else expected
    if stored.interface not in allowed:
        wanted = " or ".join(repr(name) for name in sorted(allowed))
        raise invalid(
            "wrong_source_interface",
            field,
            f"the referenced source has interface {stored.interface!r}; {wanted} is required",
        )


def check_int_range(value: Any, field: str, bounds: tuple[int, int], code: str) -> None:
    low, high = bounds
    if not is_int(value) or not low <= value <= high:
        raise invalid(code, field, f"must be an integer {low}…{high}, got {value!r}")


def _validate_tool(tool: Any, field: str, lookup: RefLookup, names: set[str]) -> None:
    code = "invalid_tool"
    spec = require_object(tool, field, code)
    check_keys(
        spec,
        field,
        required=("name", "description", "source_ref", "arguments_schema_ref"),
        optional=("result_schema_ref",),
        code=code,
    )
    require_label(spec["name"], f"{field}.name", code)
    if spec["name"] in names:
        raise invalid(
            "duplicate_tool_name", f"{field}.name", f"tool name {spec['name']!r} is used twice"
        )
    names.add(spec["name"])
    require_string(spec["description"], f"{field}.description", code)
    stored = check_ref(spec["source_ref"], f"{field}.source_ref", RESPONSE_SOURCE, lookup)
    check_interface(stored, f"{field}.source_ref", TOOL_INTERFACES)
    check_ref(spec["arguments_schema_ref"], f"{field}.arguments_schema_ref", JSON_SCHEMA, lookup)
    if "result_schema_ref" in spec:
        check_ref(spec["result_schema_ref"], f"{field}.result_schema_ref", JSON_SCHEMA, lookup)


def validate_tools(tools: Any, field: str, lookup: RefLookup) -> list[str]:
    if not isinstance(tools, list):
        raise invalid("invalid_tool", field, f"must be an array, got {type_name(tools)}")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        _validate_tool(tool, f"{field}[{index}]", lookup, names)
    return sorted(names)


@dataclass(frozen=True)
class NodeCheck:
    """What validating one node may consult: stored components, the WorldPatch schema's hash,
    and the nodes before it."""

    lookup: RefLookup
    world_patch_hash: str
    earlier_text_nodes: set[str]
    all_node_ids: set[str]
