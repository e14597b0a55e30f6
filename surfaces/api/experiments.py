"""Experiments (docs/experiments.md): operators create and cancel them; everyone signed in reads
their status, results and the tidy export of their measurements."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import orjson
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.experiment_design import EXPERIMENT_MODES, STATUSES, ExperimentDesign
from chukwa_core.experiment_results_types import ExperimentResults
from cognition_app.sources import REUSE_MODES
from surfaces.api.contract import (
    LABEL_SCHEMA,
    READ_ERRORS,
    WRITE_ERRORS,
    HashOutField,
    InstantField,
    JSONObjectField,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    StrictListField,
    described,
    path_parameter,
    validate_body,
)
from surfaces.api.experiment_estimate import EXPERIMENT_BUDGET_SCHEMA, EstimateSerializer
from surfaces.api.experiment_factorial import (
    FACTORIAL_OUT_SCHEMA,
    STOPPING_OUT_SCHEMA,
)
from surfaces.api.experiment_factorial import input_fields as factorial_input_fields
from surfaces.api.experiment_power import power_input_field
from surfaces.api.measurements import METRIC_REF_SCHEMA
from surfaces.api.typed_output import output_serializer
from worlds_app import experiment_results
from worlds_app import experiment_selectors as selectors
from worlds_app.services import experiments as services
from worlds_app.services.experiment_estimate import experiment_estimate

FACTORIAL_INPUT = factorial_input_fields()
EXPERIMENT_PATH = path_parameter("slug", LABEL_SCHEMA, "experiment slug")
ARM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": LABEL_SCHEMA,
        "scenario_ref": {
            "type": "object",
            "description": '{"name": N} or {"hash": H} of a stored scenario',
        },
        "interventions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "turn": {"type": "integer", "minimum": 1},
                    "patch": {"type": "object"},
                    "note": {"type": "string"},
                },
                "required": ["turn", "patch"],
            },
        },
    },
    "required": ["label", "scenario_ref"],
    "additionalProperties": False,
}


class ExperimentInputSerializer(StrictInputSerializer):
    field_codes = {
        "slug": "invalid_slug",
        "arms": "invalid_arms",
        "replicates": "invalid_replicates",
        "turns": "invalid_turns",
        "metrics": "invalid_metrics",
        "seed": "invalid_seed",
        "control": "invalid_control",
        "start_time": "invalid_start_time",
        "budget": "invalid_budget",
        "branch_from": "invalid_branch_from",
        "replay_from": "invalid_replay_from",
        "primary": "invalid_primary",
        "reuse": "invalid_reuse",
        "mode": "invalid_mode",
        "base": "invalid_factors",
        "factors": "invalid_factors",
        "fraction": "invalid_fraction",
        "stopping": "invalid_stopping",
    }
    slug = StrictCharField(help_text="the experiment; its worlds are <slug>--<arm>--<i>")
    name = StrictCharField(required=False, allow_blank=True)
    description = StrictCharField(required=False, allow_blank=True)
    arms = StrictListField(child=described(ARM_SCHEMA), min_length=1, required=False)
    control = StrictCharField(required=False, help_text="an arm's label (default: the first)")
    replicates = StrictIntegerField(min_value=1, help_text="worlds per arm, paired by seed")
    turns = StrictIntegerField(min_value=1, help_text="turns each world runs")
    metrics = StrictListField(child=described(METRIC_REF_SCHEMA), min_length=1)
    seed = StrictIntegerField(
        required=False, min_value=0, max_value=2**53 - 1, help_text="default: from the slug"
    )
    start_time = StrictCharField(required=False, help_text="every world's simulation start")
    budget = described(
        EXPERIMENT_BUDGET_SCHEMA,
        required=False,
        help_text="one total over all its worlds and judges, reserved before every LLM call",
    )
    branch_from = described(
        {
            "type": "object",
            "properties": {"world": LABEL_SCHEMA, "turn": {"type": "integer", "minimum": 0}},
            "required": ["world", "turn"],
            "additionalProperties": False,
        },
        required=False,
        help_text="every world branches from this world's committed turn (its turns follow it)",
    )
    replay_from = described(
        {
            "type": "object",
            "properties": {
                "experiment": LABEL_SCHEMA,
                "mode": {"type": "string", "enum": ["replay_strict", "replay_then_live"]},
            },
            "required": ["experiment", "mode"],
            "additionalProperties": False,
        },
        required=False,
        help_text="each world replays the world of the same arm and replicate there",
    )
    primary = described(
        METRIC_REF_SCHEMA,
        required=False,
        help_text="the primary metric (one of metrics): its comparisons are flagged primary",
    )
    reuse = serializers.ChoiceField(
        choices=list(REUSE_MODES),
        required=False,
        help_text="exact (default): a call whose whole request equals a recorded succeeded "
        "call's is answered from it, so the arms of a replicate share replies until their "
        "requests differ; off: every call is sent",
    )
    mode = serializers.ChoiceField(
        choices=list(EXPERIMENT_MODES),
        required=False,
        help_text="online (default): every call sent as it comes; batch: the worlds' LLM calls "
        "gathered into provider batches in lockstep ticks, an attempt waiting for its reply "
        "parked without a worker (docs/costs.md)",
    )
    base = FACTORIAL_INPUT["base"]
    factors = FACTORIAL_INPUT["factors"]
    fraction = FACTORIAL_INPUT["fraction"]
    stopping = FACTORIAL_INPUT["stopping"]

    class Meta:
        ref_name = "ExperimentInput"


class ExperimentBudgetSerializer(serializers.Serializer):
    max_tokens_total = serializers.IntegerField(allow_null=True)
    max_cost_total = serializers.DecimalField(max_digits=20, decimal_places=10, allow_null=True)
    spent_tokens = serializers.IntegerField(help_text="by finished calls")
    spent_cost = serializers.DecimalField(max_digits=20, decimal_places=10)
    reserved_tokens = serializers.IntegerField(help_text="what calls in flight could spend")
    reserved_cost = serializers.DecimalField(max_digits=20, decimal_places=10)
    exhausted_at = InstantField(allow_null=True, help_text="when a call was refused")

    class Meta:
        ref_name = "ExperimentBudget"


class ProgressSerializer(serializers.Serializer):
    """Counted from the first turn (a branch's earlier turns are not the experiment's)."""

    worlds = serializers.IntegerField()
    turns_committed = serializers.IntegerField()
    turns_planned = serializers.IntegerField()
    measurements_done = serializers.IntegerField()
    measurements_planned = serializers.IntegerField()

    class Meta:
        ref_name = "ExperimentIndexProgress"


class DetailProgressSerializer(ProgressSerializer):
    eta_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="seconds until the remaining turns commit, by the estimate's time model "
        "(the calls per turn so far at the models' observed median latency, worlds side by "
        "side as the limits allow); null when nothing has committed yet, a model's latency "
        "is unknown or the experiment is not running",
    )
    judges_waiting = serializers.IntegerField(
        help_text="judgings whose judge call waits in a provider batch (a judge source declaring "
        "interface.batch): their turns stay unmeasured, not failed, until the batch ends"
    )
    judge_batches = serializers.IntegerField(
        help_text="the provider batches holding those judge calls (requests not sent yet, "
        "gathered at the next batch poll, count none)"
    )

    class Meta:
        ref_name = "ExperimentProgress"


class ExperimentWorldSerializer(serializers.Serializer):
    slug = LabelOutField()
    arm = LabelOutField()
    replicate = serializers.IntegerField()
    current_turn = serializers.IntegerField()

    class Meta:
        ref_name = "ExperimentWorld"


class FailedWorldSerializer(serializers.Serializer):
    slug = LabelOutField()
    arm = LabelOutField()
    replicate = serializers.IntegerField()
    turn = serializers.IntegerField(help_text="the last turn it committed")

    class Meta:
        ref_name = "ExperimentFailedWorld"


class DesignInterventionSerializer(serializers.Serializer):
    turn = serializers.IntegerField()
    patch = JSONObjectField(help_text="a WorldPatch")
    note = serializers.CharField()

    class Meta:
        ref_name = "ExperimentDesignIntervention"


class DesignArmSerializer(serializers.Serializer):
    class ScenarioRef(serializers.Serializer):
        hash = serializers.CharField()

        class Meta:
            ref_name = "ExperimentDesignScenarioRef"

    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    scenario_ref = ScenarioRef()
    interventions = DesignInterventionSerializer(many=True)

    class Meta:
        ref_name = "ExperimentDesignArm"


class DesignBranchSerializer(serializers.Serializer):
    world = LabelOutField()
    turn = serializers.IntegerField()

    class Meta:
        ref_name = "ExperimentDesignBranch"


class DesignReplaySerializer(serializers.Serializer):
    experiment = LabelOutField()
    mode = serializers.ChoiceField(choices=["replay_strict", "replay_then_live"])

    class Meta:
        ref_name = "ExperimentDesignReplay"


class DesignBudgetSerializer(serializers.Serializer):
    max_cost_total = serializers.CharField(allow_null=True, help_text="a decimal")
    max_tokens_total = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "ExperimentDesignBudget"


class ExperimentDesignSerializer(serializers.Serializer):
    """The design as validated (``ExperimentDesign``): every reference a hash, every optional
    part null when not given."""

    slug = LabelOutField()
    name = serializers.CharField()
    description = serializers.CharField()
    arms = DesignArmSerializer(many=True)
    control = LabelOutField()
    replicates = serializers.IntegerField()
    turns = serializers.IntegerField(help_text="turns each world runs after its first turn")
    first_turn = serializers.IntegerField(help_text="the baseline: 0, or the branch's turn")
    metrics = serializers.ListField(child=serializers.CharField(), help_text="metric hashes")
    seed = serializers.IntegerField()
    start_time = serializers.CharField(allow_null=True)
    budget = DesignBudgetSerializer(allow_null=True)
    branch_from = DesignBranchSerializer(allow_null=True)
    replay_from = DesignReplaySerializer(allow_null=True)
    primary = serializers.CharField(allow_null=True, help_text="the primary metric's hash")
    reuse = serializers.ChoiceField(
        choices=list(REUSE_MODES), help_text="every world's reuse (docs/costs.md)"
    )
    mode = serializers.ChoiceField(
        choices=list(EXPERIMENT_MODES), help_text="online or batch (docs/costs.md)"
    )
    factorial = described(FACTORIAL_OUT_SCHEMA, allow_null=True)
    stopping = described(STOPPING_OUT_SCHEMA, allow_null=True)

    class Meta:
        ref_name = "ExperimentDesign"

    def to_representation(self, instance: Any) -> Any:
        design = instance if isinstance(instance, ExperimentDesign) else None
        if design is None:
            raise TypeError("an ExperimentDesign is serialized")
        data = design.public_json()
        return super().to_representation(data)


class BatchProgressSerializer(serializers.Serializer):
    ticks = serializers.IntegerField(help_text="provider batches its worlds' requests went in")
    attempts_waiting = serializers.IntegerField(help_text="attempts parked now, no worker held")
    requests_pending = serializers.IntegerField(help_text="requests waiting in a batch")


class ArmScenarioSerializer(serializers.Serializer):
    scenario_hash = HashOutField()
    scenario_names = serializers.ListField(
        child=LabelOutField(), help_text="the scenario names that point at scenario_hash now"
    )

    class Meta:
        ref_name = "ArmScenario"


class ExperimentSerializer(serializers.Serializer):
    slug = LabelOutField()
    name = serializers.CharField()
    description = serializers.CharField()
    design = ExperimentDesignSerializer()
    status = serializers.ChoiceField(choices=STATUSES)
    progress = DetailProgressSerializer()
    budget = ExperimentBudgetSerializer(allow_null=True, help_text="null: no budget")
    tokens = serializers.IntegerField()
    cost = serializers.DecimalField(
        max_digits=20, decimal_places=10, allow_null=True, help_text="null when a call has no price"
    )
    calls_reused = serializers.IntegerField(
        help_text="LLM calls answered from a recorded call (reuse): nothing sent"
    )
    tokens_reused = serializers.IntegerField(help_text="the tokens of those calls, not spent")
    cost_saved = serializers.DecimalField(
        max_digits=20,
        decimal_places=10,
        allow_null=True,
        help_text="what those calls cost when they were sent; null when one had no price",
    )
    failed_worlds = FailedWorldSerializer(many=True)
    batch = BatchProgressSerializer(
        allow_null=True, help_text="batch mode's progress (docs/costs.md); null online"
    )
    arm_scenarios = serializers.DictField(
        child=ArmScenarioSerializer(),
        help_text="per arm label, its scenario's hash and the names that point at it now",
    )
    worlds = ExperimentWorldSerializer(many=True)
    created_by = serializers.CharField()
    started_at = InstantField()
    finished_at = InstantField(allow_null=True)

    class Meta:
        ref_name = "Experiment"


class ExperimentSummarySerializer(serializers.Serializer):
    slug = LabelOutField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=STATUSES)
    worlds = serializers.IntegerField()
    arms = serializers.ListField(child=serializers.CharField())
    replicates = serializers.IntegerField()
    turns = serializers.IntegerField()
    first_turn = serializers.IntegerField(help_text="the baseline: 0, or the branch's turn")
    progress = ProgressSerializer()
    failed_worlds = serializers.IntegerField(help_text="worlds that stopped short of their turns")
    tokens = serializers.IntegerField()
    cost = serializers.DecimalField(
        max_digits=20, decimal_places=10, allow_null=True, help_text="null when a call has no price"
    )
    created_by = serializers.CharField()
    started_at = InstantField()

    class Meta:
        ref_name = "ExperimentSummary"


class ExperimentCollectionApi(APIView):
    """GET lists experiments; POST creates one: its worlds, their turns and measurements."""

    class ListOutputSerializer(serializers.Serializer):
        results = ExperimentSummarySerializer(many=True)

        class Meta:
            ref_name = "ExperimentListOutput"

    @extend_schema(operation_id="experiment_list", responses={200: ListOutputSerializer})
    def get(self, request: Request) -> Response:
        return Response(self.ListOutputSerializer({"results": selectors.experiment_list()}).data)

    @extend_schema(
        operation_id="experiment_create",
        request=ExperimentInputSerializer,
        responses={201: ExperimentSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        body = validate_body(ExperimentInputSerializer, request)
        made = services.experiment_create(data=body, created_by=request.user.get_username())
        found = selectors.experiment_get(slug=made.slug)
        return Response(ExperimentSerializer(found).data, status=status.HTTP_201_CREATED)


class ExperimentEstimateInputSerializer(ExperimentInputSerializer):
    """The same design as creating it takes, and optionally ``power``."""

    field_codes = {**ExperimentInputSerializer.field_codes, "power": "invalid_power"}
    power = power_input_field()

    class Meta:
        ref_name = "ExperimentEstimateInput"


class ExperimentEstimateApi(APIView):
    """POST a design: the most it could spend (calls, tokens, cost), and with ``power`` the
    replicates it needs; nothing written."""

    @extend_schema(
        operation_id="experiment_estimate",
        request=ExperimentEstimateInputSerializer,
        responses={200: EstimateSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        body = validate_body(ExperimentEstimateInputSerializer, request)
        return Response(EstimateSerializer(experiment_estimate(data=body)).data)


class ExperimentDetailApi(APIView):
    """GET an experiment: design, status, progress, tokens, cost, failed worlds."""

    @extend_schema(
        operation_id="experiment_get",
        parameters=[EXPERIMENT_PATH],
        responses={200: ExperimentSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(ExperimentSerializer(selectors.experiment_get(slug=slug)).data)


class ExperimentCancelApi(APIView):
    """POST cancels what has not started (queued turns); what runs ends as it would have."""

    @extend_schema(
        operation_id="experiment_cancel",
        parameters=[EXPERIMENT_PATH],
        request=None,
        responses={200: ExperimentSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        services.experiment_cancel(slug=slug)
        return Response(ExperimentSerializer(selectors.experiment_get(slug=slug)).data)


class ExperimentReplicatesApi(APIView):
    """POST adds replicates to every arm (their seeds continue the experiment's)."""

    class InputSerializer(StrictInputSerializer):
        field_codes = {"count": "invalid_count"}
        count = StrictIntegerField(min_value=1, help_text="replicates to add to every arm")

        class Meta:
            ref_name = "ExperimentReplicatesInput"

    @extend_schema(
        operation_id="experiment_add_replicates",
        parameters=[EXPERIMENT_PATH],
        request=InputSerializer,
        responses={200: ExperimentSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        body = validate_body(self.InputSerializer, request)
        services.experiment_add_replicates(
            slug=slug, count=body["count"], created_by=request.user.get_username()
        )
        return Response(ExperimentSerializer(selectors.experiment_get(slug=slug)).data)


class ExperimentMetricsApi(APIView):
    """POST adds metrics and measures every committed turn of the experiment's worlds (202)."""

    class InputSerializer(StrictInputSerializer):
        field_codes = {"metrics": "invalid_metrics"}
        metrics = StrictListField(child=described(METRIC_REF_SCHEMA), min_length=1)

        class Meta:
            ref_name = "ExperimentMetricsInput"

    @extend_schema(
        operation_id="experiment_add_metrics",
        parameters=[EXPERIMENT_PATH],
        request=InputSerializer,
        responses={202: ExperimentSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        body = validate_body(self.InputSerializer, request)
        services.experiment_add_metrics(
            slug=slug, metrics=body["metrics"], created_by=request.user.get_username()
        )
        found = selectors.experiment_get(slug=slug)
        return Response(ExperimentSerializer(found).data, status=status.HTTP_202_ACCEPTED)


# the results' shape is their dataclasses' (every field typed in the document)
ExperimentResultsSerializer = output_serializer(ExperimentResults, prefix="Experiment")


class ExperimentResultsApi(APIView):
    """GET the results: per metric and arm with 95% CIs; paired effects against control."""

    @extend_schema(
        operation_id="experiment_results",
        parameters=[EXPERIMENT_PATH],
        responses={200: ExperimentResultsSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        results = experiment_results.experiment_results(slug=slug)
        return Response(ExperimentResultsSerializer(results).data)


def _csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=experiment_results.EXPORT_COLUMNS, lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
        if buffer.tell() > 64_000:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _jsonl_lines(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    for row in rows:
        yield orjson.dumps(row) + b"\n"


class ExperimentExportApi(APIView):
    """GET every measurement of the experiment as tidy rows, streamed: CSV or JSON lines."""

    format_name = "csv"

    @extend_schema(
        operation_id="experiment_export",
        parameters=[EXPERIMENT_PATH],
        responses={200: OpenApiResponse(description="the rows, streamed"), **READ_ERRORS},
        exclude=True,
    )
    def get(self, request: Request, slug: str) -> StreamingHttpResponse:
        experiment, rows = experiment_results.export_rows(slug=slug)
        if self.format_name == "csv":
            response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv")
        else:
            response = StreamingHttpResponse(
                _jsonl_lines(rows), content_type="application/x-ndjson"
            )
        response["Content-Disposition"] = (
            f'attachment; filename="{experiment.slug}-measurements.{self.format_name}"'
        )
        return response


class ExperimentExportJsonlApi(ExperimentExportApi):
    format_name = "jsonl"
