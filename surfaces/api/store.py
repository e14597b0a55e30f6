"""REST API for the scenario store (SPEC §9). One view per operation; services do the work.

Request bodies are validated by the services themselves (one validator for API, admin and CLI);
the serializers here describe the shapes for the generated OpenAPI schema.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.component_validation import type_name
from chukwa_core.errors import invalid
from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA, world_patch_schema_hash
from scenarios_app import selectors, services
from scenarios_app.models import COLLECTION_SEGMENTS, ComponentKind

ERROR_SCHEMA = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorBody",
            {
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "details": serializers.DictField(),
            },
        )
    },
)
ERRORS = {
    400: ERROR_SCHEMA,
    401: ERROR_SCHEMA,
    403: ERROR_SCHEMA,
    404: ERROR_SCHEMA,
    409: ERROR_SCHEMA,
}

COLLECTIONS: dict[str, ComponentKind] = COLLECTION_SEGMENTS


def body_object(request: Request) -> dict[str, Any]:
    data = request.data
    if not isinstance(data, dict):
        raise invalid("invalid_input", "body", f"must be a JSON object, got {type_name(data)}")
    return data


def _with_operator(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    # Who did it: the signed-in user unless the body names an operator.
    if "operator" not in data:
        return {**data, "operator": request.user.get_username()}
    return data


class ComponentPutInputSerializer(serializers.Serializer):
    content = serializers.JSONField(
        help_text="The component content; sub-references may be inline."
    )


class ComponentPutOutputSerializer(serializers.Serializer):
    hash = serializers.CharField()
    was_new = serializers.BooleanField()
    workflow_hash = serializers.CharField(required=False)
    new_components = serializers.DictField(child=serializers.IntegerField(), required=False)


class ComponentOutputSerializer(serializers.Serializer):
    kind = serializers.CharField()
    hash = serializers.CharField()
    content = serializers.JSONField()
    created_at = serializers.DateTimeField()


class PageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()
    results = serializers.ListField(child=serializers.DictField())


PAGING = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="1…200, default 50"),
    OpenApiParameter("offset", OpenApiTypes.INT, description="≥ 0, default 0"),
]


class ComponentCollectionApi(APIView):
    kind: ComponentKind = ComponentKind.JSON_SCHEMA

    @extend_schema(parameters=PAGING, responses={200: PageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        limit, offset = selectors.parse_paging(request.query_params)
        return Response(selectors.component_list(kind=self.kind, limit=limit, offset=offset))

    @extend_schema(
        request=ComponentPutInputSerializer,
        responses={200: ComponentPutOutputSerializer, 201: ComponentPutOutputSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = body_object(request)
        unknown = sorted(k for k in data if k != "content")
        if unknown:
            raise invalid("invalid_input", unknown[0], 'unknown field; the body is {"content": …}')
        if "content" not in data:
            raise invalid("invalid_input", "content", "is required")
        result = services.component_put(kind=self.kind, content=data["content"])
        return Response(result, status=status.HTTP_201_CREATED if result["was_new"] else 200)


class ComponentDetailApi(APIView):
    kind: ComponentKind = ComponentKind.JSON_SCHEMA

    @extend_schema(responses={200: ComponentOutputSerializer, **ERRORS})
    def get(self, request: Request, hash: str) -> Response:
        return Response(selectors.component_get(kind=self.kind, hash=hash))


class ComponentUsesApi(APIView):
    kind: ComponentKind = ComponentKind.JSON_SCHEMA

    @extend_schema(
        responses={
            200: inline_serializer(
                "ComponentUses",
                {
                    "kind": serializers.CharField(),
                    "hash": serializers.CharField(),
                    "workflows": serializers.ListField(child=serializers.DictField()),
                    "cognition_profiles": serializers.ListField(child=serializers.DictField()),
                    "scenarios": serializers.ListField(child=serializers.DictField()),
                },
            ),
            **ERRORS,
        }
    )
    def get(self, request: Request, hash: str) -> Response:
        return Response(selectors.component_uses(kind=self.kind, hash=hash))


class AssembleResultSerializer(serializers.Serializer):
    scenario_hash = serializers.CharField()
    was_new_scenario = serializers.BooleanField()
    cognition_profiles = serializers.DictField(child=serializers.CharField())
    environments = serializers.DictField(child=serializers.CharField())
    entities = serializers.ListField(child=serializers.CharField())
    new_components = serializers.DictField(child=serializers.IntegerField())
    derivation_id = serializers.IntegerField()
    name = serializers.CharField(allow_null=True)


class ScenarioAssembleApi(APIView):
    class InputSerializer(serializers.Serializer):
        scenario_slug = serializers.CharField()
        description = serializers.CharField()
        chronon_seconds = serializers.IntegerField(min_value=1, max_value=31_536_000)
        cognition_profiles = serializers.DictField(
            child=serializers.JSONField(), help_text='label → {"hash": H} | {"inline": profile}'
        )
        environments = serializers.DictField(
            child=serializers.JSONField(), help_text='label → {"hash": H} | {"inline": text}'
        )
        entities = serializers.ListField(
            child=serializers.JSONField(), help_text='[{"hash": H} | {"inline": entity}, …]'
        )
        name = serializers.CharField(required=False)
        operator = serializers.CharField(required=False)
        note = serializers.CharField(required=False)
        metadata = serializers.DictField(required=False)

    @extend_schema(
        request=InputSerializer,
        responses={200: AssembleResultSerializer, 201: AssembleResultSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        result = services.scenario_assemble(data=_with_operator(request, body_object(request)))
        return Response(result, status=201 if result["was_new_scenario"] else 200)


class ScenarioForkApi(APIView):
    class InputSerializer(serializers.Serializer):
        primary_parent = serializers.JSONField(help_text='{"name": N} | {"hash": H}')
        changes = serializers.JSONField(
            help_text="scenario_slug?, description?, chronon_seconds?, cognition_profile_upserts, "
            "cognition_profile_removals, environment_upserts, environment_removals, entities?"
        )
        additional_parents = serializers.ListField(
            child=serializers.JSONField(), required=False, help_text='[{"hash": H, "role": R}]'
        )
        name = serializers.CharField(required=False)
        operator = serializers.CharField(required=False)
        note = serializers.CharField(required=False)
        metadata = serializers.DictField(required=False)

    @extend_schema(
        request=InputSerializer,
        responses={200: AssembleResultSerializer, 201: AssembleResultSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        result = services.scenario_fork(data=_with_operator(request, body_object(request)))
        return Response(result, status=201 if result["was_new_scenario"] else 200)


class ScenarioListApi(APIView):
    @extend_schema(
        parameters=[
            *PAGING,
            OpenApiParameter("created_after", OpenApiTypes.DATETIME),
            OpenApiParameter("created_before", OpenApiTypes.DATETIME),
            OpenApiParameter("has_name", OpenApiTypes.BOOL),
            OpenApiParameter("has_parents", OpenApiTypes.BOOL),
            *[OpenApiParameter(key, OpenApiTypes.STR) for key in selectors.USES_FILTERS],
        ],
        responses={200: PageSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(selectors.scenario_list(params=request.query_params))


class ScenarioDetailApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, ref: str) -> Response:
        data = selectors.scenario_get(ref=ref)
        data["derivations"] = selectors.scenario_derivations(scenario_hash=data["hash"])
        return Response(data)


class ScenarioLineageApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, ref: str) -> Response:
        return Response(selectors.scenario_lineage(ref=ref))


class ScenarioNameApi(APIView):
    class PutInputSerializer(serializers.Serializer):
        hash = serializers.CharField()
        expected_current_hash = serializers.CharField(
            required=False, allow_null=True, help_text="compare-and-set; null means 'must be unset'"
        )
        note = serializers.CharField(required=False)
        operator = serializers.CharField(required=False)

    class DeleteInputSerializer(serializers.Serializer):
        expected_current_hash = serializers.CharField(required=False)
        note = serializers.CharField(required=False)
        operator = serializers.CharField(required=False)

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, name: str) -> Response:
        return Response(selectors.scenario_name_get(name=name))

    @extend_schema(request=PutInputSerializer, responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def put(self, request: Request, name: str) -> Response:
        data = _with_operator(request, body_object(request))
        allowed = {"hash", "expected_current_hash", "note", "operator"}
        unknown = sorted(k for k in data if k not in allowed)
        if unknown:
            raise invalid(
                "invalid_input", unknown[0], f"unknown field; allowed: {', '.join(sorted(allowed))}"
            )
        if "hash" not in data:
            raise invalid("invalid_input", "hash", "is required")
        services.scenario_name_set(
            name=name,
            scenario_hash=data["hash"],
            expected_current_hash=data.get("expected_current_hash", services.UNSET),
            note=data.get("note", ""),
            operator=data["operator"],
        )
        return Response(selectors.scenario_name_get(name=name))

    @extend_schema(request=DeleteInputSerializer, responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def delete(self, request: Request, name: str) -> Response:
        # An absent body parses as an empty object; [] or null is a client error, not "no body".
        data = _with_operator(request, dict(body_object(request)))
        allowed = {"expected_current_hash", "note", "operator"}
        unknown = sorted(k for k in data if k not in allowed)
        if unknown:
            raise invalid(
                "invalid_input", unknown[0], f"unknown field; allowed: {', '.join(sorted(allowed))}"
            )
        services.scenario_name_unset(
            name=name,
            expected_current_hash=data.get("expected_current_hash", services.UNSET),
            note=data.get("note", ""),
            operator=data["operator"],
        )
        return Response(selectors.scenario_name_get(name=name))


class WorldPatchSchemaApi(APIView):
    @extend_schema(
        responses={
            200: inline_serializer(
                "WorldPatchSchema",
                {"hash": serializers.CharField(), "schema": serializers.DictField()},
            )
        }
    )
    def get(self, request: Request) -> Response:
        return Response({"hash": world_patch_schema_hash(), "schema": WORLD_PATCH_SCHEMA})
