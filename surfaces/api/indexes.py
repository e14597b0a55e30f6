"""Cross-world indexes: ``GET /api/attempts/``, ``GET /api/llm-calls/`` and
``GET /api/source-invocations/``, filtered by status, world, experiment and arm, subject, model
or source and time, paged. The filter serializers here also validate the
browser's index pages (``surfaces/pages/indexes.py``)."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cognition_app import selectors as cognition_selectors
from cognition_app.models import InvocationKind, InvocationStatus
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


class ExperimentFilterMixin(serializers.Serializer):
    """The experiment filters every index shares: its worlds, and of those one arm's."""

    experiment = LabelField(required=False, help_text="only the worlds of this experiment (slug)")
    arm = LabelField(
        required=False, help_text="only the worlds of this arm (its label; any experiment's)"
    )


class AttemptFilterSerializer(PagingQuerySerializer, SinceUntilMixin, ExperimentFilterMixin):
    status = serializers.ChoiceField(choices=STATUSES, required=False)
    world = LabelField(required=False, help_text="only this world's attempts")
    subject = text_filter("only attempts in which this entity thought (or failed)")
    model = text_filter("only attempts with an LLM call to this model (requested or answering)")


class LlmCallFilterSerializer(PagingQuerySerializer, SinceUntilMixin, ExperimentFilterMixin):
    status = serializers.ChoiceField(
        choices=list(CALL_OUTCOMES),
        required=False,
        help_text="rejected: the reply arrived but was refused (unparsable or off-schema)",
    )
    world = LabelField(required=False, help_text="only this world's calls")
    subject = text_filter("only calls made for this entity")
    model = text_filter("only calls to this model (requested or answering)")


INVOCATION_KINDS = tuple(InvocationKind.values)
INVOCATION_STATUSES = tuple(InvocationStatus.values)


class InvocationFilterSerializer(PagingQuerySerializer, SinceUntilMixin, ExperimentFilterMixin):
    kind = serializers.ChoiceField(choices=INVOCATION_KINDS, required=False)
    source = text_filter("only calls of this source (its label) or this tool (its name)")  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    subject = text_filter("only calls made for this entity")
    status = serializers.ChoiceField(choices=INVOCATION_STATUSES, required=False)
    world = LabelField(required=False, help_text="only this world's calls")


def invocation_page_of(params: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the validated filters, the page of source invocations)."""
    filters, limit, offset = split_paging(parse_query(InvocationFilterSerializer, params))
    page = cognition_selectors.source_invocation_list(
        filters=cast(cognition_selectors.InvocationFilters, filters), limit=limit, offset=offset
    )
    return filters, page


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
    waiting_for = serializers.CharField(
        allow_blank=True,
        help_text="what a running attempt's call waits for now (a model slot and who holds it, "
        "a rate limit, an interactive turn served first); empty when none waits",
    )
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
    latency_ms = serializers.IntegerField(
        allow_null=True, help_text="from the request to the last byte; null while it runs"
    )
    preview = serializers.CharField(
        allow_blank=True, help_text="the reply's first 120 characters, whitespace collapsed"
    )
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


class InvocationRowSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=INVOCATION_KINDS)
    source = serializers.CharField(help_text="the tool's name for a tool call, else the label")  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    source_hash = serializers.CharField()
    status = serializers.ChoiceField(choices=INVOCATION_STATUSES)
    failure_class = serializers.CharField(allow_blank=True)
    problem = serializers.CharField(allow_blank=True, help_text="the failure, shortened")
    world = LabelOutField()
    attempt_id = serializers.UUIDField()
    attempted_turn = serializers.IntegerField()
    subject_id = serializers.CharField(allow_blank=True)
    node_id = serializers.CharField(allow_blank=True)
    started_at = InstantField()
    duration_ms = serializers.IntegerField(allow_null=True)
    http_status = serializers.IntegerField(allow_null=True)
    arguments = serializers.JSONField(
        allow_null=True, help_text="a tool call's arguments as sent; null for other kinds"
    )
    llm_call_id = serializers.UUIDField(allow_null=True, help_text="a generation's LLM call")

    class Meta:
        ref_name = "SourceInvocationRow"


class SourceInvocationListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = InvocationRowSerializer(many=True)

        class Meta:
            ref_name = "SourceInvocationListOutput"

    @extend_schema(
        operation_id="source_invocation_list",
        parameters=[InvocationFilterSerializer],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        _filters, page = invocation_page_of(request.query_params)
        return Response(self.OutputSerializer(page).data)
