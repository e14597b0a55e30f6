"""Validation of the two LLM node types, ``llm_text`` and ``llm_tool_loop``. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chukwa_core.component_validation import check_keys
from chukwa_core.errors import invalid
from chukwa_core.prompt_templates import validate_prompt
from chukwa_core.source_validation import LLM_INTERFACE
from chukwa_core.workflow_refs import (
    JSON_SCHEMA,
    RESPONSE_SOURCE,
    NodeCheck,
    check_int_range,
    check_interface,
    check_ref,
    validate_tools,
)

MAX_GENERATION_ATTEMPTS = (1, 10)
MAX_TOOL_CALLS = (0, 16)


def validate_llm_node(node: Mapping[str, Any], field: str, check: NodeCheck) -> None:
    lookup, world_patch_hash = check.lookup, check.world_patch_hash
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
    stored = check_ref(node["llm_source_ref"], f"{field}.llm_source_ref", RESPONSE_SOURCE, lookup)
    check_interface(stored, f"{field}.llm_source_ref", LLM_INTERFACE)
    validate_prompt(
        node["prompt_template"],
        f"{field}.prompt_template",
        check.earlier_text_nodes,
        check.all_node_ids,
    )
    check_int_range(
        node["max_generation_attempts"],
        f"{field}.max_generation_attempts",
        MAX_GENERATION_ATTEMPTS,
        "invalid_max_generation_attempts",
    )
    if node["type"] == "llm_tool_loop":
        check_int_range(
            node["max_tool_calls"],
            f"{field}.max_tool_calls",
            MAX_TOOL_CALLS,
            "invalid_max_tool_calls",
        )
        validate_tools(node["available_tools"], f"{field}.available_tools", lookup)
        check_ref(node["final_schema_ref"], f"{field}.final_schema_ref", JSON_SCHEMA, lookup)
        if node["final_schema_ref"]["hash"] != world_patch_hash:
            raise invalid(
                "final_schema_not_world_patch",
                f"{field}.final_schema_ref",
                f"must be the kernel's WorldPatch schema ({world_patch_hash}); "
                "GET /api/world-patch-schema/ serves it",
                expected=world_patch_hash,
            )
