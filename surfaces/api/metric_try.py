"""``POST /api/metrics/try/`` (operators): what a metric would record on one committed turn of a
world, before it is stored (docs/measurement.md, "Trying a metric"). Nothing is written; a
judge is called only with ``"ask": true``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.metric_judge import TURN_VIEW_KEYS
from scenarios_app.models import ComponentKind
from surfaces.api.contract import (
    WRITE_ERRORS,
    LabelField,
    LabelOutField,
    StrictInputSerializer,
    StrictIntegerField,
    described,
    validate_body,
)
from surfaces.api.measurements import MeasurementErrorSerializer, MetricSummarySerializer
from surfaces.api.store import CONTENT_SCHEMAS
from worlds_app.services.metric_try import metric_try

TURN_VIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "the turn view the metric read (docs/measurement.md, 'The turn view')",
    "properties": {
        "world": {"type": "string"},
        "turn": {"type": "integer"},
        "simulation_time": {"type": "string", "format": "date-time"},
        "entities": {"type": "object", "additionalProperties": {"type": "object"}},
        "environments": {"type": "object", "additionalProperties": {"type": "object"}},
        "patches": {"type": "array", "items": {"type": "object"}},
        "calls": {"type": "array", "items": {"type": "object"}},
        "tokens": {"type": "integer"},
        "cost": {"type": "number", "nullable": True},
    },
    "required": list(TURN_VIEW_KEYS),
}


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean, exactly: "true" and 1 are not booleans."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError(f"must be true or false, got {data!r}")
        return data


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user"])
    content = serializers.CharField()

    class Meta:
        ref_name = "MetricTryMessage"


class MetricTryApi(APIView):
    """POST answers the value (or the error) a metric would record on a committed turn, with
    the turn view it read; for a judge, the messages it would send, and with ``ask`` the judge's
    score (one call traced as a try, counted against the world's budget)."""

    class InputSerializer(StrictInputSerializer):
        field_codes = {"content": "invalid_metric", "turn": "invalid_turn", "ask": "invalid_input"}
        content = described(
            CONTENT_SCHEMAS[ComponentKind.METRIC],
            help_text="the metric as it would be put (POST /api/metrics/'s content)",
        )
        world = LabelField(help_text="the world's slug")
        turn = StrictIntegerField(min_value=0, help_text="a committed turn of that world")
        ask = StrictBooleanField(
            required=False, default=False, help_text="call a judge's model (default false)"
        )

        class Meta:
            ref_name = "MetricTryInput"

    class OutputSerializer(serializers.Serializer):
        world = LabelOutField()
        turn = serializers.IntegerField()
        metric = MetricSummarySerializer(help_text="the hash it would be stored under")
        value = serializers.FloatField(
            allow_null=True, help_text="null with an error, or when a judge was not asked"
        )
        error = MeasurementErrorSerializer(allow_null=True, help_text="null when value is set")
        asked = serializers.BooleanField(help_text="whether a model was called")
        messages = MessageSerializer(
            many=True, allow_null=True, help_text="what a judge is sent; null for an expression"
        )
        rationale = serializers.CharField(allow_null=True, help_text="a judge's, when it scored")
        llm_call_id = serializers.UUIDField(allow_null=True, help_text="the try's judge call")
        view = described(TURN_VIEW_SCHEMA)

        class Meta:
            ref_name = "MetricTryOutput"

    @extend_schema(
        operation_id="metric_try",
        request=InputSerializer,
        responses={200: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        body = validate_body(self.InputSerializer, request)
        tried = metric_try(
            content=body["content"], world=body["world"], turn=body["turn"], ask=body["ask"]
        )
        return Response(self.OutputSerializer(tried).data)
