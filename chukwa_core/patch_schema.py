"""The kernel's WorldPatch JSON Schema. Pure: no Django.

The schema is stored as an ordinary ``json_schema`` component (a data migration puts it), and
every LLM tool-loop node must name exactly this schema as its ``final_schema_ref``.
"""

from __future__ import annotations

from typing import Any

from chukwa_core.hashing import json_schema_hash

_NON_EMPTY = {"type": "string", "minLength": 1}

WORLD_PATCH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "WorldPatch",
    "description": (
        "The only thing that may change a world. Entity ids and environment labels must match "
        "the world exactly; append_entity_memory applies to agents only."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["narration", "effects"],
    "properties": {
        "narration": _NON_EMPTY,
        "effects": {
            "type": "array",
            "items": {
                "anyOf": [
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["op", "entity_id", "state"],
                        "properties": {
                            "op": {"const": "set_entity_state"},
                            "entity_id": _NON_EMPTY,
                            "state": _NON_EMPTY,
                        },
                    },
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["op", "entity_id", "content"],
                        "properties": {
                            "op": {"const": "append_entity_memory"},
                            "entity_id": _NON_EMPTY,
                            "content": _NON_EMPTY,
                        },
                    },
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["op", "environment_label", "content"],
                        "properties": {
                            "op": {"const": "set_environment_content"},
                            "environment_label": _NON_EMPTY,
                            "content": _NON_EMPTY,
                        },
                    },
                ]
            },
        },
    },
}

PATCH_OPS = ("set_entity_state", "append_entity_memory", "set_environment_content")


def world_patch_schema_hash() -> str:
    return json_schema_hash(WORLD_PATCH_SCHEMA)
