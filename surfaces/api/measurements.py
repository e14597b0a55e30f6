"""Measurements of a world (docs/measurement.md): list them, ask for them (measured by a worker on
the measure queue); a metric's agreement with reviewers' annotations. Operators ask for
measurements; any signed-in user reads."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.agreement import MetricAgreement
from chukwa_core.metric_kinds import BUILT_IN_METRIC_KINDS
from surfaces.api.contract import (
    HASH_OR_LABEL_SCHEMA,
    HASH_PATH,
    LABEL_PATTERN,
    READ_ERRORS,
    SLUG_PATH,
    WRITE_ERRORS,
    HashOutField,
    InstantField,
    LabelOutField,
    StrictInputSerializer,
    StrictListField,
    described,
    validate_body,
)
from surfaces.api.queries import parse_query
from surfaces.api.typed_output import output_serializer
from worlds_app import measurement_selectors as selectors
from worlds_app.services import measurements as services

METRIC_REF_SCHEMA: dict[str, Any] = HASH_OR_LABEL_SCHEMA


class MetricSummarySerializer(serializers.Serializer):
    hash = HashOutField()
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    kind = serializers.ChoiceField(choices=list(BUILT_IN_METRIC_KINDS))

    class Meta:
        ref_name = "MetricSummary"


class MeasurementErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="metric_null, metric_type, metric_error, …")
    message = serializers.CharField()

    class Meta:
        ref_name = "MeasurementError"


class MeasurementSerializer(serializers.Serializer):
    turn = serializers.IntegerField()
    metric = MetricSummarySerializer()
    subject = serializers.CharField(
        allow_blank=True,
        help_text="the agent a survey metric asked (one row per agent); empty for other kinds",
    )
    value = serializers.FloatField(allow_null=True, help_text="null when error is set")
    error = MeasurementErrorSerializer(allow_null=True, help_text="null when value is set")
    llm_call_id = serializers.UUIDField(allow_null=True, help_text="a judge's LLM call")
    measured_at = InstantField()

    class Meta:
        ref_name = "Measurement"


class MeasurementQuerySerializer(serializers.Serializer):
    metric = serializers.RegexField(
        rf"{LABEL_PATTERN}|^[0-9a-f]{{64}}$",
        required=False,
        help_text="one metric: its hash, or a label (every version of it)",
    )


class MeasurementCollectionApi(APIView):
    """GET lists a world's measurements; POST asks for the given metrics to be measured on every
    committed turn (202; a worker on the measure queue writes what is missing)."""

    class InputSerializer(StrictInputSerializer):
        field_codes = {"metrics": "invalid_metrics"}
        metrics = StrictListField(
            child=described(METRIC_REF_SCHEMA),
            min_length=1,
            max_length=services.MAX_METRICS_PER_REQUEST,
            help_text='metric refs: {"hash": H} or {"label": L} (its newest version)',
        )

        class Meta:
            ref_name = "MeasurementRequestInput"

    class OutputSerializer(serializers.Serializer):
        world = LabelOutField()
        metrics = MetricSummarySerializer(many=True)
        first_turn = serializers.IntegerField(help_text="the first turn measured (0 usually)")
        current_turn = serializers.IntegerField(help_text="the last committed turn now")

        class Meta:
            ref_name = "MeasurementRequestOutput"

    class ListOutputSerializer(serializers.Serializer):
        world = LabelOutField()
        count = serializers.IntegerField()
        results = MeasurementSerializer(many=True)

        class Meta:
            ref_name = "MeasurementListOutput"

    @extend_schema(
        operation_id="measurement_list",
        parameters=[SLUG_PATH, MeasurementQuerySerializer],
        responses={200: ListOutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        query = parse_query(MeasurementQuerySerializer, request.query_params)
        found = selectors.measurement_list(slug=slug, metric=query.get("metric"))
        return Response(self.ListOutputSerializer(found).data)

    @extend_schema(
        operation_id="measurement_request",
        parameters=[SLUG_PATH],
        request=InputSerializer,
        responses={202: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        body = validate_body(self.InputSerializer, request)
        queued = services.measurement_request(slug=slug, metrics=body["metrics"])
        return Response(self.OutputSerializer(queued).data, status=status.HTTP_202_ACCEPTED)


class AgreementQuerySerializer(serializers.Serializer):
    annotation = serializers.RegexField(
        LABEL_PATTERN, help_text="the annotation name reviewers labelled the same turns with"
    )


class MetricAgreementApi(APIView):
    """GET compares a metric's values with reviewers' annotations of one name on the same turns:
    a turn is one unit; Spearman's rho with its permutation p, quadratic-weighted kappa on a
    shared integer scale, Krippendorff's alpha over every rater, each with a bootstrap interval
    resampled by world."""

    # the answer's shape is its dataclass's (every field typed in the document)
    OutputSerializer = output_serializer(MetricAgreement)

    @extend_schema(
        operation_id="metric_agreement",
        parameters=[HASH_PATH, AgreementQuerySerializer],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, hash: str) -> Response:
        query = parse_query(AgreementQuerySerializer, request.query_params)
        found = selectors.metric_agreement(metric_hash=hash, annotation=query["annotation"])
        return Response(self.OutputSerializer(found).data)
