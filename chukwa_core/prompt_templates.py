"""The prompt placeholder grammar: ``{{name}}`` with plain replacement, the known
names, ``{{nodes.<id>.output}}`` of an earlier text node, and prompt template validation. The
one definition every renderer and validator uses. Pure."""

from __future__ import annotations

import re
from typing import Any

from chukwa_core.component_validation import check_keys, require_object, require_string
from chukwa_core.errors import invalid

ROLES = frozenset({"system", "user", "assistant"})
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

PLACEHOLDER_RE = re.compile(r"\{\{(.*?)\}\}")
NODE_OUTPUT_RE = re.compile(r"^nodes\.([^.]+)\.output$")


def _check_placeholders(
    text: str, field: str, earlier_text_nodes: set[str], all_node_ids: set[str]
) -> None:
    for match in PLACEHOLDER_RE.finditer(text):
        name = match.group(1)
        if name in STATIC_PLACEHOLDERS:
            continue
        node_match = NODE_OUTPUT_RE.fullmatch(name)
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


def validate_prompt(
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
