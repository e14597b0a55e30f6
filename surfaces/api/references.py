"""People as a reference (docs/populations.md, "Comparing with people"): operators upload
observed values of an experiment's metrics (CSV or JSON rows: unit, metric, value); everyone
signed in reads them back, as JSON or as a tidy CSV beside the measurements' export. The
distances from the people are in the experiment's results (``people`` of each metric)."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.errors import invalid
from surfaces.api.contract import (
    READ_ERRORS,
    WRITE_ERRORS,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    StrictListField,
    described,
    validate_body,
)
from surfaces.api.experiments import EXPERIMENT_PATH
from worlds_app import experiment_results
from worlds_app.services import references as services

ROW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "unit": {"type": "string", "description": "who was observed (a person, a session)"},
        "metric": {"type": "string", "description": "a metric of the experiment, by label"},
        "value": {"type": "number"},
    },
    "required": ["unit", "metric", "value"],
    "additionalProperties": False,
}


class ReferenceInputSerializer(StrictInputSerializer):
    """Exactly one of ``rows`` (JSON rows) or ``csv`` (the text of a CSV file)."""

    field_codes = {"rows": "invalid_rows", "csv": "invalid_csv"}
    rows = StrictListField(child=described(ROW_SCHEMA), min_length=1, required=False)
    csv = StrictCharField(
        required=False,
        min_length=1,
        help_text="a CSV file's text: the header unit,metric,value (any order), then one row each",
    )

    class Meta:
        ref_name = "ExperimentReferencesInput"


class ReferenceRowSerializer(serializers.Serializer):
    unit = serializers.CharField()
    metric_label = LabelOutField()
    metric_hash = serializers.CharField(allow_null=True)
    value = serializers.FloatField()

    class Meta:
        ref_name = "ExperimentReferenceRow"


class ReferenceListSerializer(serializers.Serializer):
    experiment = LabelOutField()
    results = ReferenceRowSerializer(many=True)

    class Meta:
        ref_name = "ExperimentReferenceList"


class UploadedSerializer(serializers.Serializer):
    experiment = LabelOutField()
    written = serializers.IntegerField(help_text="rows written by this upload")
    total = serializers.IntegerField(help_text="people's values the experiment now holds")

    class Meta:
        ref_name = "ExperimentReferencesUploaded"


class ExperimentReferencesApi(APIView):
    """GET the people's values of an experiment; POST uploads more (``{"rows": [...]}`` or
    ``{"csv": "unit,metric,value\\n…"}``), checked whole: a bad row is a 400 naming it and
    nothing is written; DELETE removes them all."""

    @extend_schema(
        operation_id="experiment_references_list",
        parameters=[EXPERIMENT_PATH],
        responses={200: ReferenceListSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        experiment, rows = experiment_results.reference_rows(slug=slug)
        return Response(
            ReferenceListSerializer({"experiment": experiment.slug, "results": rows}).data
        )

    @extend_schema(
        operation_id="experiment_references_upload",
        parameters=[EXPERIMENT_PATH],
        request=ReferenceInputSerializer,
        responses={201: UploadedSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        body = validate_body(ReferenceInputSerializer, request)
        if ("rows" in body) == ("csv" in body):
            raise invalid("invalid_upload", "rows", "give exactly one of rows or csv")
        rows = body["rows"] if "rows" in body else services.rows_from_csv(body["csv"])
        written = services.references_upload(
            slug=slug, rows=rows, uploaded_by=request.user.get_username()
        )
        experiment, stored = experiment_results.reference_rows(slug=slug)
        answer = {"experiment": experiment.slug, "written": written, "total": len(stored)}
        return Response(UploadedSerializer(answer).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="experiment_references_delete",
        parameters=[EXPERIMENT_PATH],
        request=None,
        responses={204: None, **WRITE_ERRORS},
    )
    def delete(self, request: Request, slug: str) -> Response:
        services.references_delete(slug=slug)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ExperimentReferencesCsvApi(APIView):
    """GET the people's values as tidy CSV rows (unit, metric_label, metric_hash, value)."""

    @extend_schema(
        operation_id="experiment_references_export",
        parameters=[EXPERIMENT_PATH],
        responses={200: OpenApiResponse(description="the rows"), **READ_ERRORS},
        exclude=True,
    )
    def get(self, request: Request, slug: str) -> HttpResponse:
        experiment, rows = experiment_results.reference_rows(slug=slug)
        buffer = io.StringIO()
        writer = csv.DictWriter(
            buffer, fieldnames=experiment_results.REFERENCE_COLUMNS, lineterminator="\n"
        )
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        response = HttpResponse(buffer.getvalue(), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{experiment.slug}-references.csv"'
        return response
