"""REST API for traces: source invocations and LLM calls."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cognition_app import selectors, services
from surfaces.api.contract import (
    READ_ERRORS,
    WRITE_ERRORS,
    InstantField,
    InstantInField,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    operator_of,
    uuid_path,
    validate_body,
)


def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(allow_blank=True, **kwargs)


class InvocationSummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    source_hash = _text()
    source_label = _text()
    workflow_hash = _text()
    node_id = _text()
    subject_id = _text()
    ambient_source_id = _text()
    tool_name = _text()
    parent_id = serializers.UUIDField(allow_null=True)
    failure_class = _text()
    failure_message = _text()
    started_at = InstantField()
    ended_at = InstantField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    http_status = serializers.IntegerField(allow_null=True)
    validation_status = _text()
    generation_attempt = serializers.IntegerField(allow_null=True)
    tool_loop_round = serializers.IntegerField(allow_null=True)
    model_output_kind = _text()
    request_key = _text(
        help_text="sha256 of the source hash and the request as sent (what replay matches on)"
    )
    replayed_from = serializers.UUIDField(
        allow_null=True, help_text="the recorded invocation this one was served from (replay)"
    )
    reused_from = serializers.UUIDField(
        allow_null=True,
        help_text="the recorded call this one was answered from under reuse (nothing sent)",
    )
    retry_of_id = serializers.UUIDField(
        allow_null=True,
        help_text="a later try of a call its source's retry policy tried again: the first try",
    )
    limit_wait_ms = serializers.IntegerField(
        allow_null=True,
        help_text="how long this try waited for capacity (every limit, before it was sent); "
        "null: none",
    )
    limit_wait = _text(
        help_text="the limit it waited on longest (concurrency, requests_per_minute, "
        "tokens_per_minute, rate_limited, endpoint_concurrency)"
    )

    class Meta:
        ref_name = "SourceInvocationSummary"


class SourceInvocationDetailApi(APIView):
    class OutputSerializer(InvocationSummarySerializer):
        attempt_id = serializers.UUIDField()
        world = LabelOutField()
        attempted_turn = serializers.IntegerField()
        request = serializers.JSONField(help_text="what was sent, secrets scrubbed")
        response_json = serializers.JSONField(allow_null=True)
        response_text = _text()
        response_headers = serializers.JSONField()
        input_schema_hash = _text()
        output_schema_hash = _text()
        validation_errors = serializers.JSONField()
        llm_call_id = serializers.UUIDField(allow_null=True)

        class Meta:
            ref_name = "SourceInvocationGetOutput"

    @extend_schema(
        operation_id="source_invocation_get",
        parameters=[uuid_path("invocation_id")],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, invocation_id: str) -> Response:
        invocation = selectors.invocation_get(invocation_id=invocation_id)
        return Response(self.OutputSerializer(invocation).data)


class LlmUsageSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)
    cached_tokens = serializers.IntegerField(allow_null=True)
    source = _text()  # type: ignore[assignment]  # the API's field name shadows a Field attribute

    class Meta:
        ref_name = "LlmUsage"


class LlmChunkSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    offset_ms = serializers.IntegerField()
    text = _text()

    class Meta:
        ref_name = "LlmChunk"


class LlmCallDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.UUIDField()
        invocation_id = serializers.UUIDField()
        attempt_id = serializers.UUIDField()
        subject_id = _text()
        node_id = _text()
        generation_attempt = serializers.IntegerField(allow_null=True)
        status = serializers.CharField()
        base_url = _text()
        requested_model = _text()
        response_model = _text()
        messages = serializers.JSONField()
        params = serializers.JSONField()
        response_format = serializers.JSONField(allow_null=True)
        started_at = InstantField()
        ended_at = InstantField(allow_null=True)
        ttft_ms = serializers.IntegerField(allow_null=True)
        raw_text = _text()
        normalized_text = _text()
        finish_reason = _text()
        usage = LlmUsageSerializer()
        cost = serializers.DecimalField(
            max_digits=20,
            decimal_places=10,
            allow_null=True,
            help_text="null: no price matched (unknown, never 0)",
        )
        cost_estimated = serializers.BooleanField(help_text="computed from estimated usage")
        reused_from = serializers.UUIDField(
            allow_null=True,
            help_text="reuse: the recorded call this one was answered from (cost 0, nothing sent)",
        )
        tokens_reused = serializers.IntegerField(
            allow_null=True, help_text="reuse: the original's tokens, not spent"
        )
        cost_saved = serializers.DecimalField(
            max_digits=20,
            decimal_places=10,
            allow_null=True,
            help_text="reuse: what the original cost (null: not reused, or no price)",
        )
        price_id = serializers.IntegerField(allow_null=True, help_text="the price row used")
        parse_error = _text()
        validation_errors = serializers.JSONField()
        artifacts = serializers.JSONField()
        error = _text()
        chunks = LlmChunkSerializer(many=True)

        class Meta:
            ref_name = "LlmCallGetOutput"

    @extend_schema(
        operation_id="llm_call_get",
        parameters=[uuid_path("call_id")],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, call_id: str) -> Response:
        return Response(self.OutputSerializer(selectors.llm_call_get(call_id=call_id)).data)


URL_ENV_SCHEMA = {"type": "string", "pattern": r"^CHUKWA_[A-Z0-9_]+_URL$"}


def _price_field(help_text: str) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14, decimal_places=6, min_value=0, help_text=help_text
    )


def _batch_price_field(help_text: str) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14,
        decimal_places=6,
        min_value=0,
        required=False,
        allow_null=True,
        help_text=f"through the provider's Batch API, {help_text} (all three batch prices or "
        "none; none: batched calls cost unknown)",
    )


class ModelPriceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url_env = serializers.CharField()
    model = serializers.CharField()
    input_per_million = serializers.DecimalField(max_digits=14, decimal_places=6)
    output_per_million = serializers.DecimalField(max_digits=14, decimal_places=6)
    cached_input_per_million = serializers.DecimalField(max_digits=14, decimal_places=6)
    batch_input_per_million = serializers.DecimalField(
        max_digits=14, decimal_places=6, allow_null=True
    )
    batch_output_per_million = serializers.DecimalField(
        max_digits=14, decimal_places=6, allow_null=True
    )
    batch_cached_input_per_million = serializers.DecimalField(
        max_digits=14, decimal_places=6, allow_null=True
    )
    valid_from = InstantField()
    created_at = InstantField()
    created_by = _text()

    class Meta:
        ref_name = "ModelPrice"


class ModelPriceApi(APIView):
    """GET lists the price table with its history; PUT (operators) adds a row in force from
    ``valid_from`` for a (URL variable, model) pair. Rows are never overwritten."""

    class InputSerializer(StrictInputSerializer):
        field_codes = {
            "url_env": "invalid_url_env",
            "valid_from": "invalid_valid_from",
            "input_per_million": "invalid_price",
            "output_per_million": "invalid_price",
            "cached_input_per_million": "invalid_price",
            "batch_input_per_million": "invalid_price",
            "batch_output_per_million": "invalid_price",
            "batch_cached_input_per_million": "invalid_price",
        }
        url_env = StrictCharField(
            max_length=100, help_text="the sources' base_url_env, e.g. CHUKWA_LLM_BASE_URL"
        )
        model = StrictCharField(max_length=200, help_text="the model the sources request")
        input_per_million = _price_field("per million prompt tokens not cached")
        output_per_million = _price_field("per million completion tokens")
        cached_input_per_million = _price_field("per million cached prompt tokens")
        batch_input_per_million = _batch_price_field("per million prompt tokens not cached")
        batch_output_per_million = _batch_price_field("per million completion tokens")
        batch_cached_input_per_million = _batch_price_field("per million cached prompt tokens")
        valid_from = InstantInField(
            required=False, allow_null=True, help_text="ISO 8601 with an offset; default now"
        )
        operator = StrictCharField(required=False, max_length=150)

        class Meta:
            ref_name = "ModelPriceInput"

    class OutputSerializer(serializers.Serializer):
        results = ModelPriceSerializer(many=True)

        class Meta:
            ref_name = "ModelPriceListOutput"

    @extend_schema(
        operation_id="model_price_list",
        parameters=[
            OpenApiParameter("url_env", URL_ENV_SCHEMA, description="only this URL variable"),
            OpenApiParameter("model", str, description="only this model"),
        ],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        rows = selectors.model_price_list(
            url_env=request.query_params.get("url_env"), model=request.query_params.get("model")
        )
        return Response(self.OutputSerializer({"results": rows}).data)

    @extend_schema(
        operation_id="model_price_put",
        request=InputSerializer,
        responses={201: ModelPriceSerializer, **WRITE_ERRORS},
    )
    def put(self, request: Request) -> Response:
        data = operator_of(request, validate_body(self.InputSerializer, request))
        row = services.model_price_add(data=cast(services.ModelPriceInput, data))
        out = selectors.model_price_list(url_env=row.url_env, model=row.model)
        created = next(r for r in out if r["id"] == row.pk)
        return Response(ModelPriceSerializer(created).data, status=status.HTTP_201_CREATED)
