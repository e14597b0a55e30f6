"""A population's coverage (docs/populations.md): the discrepancy of its sample, each axis's
marginal against its target, and its first agents as the template renders them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.population import MAX_BIOGRAPHY_PROMPT
from scenarios_app.population_selectors import AGENTS_SHOWN, population_coverage
from surfaces.api.contract import (
    HASH_OR_LABEL_SCHEMA,
    HASH_SCHEMA,
    READ_ERRORS,
    WRITE_ERRORS,
    HashOutField,
    JSONObjectField,
    LabelOutField,
    StrictInputSerializer,
    described,
    path_parameter,
    validate_body,
)
from worlds_app.services.biography_runs import (
    biography_run_create,
    biography_run_get,
    biography_run_read,
)


class CoverageSerializer(serializers.Serializer):
    measure = serializers.CharField(help_text="the discrepancy's name")
    value = serializers.FloatField(allow_null=True, help_text="lower is more even")
    method = serializers.CharField()
    library = serializers.CharField()

    class Meta:
        ref_name = "PopulationCoverage"


class MarginalCellSerializer(serializers.Serializer):
    bin = serializers.CharField(help_text="a category, or a numeric bin low–high")
    target = serializers.FloatField(help_text="the share the axis asks for")
    observed = serializers.FloatField(help_text="the share of the drawn agents")

    class Meta:
        ref_name = "PopulationMarginalCell"


class MarginalSerializer(serializers.Serializer):
    axis = LabelOutField()
    cells = MarginalCellSerializer(many=True)
    max_gap = serializers.FloatField(help_text="the largest |observed − target|")

    class Meta:
        ref_name = "PopulationMarginal"


class AgentSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="1…size")
    id = serializers.CharField(help_text="as rendered (normalized when a scenario includes it)")
    name = serializers.CharField()
    state = serializers.CharField()
    goal = serializers.CharField()
    memory = serializers.CharField()
    values = JSONObjectField(help_text="axis name → the agent's value")

    class Meta:
        ref_name = "PopulationAgent"


class PopulationCoverageSerializer(serializers.Serializer):
    hash = HashOutField()
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    size = serializers.IntegerField()
    sampler = serializers.CharField()
    seed = serializers.IntegerField()
    axes = serializers.ListField(child=LabelOutField())
    coverage = CoverageSerializer()
    marginals = MarginalSerializer(many=True)
    agents = AgentSerializer(many=True, help_text=f"the first {AGENTS_SHOWN}")

    class Meta:
        ref_name = "PopulationCoverageOutput"


class PopulationCoverageApi(APIView):
    """GET a population's coverage of its axes, its marginals against their targets, and its
    first agents."""

    @extend_schema(
        operation_id="populations_coverage",
        parameters=[path_parameter("hash", HASH_SCHEMA, "population hash")],
        responses={200: PopulationCoverageSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, hash: str) -> Response:
        return Response(PopulationCoverageSerializer(population_coverage(hash=hash)).data)


class BiographiesInputSerializer(StrictInputSerializer):
    field_codes = {
        "source": "invalid_biographies",
        "prompt": "invalid_biographies",
        "entity_template": "invalid_biographies",
        "budget": "invalid_biographies",
    }
    source = described(  # type: ignore[assignment]  # the API's field name shadows a Field attribute
        HASH_OR_LABEL_SCHEMA,
        help_text="the stored llm_chat_completions source that writes, by hash or label",
    )
    prompt = described(
        {"type": "string", "minLength": 1, "maxLength": MAX_BIOGRAPHY_PROMPT},
        help_text="asked once per agent, with {{index}} and {{axes.<name>}}",
    )
    entity_template = described(
        {"type": "object", "additionalProperties": {"type": "string"}},
        required=False,
        help_text="the new version's template (it may use {{biography}}); else the population's",
    )
    budget = described(
        {
            "type": "object",
            "properties": {
                "max_tokens_total": {"type": "integer", "minimum": 1},
                "max_cost_total": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            },
            "additionalProperties": False,
        },
        required=False,
        help_text="limits over this request's calls: a call that could pass one is not sent "
        "(409 budget_exhausted, nothing stored)",
    )

    class Meta:
        ref_name = "PopulationBiographiesInput"


class BiographiesOutputSerializer(serializers.Serializer):
    hash = HashOutField(help_text="the new version, holding the biographies")
    was_new = serializers.BooleanField()
    derived_from = HashOutField(help_text="the population the biographies were written for")
    source = JSONObjectField(help_text='{"hash": H}: the source that wrote them')  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    agents = serializers.IntegerField(help_text="one call and one biography per agent")
    llm_calls = serializers.ListField(
        child=serializers.UUIDField(), help_text="the traced calls, agent 1 first"
    )
    cost = serializers.CharField(
        allow_null=True, help_text="the calls' total cost (USD); null when a price is unknown"
    )

    class Meta:
        ref_name = "PopulationBiographiesOutput"


RUN_STATUSES = ["queued", "running", "completed", "failed"]


class BiographyErrorSerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="biography_failed, budget_exhausted, worker_lost, or a check's code"
    )
    message = serializers.CharField()
    details = JSONObjectField(help_text="field, agent (1…size), failure_class…")

    class Meta:
        ref_name = "BiographyRunError"


class BiographyRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField(help_text="where to read the run (poll until it has ended)")
    population = HashOutField(help_text="the population the biographies are written for")
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    source = JSONObjectField(help_text='{"hash": H, "label": L}: the source asked')  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    status = serializers.ChoiceField(choices=RUN_STATUSES)
    agents = serializers.IntegerField(help_text="one call and one biography per agent")
    done = serializers.IntegerField(help_text="agents with their biography so far")
    tries = serializers.IntegerField(help_text="tasks that have run it (a killed worker's: again)")
    result = BiographiesOutputSerializer(
        allow_null=True, help_text="the new version, once completed"
    )
    error = BiographyErrorSerializer(
        allow_null=True, help_text="why it failed (nothing stored); null otherwise"
    )
    note = serializers.CharField(help_text="why an open run was tried again, if it was")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    created_by = serializers.CharField()

    class Meta:
        ref_name = "BiographyRun"


class PopulationBiographiesApi(APIView):
    """POST (operators) asks an LLM source for one biography per agent of the population: the
    request is checked whole (400 naming the field, no call made), then accepted (202) and run
    by a worker, which stores the version holding them (docs/populations.md, "Biographies
    written by a model"); read the run at its ``url`` until it has ended."""

    @extend_schema(
        operation_id="populations_biographies",
        parameters=[path_parameter("hash", HASH_SCHEMA, "population hash")],
        request=BiographiesInputSerializer,
        responses={202: BiographyRunSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, hash: str) -> Response:
        body = validate_body(BiographiesInputSerializer, request)
        run = biography_run_create(hash=hash, data=body, created_by=request.user.get_username())
        read = biography_run_read(run)
        return Response(
            BiographyRunSerializer(read).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": read["url"]},
        )


class BiographyRunApi(APIView):
    """GET a biographies run: its status, its agents done so far, then the new version it
    stored or why it failed."""

    @extend_schema(
        operation_id="biography_run_read",
        parameters=[path_parameter("id", {"type": "integer", "minimum": 1}, "run id")],
        responses={200: BiographyRunSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, id: int) -> Response:
        return Response(BiographyRunSerializer(biography_run_read(biography_run_get(id))).data)
