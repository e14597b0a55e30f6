"""Cross-world indexes: ``GET /api/attempts/`` and ``GET /api/llm-calls/``, filtered
by status, world, subject, model and time, paged. The filter serializers here also validate the
browser's index pages (``surfaces/pages/indexes.py``)."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cognition_app import selectors as cognition_selectors
from cognition_app.selectors import CALL_OUTCOMES
from surfaces.api.contract import (
    READ_ERRORS,
    CostTotalsSerializer,
    InstantField,
    LabelField,
    LabelOutField,
)
from surfaces.api.queries import (
    PagingQuerySerializer,
    SinceUntilMixin,
    parse_query,
    split_paging,
    text_filter,
)
from surfaces.api.worlds import STATUSES, AttemptFailureSerializer
from worlds_app import indexes as world_indexes


class AttemptFilterSerializer(PagingQuerySerializer, SinceUntilMixin):
    status = serializers.ChoiceField(choices=STATUSES, required=False)
    world = LabelField(required=False, help_text="only this world's attempts")
    subject = text_filter("only attempts in which this entity thought (or failed)")
    model = text_filter("only attempts with an LLM call to this model (requested or answering)")


class LlmCallFilterSerializer(PagingQuerySerializer, SinceUntilMixin):
    status = serializers.ChoiceField(
        choices=list(CALL_OUTCOMES),
        required=False,
        help_text="rejected: the reply arrived but was refused (unparsable or off-schema)",
    )
    world = LabelField(required=False, help_text="only this world's calls")
    subject = text_filter("only calls made for this entity")
    model = text_filter("only calls to this model (requested or answering)")


def attempt_page_of(params: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the validated filters, the page of attempts)."""
    filters, limit, offset = split_paging(parse_query(AttemptFilterSerializer, params))
    page = world_indexes.attempt_list(
        filters=cast(world_indexes.AttemptFilters, filters), limit=limit, offset=offset
    )
    return filters, page


def llm_call_page_of(params: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the validated filters, the page of LLM calls)."""
    filters, limit, offset = split_paging(parse_query(LlmCallFilterSerializer, params))
    page = cognition_selectors.llm_call_list(
        filters=cast(cognition_selectors.LlmCallFilters, filters), limit=limit, offset=offset
    )
    return filters, page


class AttemptRowSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    world = LabelOutField()
    seq = serializers.IntegerField()
    status = serializers.ChoiceField(choices=STATUSES)
    attempted_turn = serializers.IntegerField(allow_null=True)
    produced_turn = serializers.IntegerField(allow_null=True)
    queued_at = InstantField()
    started_at = InstantField(allow_null=True)
    ended_at = InstantField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    failure = AttemptFailureSerializer(allow_null=True)
    cost = CostTotalsSerializer()

    class Meta:
        ref_name = "AttemptRow"


class AttemptListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = AttemptRowSerializer(many=True)

        class Meta:
            ref_name = "AttemptListOutput"

    @extend_schema(
        operation_id="attempt_list",
        parameters=[AttemptFilterSerializer],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        _filters, page = attempt_page_of(request.query_params)
        return Response(self.OutputSerializer(page).data)


class LlmCallRowSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    outcome = serializers.ChoiceField(choices=list(CALL_OUTCOMES))
    status = serializers.CharField(help_text="the transport's status (a rejected reply arrived)")
    problem = serializers.CharField(
        allow_blank=True, help_text="the error, parse error or first schema error, shortened"
    )
    world = LabelOutField()
    attempt_id = serializers.UUIDField()
    invocation_id = serializers.UUIDField()
    attempted_turn = serializers.IntegerField()
    subject_id = serializers.CharField(allow_blank=True)
    node_id = serializers.CharField(allow_blank=True)
    generation_attempt = serializers.IntegerField(allow_null=True)
    requested_model = serializers.CharField(allow_blank=True)
    response_model = serializers.CharField(allow_blank=True)
    started_at = InstantField()
    ended_at = InstantField(allow_null=True)
    ttft_ms = serializers.IntegerField(allow_null=True)
    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)
    cost = serializers.DecimalField(
        max_digits=20, decimal_places=10, allow_null=True, help_text="null: unknown (no price)"
    )
    cost_estimated = serializers.BooleanField()
    finish_reason = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "LlmCallRow"


class LlmCallListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = LlmCallRowSerializer(many=True)

        class Meta:
            ref_name = "LlmCallListOutput"

    @extend_schema(
        operation_id="llm_call_list",
        parameters=[LlmCallFilterSerializer],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        _filters, page = llm_call_page_of(request.query_params)
        return Response(self.OutputSerializer(page).data)
