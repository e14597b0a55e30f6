"""Cognition workflow validation (SPEC §4). Pure: no Django; never calls a source or an LLM.

The store resolves inline references first, then calls :func:`validate_workflow` with the
kind (and, for response sources, the interface) of every referenced hash it found stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from chukwa_core.component_validation import (
    HTTP_JSON_INTERFACE,
    LLM_INTERFACE,
    check_keys,
    is_int,
    require_label,
    require_object,
    require_string,
    type_name,
)
from chukwa_core.errors import invalid
from chukwa_core.ids import is_entity_id, is_hash

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

EXECUTIONS = frozenset({"per_subject_ordered"})
RUN_MODES = frozenset({"once_per_turn", "before_subject_workflow"})
NODE_TYPES = ("llm_text", "llm_tool_loop", "rule_policy")
PATCH_NODE_TYPES = frozenset({"llm_tool_loop", "rule_policy"})
ROLES = frozenset({"system", "user", "assistant"})
MAX_GENERATION_ATTEMPTS = (1, 10)
MAX_TOOL_CALLS = (0, 16)

STATIC_PLACEHOLDERS = frozenset(
    {
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
    }
)
_PLACEHOLDER_RE = re.compile(r"\{\{(.*?)\}\}")
_NODE_OUTPUT_RE = re.compile(r"^nodes\.([^.]+)\.output$")

WORLD_POINTERS = ("/world/slug", "/world/turn", "/world/attempted_turn", "/world/simulation_time")
SUBJECT_POINTERS = ("/subject/id", "/subject/environment")


@dataclass(frozen=True)
class StoredRef:
    """What the store knows about a referenced hash."""

    kind: str
    interface: str | None = None


RefLookup = Mapping[str, StoredRef]

# Node-type validators beyond the built-in LLM nodes register here (the rule policy does).
NodeValidator = Callable[[Mapping[str, Any], str, RefLookup], None]
EXTRA_NODE_VALIDATORS: dict[str, NodeValidator] = {}


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


def _check_ref(value: Any, field: str, expected: str, lookup: RefLookup) -> StoredRef:
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


def _check_interface(stored: StoredRef, field: str, expected: str) -> None:
    if stored.interface != expected:
        raise invalid(
            "wrong_source_interface",
            field,
            f"the referenced source has interface {stored.interface!r}; {expected!r} is required",
        )


def _check_scope(value: Any, field: str, run: str) -> None:
    if value in ("world", "all_subjects"):
        return
    if value == "acting_subject":
        if run != "before_subject_workflow":
            raise invalid(
                "invalid_scope",
                field,
                '"acting_subject" is only valid with run "before_subject_workflow"',
            )
        return
    if isinstance(value, dict) and set(value) == {"environment_label"}:
        require_label(value["environment_label"], f"{field}.environment_label", "invalid_scope")
        return
    if isinstance(value, dict) and set(value) == {"entity_id"}:
        if not is_entity_id(value["entity_id"]):
            raise invalid(
                "invalid_scope",
                f"{field}.entity_id",
                f"{value['entity_id']!r} is not a valid entity id",
            )
        return
    raise invalid(
        "invalid_scope",
        field,
        'must be "world", "all_subjects", "acting_subject", {"environment_label": L} or '
        f'{{"entity_id": E}}, got {value!r}',
    )


def _check_request_template(value: Any, field: str, run: str, ambient_ids: set[str]) -> None:
    if isinstance(value, dict):
        if "$from" in value:
            if set(value) != {"$from"}:
                raise invalid(
                    "invalid_request_template", field, '{"$from": …} must have no other keys'
                )
            pointer = value["$from"]
            if not isinstance(pointer, str) or not pointer.startswith("/"):
                raise invalid(
                    "invalid_request_template",
                    f"{field}.$from",
                    f"{pointer!r} is not a JSON pointer",
                )
            allowed = list(WORLD_POINTERS)
            if run == "before_subject_workflow":
                allowed += SUBJECT_POINTERS
            if pointer in allowed:
                return
            if pointer.startswith("/ambient/"):
                return
            raise invalid(
                "invalid_request_template",
                f"{field}.$from",
                f"{pointer!r} is not available to a {run} source; available: "
                f"{', '.join(allowed)}, /ambient/…",
            )
        for key, item in value.items():
            _check_request_template(item, f"{field}.{key}", run, ambient_ids)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_request_template(item, f"{field}[{index}]", run, ambient_ids)


def _validate_ambient(source: Any, field: str, lookup: RefLookup, ambient_ids: set[str]) -> None:
    code = "invalid_ambient_source"
    amb = require_object(source, field, code)
    check_keys(
        amb,
        field,
        required=(
            "id",
            "source_ref",
            "run",
            "scope",
            "visible_to",
            "request_template",
            "inject_as",
        ),
        optional=("result_schema_ref",),
        code=code,
    )
    require_label(amb["id"], f"{field}.id")
    if amb["id"] in ambient_ids:
        raise invalid(
            "duplicate_ambient_id", f"{field}.id", f"ambient id {amb['id']!r} is used twice"
        )
    ambient_ids.add(amb["id"])
    stored = _check_ref(amb["source_ref"], f"{field}.source_ref", RESPONSE_SOURCE, lookup)
    _check_interface(stored, f"{field}.source_ref", HTTP_JSON_INTERFACE)
    if "result_schema_ref" in amb:
        _check_ref(amb["result_schema_ref"], f"{field}.result_schema_ref", JSON_SCHEMA, lookup)
    run = amb["run"]
    if not isinstance(run, str) or run not in RUN_MODES:
        raise invalid(
            "unsupported_run_mode",
            f"{field}.run",
            f"{run!r} is not a run mode; supported: {', '.join(sorted(RUN_MODES))}",
        )
    _check_scope(amb["scope"], f"{field}.scope", run)
    _check_scope(amb["visible_to"], f"{field}.visible_to", run)
    _check_request_template(amb["request_template"], f"{field}.request_template", run, ambient_ids)
    inject_as = amb["inject_as"]
    if (
        not isinstance(inject_as, str)
        or not inject_as.startswith("/ambient/")
        or inject_as.rstrip("/") == "/ambient"
        or "//" in inject_as
    ):
        raise invalid(
            "invalid_inject_as",
            f"{field}.inject_as",
            f"must be a JSON pointer under /ambient/ (e.g. /ambient/environments/park/weather), "
            f"got {inject_as!r}",
        )


def _check_int_range(value: Any, field: str, bounds: tuple[int, int], code: str) -> None:
    low, high = bounds
    if not is_int(value) or not low <= value <= high:
        raise invalid(code, field, f"must be an integer {low}…{high}, got {value!r}")


def _check_placeholders(
    text: str, field: str, earlier_text_nodes: set[str], all_node_ids: set[str]
) -> None:
    for match in _PLACEHOLDER_RE.finditer(text):
        name = match.group(1)
        if name in STATIC_PLACEHOLDERS:
            continue
        node_match = _NODE_OUTPUT_RE.fullmatch(name)
        if node_match:
            ref = node_match.group(1)
            if ref in earlier_text_nodes:
                continue
            where = "a later node" if ref in all_node_ids else "no node"
            raise invalid(
                "node_reference_not_earlier",
                field,
                f"placeholder {{{{{name}}}}} refers to {where}; nodes.<id>.output must name an "
                f"earlier llm_text node ({', '.join(sorted(earlier_text_nodes)) or 'none here'})",
            )
        raise invalid(
            "unknown_placeholder",
            field,
            f"unknown placeholder {{{{{name}}}}}; known: "
            f"{', '.join('{{' + p + '}}' for p in sorted(STATIC_PLACEHOLDERS))}, "
            "{{nodes.<id>.output}}",
        )


def _validate_prompt(
    template: Any, field: str, earlier_text_nodes: set[str], all_node_ids: set[str]
) -> None:
    code = "invalid_prompt_template"
    prompt = require_object(template, field, code)
    check_keys(prompt, field, required=("messages",), code=code)
    messages = prompt["messages"]
    if not isinstance(messages, list) or not messages:
        raise invalid(code, f"{field}.messages", "must be a non-empty array of messages")
    for index, message in enumerate(messages):
        mfield = f"{field}.messages[{index}]"
        msg = require_object(message, mfield, code)
        check_keys(msg, mfield, required=("role", "content"), code=code)
        if not isinstance(msg["role"], str) or msg["role"] not in ROLES:
            raise invalid(
                code,
                f"{mfield}.role",
                f"must be one of {', '.join(sorted(ROLES))}, got {msg['role']!r}",
            )
        content = require_string(msg["content"], f"{mfield}.content", code)
        _check_placeholders(content, f"{mfield}.content", earlier_text_nodes, all_node_ids)


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
    stored = _check_ref(spec["source_ref"], f"{field}.source_ref", RESPONSE_SOURCE, lookup)
    _check_interface(stored, f"{field}.source_ref", HTTP_JSON_INTERFACE)
    _check_ref(spec["arguments_schema_ref"], f"{field}.arguments_schema_ref", JSON_SCHEMA, lookup)
    if "result_schema_ref" in spec:
        _check_ref(spec["result_schema_ref"], f"{field}.result_schema_ref", JSON_SCHEMA, lookup)


def validate_tools(tools: Any, field: str, lookup: RefLookup) -> list[str]:
    if not isinstance(tools, list):
        raise invalid("invalid_tool", field, f"must be an array, got {type_name(tools)}")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        _validate_tool(tool, f"{field}[{index}]", lookup, names)
    return sorted(names)


def _validate_llm_node(
    node: Mapping[str, Any],
    field: str,
    lookup: RefLookup,
    world_patch_hash: str,
    earlier_text_nodes: set[str],
    all_node_ids: set[str],
) -> None:
    code = "invalid_node"
    if "max_generation_attempts" not in node:
        raise invalid(
            "invalid_max_generation_attempts",
            f"{field}.max_generation_attempts",
            "is required (an integer 1…10)",
        )
    if node["type"] == "llm_tool_loop" and "max_tool_calls" not in node:
        raise invalid(
            "invalid_max_tool_calls", f"{field}.max_tool_calls", "is required (an integer 0…16)"
        )
    if node["type"] == "llm_text":
        check_keys(
            node,
            field,
            required=("id", "type", "llm_source_ref", "prompt_template", "max_generation_attempts"),
            code=code,
        )
    else:
        check_keys(
            node,
            field,
            required=(
                "id",
                "type",
                "llm_source_ref",
                "prompt_template",
                "available_tools",
                "max_generation_attempts",
                "max_tool_calls",
                "final_schema_ref",
            ),
            code=code,
        )
    stored = _check_ref(node["llm_source_ref"], f"{field}.llm_source_ref", RESPONSE_SOURCE, lookup)
    _check_interface(stored, f"{field}.llm_source_ref", LLM_INTERFACE)
    _validate_prompt(
        node["prompt_template"], f"{field}.prompt_template", earlier_text_nodes, all_node_ids
    )
    _check_int_range(
        node["max_generation_attempts"],
        f"{field}.max_generation_attempts",
        MAX_GENERATION_ATTEMPTS,
        "invalid_max_generation_attempts",
    )
    if node["type"] == "llm_tool_loop":
        _check_int_range(
            node["max_tool_calls"],
            f"{field}.max_tool_calls",
            MAX_TOOL_CALLS,
            "invalid_max_tool_calls",
        )
        validate_tools(node["available_tools"], f"{field}.available_tools", lookup)
        _check_ref(node["final_schema_ref"], f"{field}.final_schema_ref", JSON_SCHEMA, lookup)
        if node["final_schema_ref"]["hash"] != world_patch_hash:
            raise invalid(
                "final_schema_not_world_patch",
                f"{field}.final_schema_ref",
                f"must be the kernel's WorldPatch schema ({world_patch_hash}); "
                "GET /api/world-patch-schema/ serves it",
                expected=world_patch_hash,
            )


def validate_workflow(content: Any, *, lookup: RefLookup, world_patch_hash: str) -> None:
    """Raise ChukwaError on the first rule the workflow breaks (SPEC §4 validation list)."""
    code = "invalid_workflow"
    workflow = require_object(content, "", code) if isinstance(content, dict) else None
    if workflow is None:
        raise invalid(code, "workflow", f"must be an object, got {type_name(content)}")
    check_keys(
        workflow,
        "",
        required=("version", "execution", "ambient_sources", "nodes", "apply"),
        code=code,
    )
    for path, key, expected, _value in iter_refs(workflow):
        if not expected:
            raise invalid(
                "unknown_reference_kind",
                path,
                f"{key!r} is not a known reference; known: {', '.join(sorted(REF_KINDS))}",
            )
    if workflow["version"] != 1 or not is_int(workflow["version"]):
        raise invalid("unsupported_version", "version", f"must be 1, got {workflow['version']!r}")
    if not isinstance(workflow["execution"], str) or workflow["execution"] not in EXECUTIONS:
        raise invalid(
            "unsupported_execution",
            "execution",
            f"{workflow['execution']!r} is not supported; supported: {', '.join(sorted(EXECUTIONS))}",
        )
    ambient = workflow["ambient_sources"]
    if not isinstance(ambient, list):
        raise invalid(code, "ambient_sources", f"must be an array, got {type_name(ambient)}")
    ambient_ids: set[str] = set()
    for index, source in enumerate(ambient):
        _validate_ambient(source, f"ambient_sources[{index}]", lookup, ambient_ids)

    nodes = workflow["nodes"]
    if not isinstance(nodes, list) or not nodes:
        raise invalid(code, "nodes", "must be a non-empty array of nodes")
    all_ids = {n.get("id") for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)}
    seen: set[str] = set()
    earlier_text_nodes: set[str] = set()
    node_types: dict[str, str] = {}
    for index, raw in enumerate(nodes):
        field = f"nodes[{index}]"
        node = require_object(raw, field, "invalid_node")
        for key in ("id", "type"):
            if key not in node:
                raise invalid("invalid_node", f"{field}.{key}", "is required")
        require_label(node["id"], f"{field}.id")
        if node["id"] in seen:
            raise invalid(
                "duplicate_node_id", f"{field}.id", f"node id {node['id']!r} is used twice"
            )
        seen.add(node["id"])
        node_type = node["type"]
        if node_type in ("llm_text", "llm_tool_loop"):
            _validate_llm_node(node, field, lookup, world_patch_hash, earlier_text_nodes, all_ids)
        elif isinstance(node_type, str) and node_type in EXTRA_NODE_VALIDATORS:
            EXTRA_NODE_VALIDATORS[node_type](node, field, lookup)
        else:
            supported = sorted({"llm_text", "llm_tool_loop", *EXTRA_NODE_VALIDATORS})
            raise invalid(
                "unknown_node_type",
                f"{field}.type",
                f"{node_type!r} is not a supported node type; supported: {', '.join(supported)}",
            )
        node_types[node["id"]] = node_type
        if node_type == "llm_text":
            earlier_text_nodes.add(node["id"])

    apply = workflow["apply"]
    apply_obj = require_object(apply, "apply", "invalid_apply")
    check_keys(apply_obj, "apply", required=("from",), code="invalid_apply")
    source = apply_obj["from"]
    producers = sorted(n for n, t in node_types.items() if t in PATCH_NODE_TYPES)
    target = (
        source[: -len(".final")] if isinstance(source, str) and source.endswith(".final") else None
    )
    if target is None or node_types.get(target) not in PATCH_NODE_TYPES:
        raise invalid(
            "invalid_apply",
            "apply.from",
            f'{source!r} must be "<node id>.final" naming a node that produces a WorldPatch; '
            f"candidates: {', '.join(p + '.final' for p in producers) or 'none'}",
        )


# The rule policy registers here (imported last: it needs nothing from this module at runtime).
from chukwa_core.rule_policy import validate_rule_policy_node  # noqa: E402

EXTRA_NODE_VALIDATORS["rule_policy"] = validate_rule_policy_node
