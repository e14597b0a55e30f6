"""The API's schemas of a factorial design and a stopping rule (docs/designs.md): the input's
``base``/``factors``/``fraction``/``stopping`` and the design's ``factorial``/``stopping``."""

from __future__ import annotations

from typing import Any

from surfaces.api.contract import LABEL_SCHEMA, described
from surfaces.api.measurements import METRIC_REF_SCHEMA

LEVEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": LABEL_SCHEMA,
        "fork": {
            "type": "object",
            "description": "the store's fork request without primary_parent (the base is "
            "implied): changes, and optionally note, metadata, operator; absent on the first "
            "level (the base's value)",
        },
    },
    "required": ["label"],
    "additionalProperties": False,
}
FACTORS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "minItems": 2,
    "items": {
        "type": "object",
        "properties": {
            "name": LABEL_SCHEMA,
            "levels": {"type": "array", "minItems": 2, "items": LEVEL_SCHEMA},
        },
        "required": ["name", "levels"],
        "additionalProperties": False,
    },
}
STOPPING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metric": METRIC_REF_SCHEMA,
        "alpha": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 1},
        "max_replicates": {"type": "integer", "minimum": 1},
        "every": {"type": "integer", "minimum": 1},
        "treatment": LABEL_SCHEMA,
    },
    "required": ["metric", "alpha", "max_replicates", "every"],
    "additionalProperties": False,
}
FACTORIAL_OUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "nullable": True,
    "description": "the factors the arms were made from, the fraction's resolution, defining "
    "relation and alias sets (each a list of signed effects), and every arm's levels",
    "properties": {
        "base": {"type": "object", "properties": {"hash": {"type": "string"}}},
        "factors": FACTORS_SCHEMA,
        "fraction": {"type": "string", "nullable": True},
        "resolution": {"type": "integer", "nullable": True},
        "defining_relation": {"type": "string", "nullable": True},
        "aliases": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "text": {"type": "string"},
        "label_rule": {"type": "string"},
        "arm_levels": {
            "type": "object",
            "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
}
STOPPING_OUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "nullable": True,
    "description": "the stopping rule: metric (a hash), alpha, max_replicates, every, start "
    "(the first look's replicates) and the treatment arm tested against the control",
    "properties": {
        "metric": {"type": "string"},
        "alpha": {"type": "number"},
        "max_replicates": {"type": "integer"},
        "every": {"type": "integer"},
        "start": {"type": "integer"},
        "treatment": {"type": "string"},
    },
}


def input_fields() -> dict[str, Any]:
    return {
        "base": described(
            {"type": "object", "description": '{"name": N} or {"hash": H} of a stored scenario'},
            required=False,
            help_text="the scenario the factors' levels fork (with factors, instead of arms)",
        ),
        "factors": described(
            FACTORS_SCHEMA, required=False, help_text="arms as the product of these factors"
        ),
        "fraction": described(
            {"type": "string", "enum": ["1/2"]},
            required=False,
            help_text="the highest-resolution half fraction of all-two-level factors",
        ),
        "stopping": described(
            STOPPING_SCHEMA,
            required=False,
            help_text="add replicates `every` pairs until an anytime-valid test rejects or "
            "max_replicates",
        ),
    }
