"""The ``power`` of ``POST /api/experiments/estimate/`` (docs/experiments.md, "How many
replicates do I need?"): the request's schema (checked by
``worlds_app.services.experiment_power``, 400 naming ``power.<field>``) and the answer's
serializer, derived from its dataclass."""

from __future__ import annotations

from typing import Any

from chukwa_core.experiment_power import SD_MEANING, PowerEstimate
from surfaces.api.contract import LABEL_SCHEMA, described
from surfaces.api.measurements import METRIC_REF_SCHEMA
from surfaces.api.typed_output import output_serializer

_COMMON: dict[str, Any] = {
    "metric": {**METRIC_REF_SCHEMA, "description": "one of the design's metrics"},
    "effect": {
        "type": "number",
        "description": "the paired difference to detect (treatment − control), not 0",
    },
    "alpha": {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
        "exclusiveMaximum": True,
        "default": 0.05,
        "description": "two-sided",
    },
    "power": {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
        "exclusiveMaximum": True,
        "default": 0.8,
        "description": "the power wanted",
    },
}
POWER_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                **_COMMON,
                "sd": {
                    "type": "number",
                    "minimum": 0,
                    "exclusiveMinimum": True,
                    "description": SD_MEANING,
                },
            },
            "required": ["metric", "effect", "sd"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                **_COMMON,
                "pilot": {
                    **LABEL_SCHEMA,
                    "description": "an experiment whose results give the paired differences' "
                    "sd for the metric (at least 2 complete pairs; with several treatment arms "
                    "the largest sd)",
                },
            },
            "required": ["metric", "effect", "pilot"],
            "additionalProperties": False,
        },
    ]
}


def power_input_field() -> Any:
    return described(
        POWER_SCHEMA,
        required=False,
        help_text="the replicates needed to detect an effect: give sd or a pilot experiment",
    )


PowerEstimateSerializer = output_serializer(PowerEstimate, prefix="Experiment")
