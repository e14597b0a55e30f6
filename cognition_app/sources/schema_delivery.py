"""How a response schema reaches the model: as ``response_format`` (a strict ``json_schema``),
or, only when the source says ``prompt_only``, as one closing system message that starts with
:data:`SCHEMA_INSTRUCTION` (pages recognise that message by it: one definition for both)."""

from __future__ import annotations

import json
from typing import Any

SCHEMA_INSTRUCTION = "Reply with one JSON object that validates against this JSON Schema"


def deliver_schema(
    payload: dict[str, Any],
    messages: list[dict[str, str]],
    schema: dict[str, Any],
    *,
    schema_name: str,
    delivery: str,
) -> dict[str, Any] | None:
    """Put ``schema`` into ``payload`` as the source's ``schema_delivery`` says; the
    ``response_format`` sent, or None for ``prompt_only``."""
    if delivery == "response_format":
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": schema, "strict": True},
        }
        payload["response_format"] = response_format
        return response_format
    instruction = f"{SCHEMA_INSTRUCTION}, and nothing else:\n{json.dumps(schema)}"
    payload["messages"] = [*messages, {"role": "system", "content": instruction}]
    return None
