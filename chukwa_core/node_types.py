"""The registry of workflow node types: for each type, its validator, whether its
output is text a later node may use, and whether it produces a WorldPatch. Workflow validation
reads it here; the cognition runner binds one executor to each type (and checks it has one for
every type and no other)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chukwa_core.llm_node_validation import validate_llm_node
from chukwa_core.rule_policy import validate_rule_policy_node
from chukwa_core.workflow_refs import NodeCheck

NodeValidator = Callable[[Mapping[str, Any], str, NodeCheck], None]


@dataclass(frozen=True)
class NodeType:
    validate: NodeValidator
    text_output: bool  # {{nodes.<id>.output}} may name it
    produces_patch: bool  # apply.from may name it


NODE_TYPES: dict[str, NodeType] = {
    "llm_text": NodeType(validate_llm_node, text_output=True, produces_patch=False),
    "llm_tool_loop": NodeType(validate_llm_node, text_output=False, produces_patch=True),
    "rule_policy": NodeType(validate_rule_policy_node, text_output=False, produces_patch=True),
}
PATCH_NODE_TYPES = frozenset(name for name, spec in NODE_TYPES.items() if spec.produces_patch)
