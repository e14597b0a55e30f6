"""Two worlds side by side, turn by turn: ``GET /api/worlds/<slug>/compare/<other>/`` and the
shapes of its answer (a branch aligned with its parent by turn number)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from surfaces.api.branches import BranchFromSerializer
from surfaces.api.contract import (
    LABEL_SCHEMA,
    PAGING,
    READ_ERRORS,
    SLUG_PATH,
    HashOutField,
    LabelOutField,
    path_parameter,
)
from worlds_app.comparison import MAX_VALUE_CHARS, world_compare


class ValueDiffSerializer(serializers.Serializer):
    left = serializers.CharField(allow_null=True, allow_blank=True, help_text="null: absent")
    right = serializers.CharField(allow_null=True, allow_blank=True, help_text="null: absent")
    common_prefix_chars = serializers.IntegerField(
        help_text="characters both share before left/right begin (memories: whole lines)"
    )
    truncated = serializers.BooleanField(help_text=f"a side was cut to {MAX_VALUE_CHARS} chars")

    class Meta:
        ref_name = "CompareValueDiff"


class EntityDiffSerializer(serializers.Serializer):
    id = serializers.CharField()
    present_in = serializers.ChoiceField(choices=["both", "left", "right"])
    state = ValueDiffSerializer(allow_null=True)
    memory = ValueDiffSerializer(allow_null=True, help_text="what follows the shared lines")
    other_fields = serializers.ListField(
        child=serializers.CharField(), help_text="other entity fields that differ"
    )

    class Meta:
        ref_name = "CompareEntityDiff"


class EnvironmentDiffSerializer(ValueDiffSerializer):
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute

    class Meta:
        ref_name = "CompareEnvironmentDiff"


class ToolCallDiffSerializer(serializers.Serializer):
    left = serializers.ListField(child=serializers.CharField(), help_text="subject: tool {args}")
    right = serializers.ListField(child=serializers.CharField())
    differ = serializers.BooleanField()

    class Meta:
        ref_name = "CompareToolCalls"


class TurnComparisonSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    identical = serializers.BooleanField(help_text="the states are equal")
    left_state_hash = HashOutField()
    right_state_hash = HashOutField()
    entities = EntityDiffSerializer(many=True)
    environments = EnvironmentDiffSerializer(many=True)
    tool_calls = ToolCallDiffSerializer(help_text="each side's tool calls in that turn")

    class Meta:
        ref_name = "CompareTurn"


class MetricTurnSerializer(serializers.Serializer):
    turn = serializers.IntegerField()
    world = serializers.FloatField(allow_null=True, help_text="null: not measured, or an error")
    other = serializers.FloatField(allow_null=True)
    world_error = serializers.CharField(allow_null=True, help_text="the error's code, if any")
    other_error = serializers.CharField(allow_null=True)

    class Meta:
        ref_name = "CompareMetricTurn"


class MetricComparisonSerializer(serializers.Serializer):
    hash = HashOutField()
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    kind = serializers.CharField()
    aggregate = serializers.CharField()
    world_value = serializers.FloatField(allow_null=True, help_text="the left world's aggregate")
    other_value = serializers.FloatField(allow_null=True, help_text="the right world's aggregate")
    turns = MetricTurnSerializer(many=True, help_text="each measured turn, oldest first")

    class Meta:
        ref_name = "CompareMetric"


class WorldCompareApi(APIView):
    class OutputSerializer(serializers.Serializer):
        world = LabelOutField(help_text="the left world")
        other = LabelOutField(help_text="the right world")
        world_current_turn = serializers.IntegerField()
        other_current_turn = serializers.IntegerField()
        longer = serializers.ChoiceField(
            choices=["world", "other"], allow_null=True, help_text="which has more turns"
        )
        common_turns = serializers.IntegerField(help_text="how many turn numbers both have")
        first_common_turn = serializers.IntegerField(
            allow_null=True, help_text="0, unless a branch's parent (and its turns) is gone"
        )
        world_branched_from = BranchFromSerializer(allow_null=True)
        other_branched_from = BranchFromSerializer(allow_null=True)
        first_divergent_turn = serializers.IntegerField(allow_null=True)
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        turns = TurnComparisonSerializer(many=True)
        metrics = MetricComparisonSerializer(
            many=True, help_text="the metrics measured on both worlds, by label"
        )

        class Meta:
            ref_name = "WorldCompareOutput"

    @extend_schema(
        operation_id="world_compare",
        parameters=[SLUG_PATH, path_parameter("other", LABEL_SCHEMA, "the other world"), *PAGING],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str, other: str) -> Response:
        comparison = world_compare(slug=slug, other=other, params=request.query_params)
        return Response(self.OutputSerializer(comparison).data)
