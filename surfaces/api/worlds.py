"""REST API for worlds, turns and attempts (SPEC §9). One view per operation."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.errors import invalid
from surfaces.api.store import ERRORS, PAGING, PageSerializer, body_object
from worlds_app import selectors, services


def _int_param(raw: str | None, name: str) -> int:
    if raw is None or raw == "":
        raise invalid("invalid_query", name, "is required")
    try:
        value = int(raw)
    except ValueError:
        raise invalid("invalid_query", name, f"must be an integer, got {raw!r}") from None
    if value < 0:
        raise invalid("invalid_query", name, f"must be ≥ 0, got {value}")
    return value


class WorldCollectionApi(APIView):
    class InputSerializer(serializers.Serializer):
        slug = serializers.CharField()
        name = serializers.CharField(required=False)
        scenario_ref = serializers.JSONField(
            help_text='{"name": N} | {"hash": H} | {"data": <full scenario input>}'
        )
        start_time = serializers.DateTimeField(required=False)

    @extend_schema(parameters=PAGING, responses={200: PageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        return Response(selectors.world_list(params=request.query_params))

    @extend_schema(request=InputSerializer, responses={201: OpenApiTypes.OBJECT, **ERRORS})
    def post(self, request: Request) -> Response:
        world = services.world_create(data=body_object(request))
        return Response(selectors.world_get(slug=world.slug), status=201)


class WorldDetailApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, slug: str) -> Response:
        return Response(selectors.world_get(slug=slug))

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def delete(self, request: Request, slug: str) -> Response:
        record = services.world_delete(slug=slug, deleted_by=request.user.get_username())
        return Response(
            {
                "deleted": record.slug,
                "name": record.name,
                "label": record.label,
                "scenario_hash": record.scenario_hash,
                "final_turn": record.final_turn,
                "deleted_at": record.deleted_at,
            }
        )


class TurnEnqueueApi(APIView):
    class InputSerializer(serializers.Serializer):
        count = serializers.IntegerField(required=False, min_value=1, max_value=100)

    @extend_schema(
        request=InputSerializer,
        responses={
            202: inline_serializer(
                "TurnsQueued",
                {
                    "batch_id": serializers.UUIDField(),
                    "attempt_ids": serializers.ListField(child=serializers.UUIDField()),
                },
            ),
            **ERRORS,
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        data = body_object(request)
        unknown = sorted(k for k in data if k != "count")
        if unknown:
            raise invalid("invalid_input", unknown[0], 'unknown field; the body is {"count": n}')
        result = services.turn_attempt_enqueue(
            slug=slug, count=data.get("count", 1), requested_by=request.user.get_username()
        )
        return Response(result, status=202)


class TurnDetailApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, slug: str, number: int) -> Response:
        return Response(selectors.turn_get(slug=slug, number=number))


class WorldDiffApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", OpenApiTypes.INT, required=True),
            OpenApiParameter("to", OpenApiTypes.INT, required=True),
        ],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(
            selectors.world_diff(
                slug=slug,
                from_turn=_int_param(request.query_params.get("from"), "from"),
                to_turn=_int_param(request.query_params.get("to"), "to"),
            )
        )


class AttemptDetailApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, attempt_id: str) -> Response:
        return Response(selectors.attempt_get(attempt_id=attempt_id))
