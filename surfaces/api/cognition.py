"""REST API for traces: source invocations and LLM calls (SPEC §9)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cognition_app import selectors
from surfaces.api.contract import READ_ERRORS, InstantField, LabelOutField, uuid_path


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
    request_key = _text(help_text="sha256 of the source hash and the request as sent (SPEC §7)")
    replayed_from = serializers.UUIDField(
        allow_null=True, help_text="the recorded invocation this one was served from (SPEC §12)"
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
