"""Interventions of a world (docs/worlds.md, "Interventions"): list and add; delete a pending
one. Operators write; any signed-in user reads."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from surfaces.api.contract import (
    READ_ERRORS,
    SLUG_PATH,
    WRITE_ERRORS,
    InstantField,
    JSONObjectField,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    path_parameter,
    validate_body,
)
from worlds_app import selectors
from worlds_app.services import interventions as services

INTERVENTION_STATUSES = ("pending", "consumed")
ID_PATH = path_parameter("intervention_id", {"type": "integer", "minimum": 1}, "intervention id")


class PatchInterventionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    operator = serializers.CharField()
    note = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "PatchIntervention"


class InterventionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    world = LabelOutField()
    turn = serializers.IntegerField(help_text="the turn it joins as patch_seq 1")
    patch = JSONObjectField(help_text="a WorldPatch")
    note = serializers.CharField(allow_blank=True)
    created_by = serializers.CharField(help_text="the operator who added it")
    created_at = InstantField()
    status = serializers.ChoiceField(choices=INTERVENTION_STATUSES)
    consumed_by_attempt = serializers.UUIDField(
        allow_null=True, help_text="the attempt whose committed turn applied it"
    )
    consumed_at = InstantField(allow_null=True)

    class Meta:
        ref_name = "Intervention"


class InterventionInputSerializer(StrictInputSerializer):
    field_codes = {"patch": "invalid_patch", "turn": "invalid_turn"}
    patch = JSONObjectField(help_text="a WorldPatch (GET /api/world-patch-schema/)")
    note = StrictCharField(
        required=False, allow_blank=True, max_length=2000, help_text="why (shown in provenance)"
    )
    turn = StrictIntegerField(
        required=False,
        min_value=1,
        help_text="the turn it joins (default: the next turn that has not started)",
    )

    class Meta:
        ref_name = "InterventionInput"


class InterventionCollectionApi(APIView):
    """GET lists a world's interventions (pending and consumed); POST adds one."""

    InputSerializer = InterventionInputSerializer

    class ListOutputSerializer(serializers.Serializer):
        world = LabelOutField()
        results = InterventionSerializer(many=True)

        class Meta:
            ref_name = "InterventionListOutput"

    @extend_schema(
        operation_id="intervention_list",
        parameters=[SLUG_PATH],
        responses={200: ListOutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        rows = selectors.intervention_list(slug=slug)
        return Response(self.ListOutputSerializer({"world": slug, "results": rows}).data)

    @extend_schema(
        operation_id="intervention_create",
        parameters=[SLUG_PATH],
        request=InterventionInputSerializer,
        responses={201: InterventionSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        body = validate_body(self.InputSerializer, request)
        made = services.intervention_create(
            slug=slug,
            data=cast(services.InterventionInput, body),
            created_by=request.user.get_username(),
        )
        row: dict[str, Any] = selectors.intervention_row(made)
        return Response(InterventionSerializer(row).data, status=status.HTTP_201_CREATED)


class InterventionDetailApi(APIView):
    """DELETE removes a pending intervention (204); a consumed one is history (409)."""

    @extend_schema(
        operation_id="intervention_delete",
        parameters=[SLUG_PATH, ID_PATH],
        request=None,
        responses={204: None, **WRITE_ERRORS},
    )
    def delete(self, request: Request, slug: str, intervention_id: int) -> Response:
        services.intervention_delete(slug=slug, intervention_id=intervention_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
