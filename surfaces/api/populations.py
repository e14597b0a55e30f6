"""A population's coverage (docs/populations.md): the discrepancy of its sample, each axis's
marginal against its target, and its first agents as the template renders them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scenarios_app.population_selectors import AGENTS_SHOWN, population_coverage
from surfaces.api.contract import (
    HASH_SCHEMA,
    READ_ERRORS,
    HashOutField,
    JSONObjectField,
    LabelOutField,
    path_parameter,
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
