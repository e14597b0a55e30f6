"""Cognition workflow validation. Pure: no Django; never calls a source or an LLM.

The store resolves inline references first, then calls :func:`validate_workflow` with the
kind (and, for response sources, the interface) of every referenced hash it found stored.
"""

from __future__ import annotations

from typing import Any

from chukwa_core.component_validation import (
    check_keys,
    is_int,
    require_label,
    require_object,
    type_name,
)
from chukwa_core.errors import invalid
from chukwa_core.ids import is_entity_id
from chukwa_core.node_types import NODE_TYPES, PATCH_NODE_TYPES
from chukwa_core.source_validation import HTTP_JSON_INTERFACE
from chukwa_core.workflow_refs import (
    JSON_SCHEMA,
    REF_KINDS,
    RESPONSE_SOURCE,
    NodeCheck,
    RefLookup,
    check_interface,
    check_ref,
    iter_refs,
)

# One after another in id order, or at the same time on the turn-start world.
EXECUTIONS = frozenset({"per_subject_ordered", "concurrent"})
RUN_MODES = frozenset({"once_per_turn", "before_subject_workflow"})

WORLD_POINTERS = ("/world/slug", "/world/turn", "/world/attempted_turn", "/world/simulation_time")
SUBJECT_POINTERS = ("/subject/id", "/subject/environment")


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
    stored = check_ref(amb["source_ref"], f"{field}.source_ref", RESPONSE_SOURCE, lookup)
    check_interface(stored, f"{field}.source_ref", HTTP_JSON_INTERFACE)
    if "result_schema_ref" in amb:
        check_ref(amb["result_schema_ref"], f"{field}.result_schema_ref", JSON_SCHEMA, lookup)
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


def validate_workflow(content: Any, *, lookup: RefLookup, world_patch_hash: str) -> None:
    """Raise ChukwaError on the first rule the workflow breaks (the validation list of docs/workflows.md)."""
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
    all_ids: set[str] = {
        n["id"] for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)
    }
    seen: set[str] = set()
    earlier_text_nodes: set[str] = set()
    check = NodeCheck(lookup, world_patch_hash, earlier_text_nodes, all_ids)
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
        spec = NODE_TYPES.get(node_type) if isinstance(node_type, str) else None
        if spec is None:
            raise invalid(
                "unknown_node_type",
                f"{field}.type",
                f"{node_type!r} is not a supported node type; supported: "
                f"{', '.join(sorted(NODE_TYPES))}",
            )
        spec.validate(node, field, check)
        node_types[node["id"]] = node_type
        if spec.text_output:
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
