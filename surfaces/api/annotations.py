"""REST API for annotations: any signed-in user annotates; its author or an operator
changes or deletes it. One view per path, validate → one service or selector → serialize."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from surfaces.api.contract import (
    LABEL_PATTERN,
    LABEL_SCHEMA,
    MAX_TURN_NUMBER,
    PAGING,
    READ_ERRORS,
    UUID_PATTERN,
    WRITE_ERRORS,
    InstantField,
    LabelField,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    described,
    uuid_path,
    validate_body,
)
from surfaces.permissions import SignedInAnnotates
from worlds_app import selectors
from worlds_app.models import AnnotationTarget, AnnotationValueKind
from worlds_app.services import annotations as services

VALUE_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "number"},
        {"type": "string", "pattern": LABEL_PATTERN},
        {"type": "boolean"},
    ]
}
UUID_SCHEMA: dict[str, Any] = {"type": "string", "format": "uuid", "pattern": UUID_PATTERN}
TARGET_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"attempt": UUID_SCHEMA},
            "required": ["attempt"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "turn": {
                    "type": "object",
                    "properties": {
                        "world": LABEL_SCHEMA,
                        "number": {"type": "integer", "minimum": 0, "maximum": MAX_TURN_NUMBER},
                    },
                    "required": ["world", "number"],
                    "additionalProperties": False,
                }
            },
            "required": ["turn"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"llm_call": UUID_SCHEMA},
            "required": ["llm_call"],
            "additionalProperties": False,
        },
    ]
}
VALUE_HELP = (
    "a number, a label or a boolean; all annotations of one name hold one kind of value "
    "(the first one fixes it)"
)
COMMENT_HELP = "at most 4 KiB of UTF-8"


@extend_schema_field(VALUE_SCHEMA)
class AnnotationValueOutField(serializers.Field):
    def to_representation(self, value: Any) -> Any:
        return value


class AnnotationTurnSerializer(serializers.Serializer):
    world = LabelOutField()
    number = serializers.IntegerField()

    class Meta:
        ref_name = "AnnotationTurn"


ANNOTATION_TARGET_KINDS = tuple(AnnotationTarget.values)


class AnnotationTargetSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=ANNOTATION_TARGET_KINDS)
    attempt = serializers.UUIDField(allow_null=True)
    turn = AnnotationTurnSerializer(allow_null=True)
    llm_call = serializers.UUIDField(allow_null=True)

    class Meta:
        ref_name = "AnnotationTarget"


class AnnotationSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    target = AnnotationTargetSerializer()
    name = LabelOutField()
    value_kind = serializers.ChoiceField(choices=AnnotationValueKind.values)
    value = AnnotationValueOutField(help_text=VALUE_HELP)
    comment = serializers.CharField(allow_blank=True)
    author = serializers.CharField(help_text="the username of who wrote it")
    created_at = InstantField()
    updated_at = InstantField()

    class Meta:
        ref_name = "Annotation"


ANNOTATION_FILTERS = [
    OpenApiParameter("name", LABEL_SCHEMA, description="only annotations of this name"),
    OpenApiParameter(
        "value",
        {"type": "string"},
        description="only this value: a label, a number or true/false",
    ),
    OpenApiParameter(
        "target_kind", {"type": "string", "enum": AnnotationTarget.values}, description="kind"
    ),
    OpenApiParameter("attempt", UUID_SCHEMA, description="only on this attempt"),
    OpenApiParameter("llm_call", UUID_SCHEMA, description="only on this LLM call"),
    OpenApiParameter("world", LABEL_SCHEMA, description="only on this world's turns"),
    OpenApiParameter(
        "turn",
        {"type": "integer", "minimum": 0, "maximum": MAX_TURN_NUMBER},
        description="only on this turn (with world)",
    ),
    OpenApiParameter("author", {"type": "string"}, description="only by this username"),
]


class AnnotationCollectionApi(APIView):
    """GET lists annotations, POST creates one: two operations on one path."""

    permission_classes = [SignedInAnnotates]

    class InputSerializer(StrictInputSerializer):
        field_codes = {
            "target": "invalid_target",
            "name": "invalid_name",
            "value": "invalid_value",
            "comment": "invalid_comment",
        }
        target = described(
            TARGET_SCHEMA,
            help_text='{"attempt": id} | {"turn": {"world": slug, "number": n}} | {"llm_call": id}',
        )
        name = LabelField()
        value = described(VALUE_SCHEMA, help_text=VALUE_HELP)
        comment = StrictCharField(required=False, allow_blank=True, help_text=COMMENT_HELP)

        class Meta:
            ref_name = "AnnotationCreateInput"

    class OutputSerializer(AnnotationSerializer):
        class Meta:
            ref_name = "AnnotationCreateOutput"

    class ListOutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = AnnotationSerializer(many=True)

        class Meta:
            ref_name = "AnnotationListOutput"

    @extend_schema(
        operation_id="annotation_list",
        parameters=[*PAGING, *ANNOTATION_FILTERS],
        responses={200: ListOutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        page = selectors.annotation_list(params=request.query_params)
        return Response(self.ListOutputSerializer(page).data)

    @extend_schema(
        operation_id="annotation_create",
        request=InputSerializer,
        responses={201: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        body = validate_body(self.InputSerializer, request)
        annotation = services.annotation_create(
            # SignedInAnnotates let only a signed-in user (a User row) this far.
            data=cast(services.AnnotationInput, body),
            author=cast(User, request.user),
        )
        detail = selectors.annotation_get(annotation_id=str(annotation.pk))
        return Response(self.OutputSerializer(detail).data, status=status.HTTP_201_CREATED)


class AnnotationDetailApi(APIView):
    """GET reads an annotation; PUT replaces its name, value and comment; DELETE deletes it.
    The target and the author never change."""

    permission_classes = [SignedInAnnotates]

    class InputSerializer(StrictInputSerializer):
        field_codes = {
            "name": "invalid_name",
            "value": "invalid_value",
            "comment": "invalid_comment",
        }
        name = LabelField()
        value = described(VALUE_SCHEMA, help_text=VALUE_HELP)
        comment = StrictCharField(required=False, allow_blank=True, help_text=COMMENT_HELP)

        class Meta:
            ref_name = "AnnotationUpdateInput"

    class OutputSerializer(AnnotationSerializer):
        class Meta:
            ref_name = "AnnotationGetOutput"

    class DeleteOutputSerializer(serializers.Serializer):
        deleted = serializers.UUIDField(help_text="the deleted annotation's id")

        class Meta:
            ref_name = "AnnotationDeleteOutput"

    @extend_schema(
        operation_id="annotation_get",
        parameters=[uuid_path("annotation_id")],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, annotation_id: str) -> Response:
        return Response(
            self.OutputSerializer(selectors.annotation_get(annotation_id=annotation_id)).data
        )

    @extend_schema(
        operation_id="annotation_update",
        parameters=[uuid_path("annotation_id")],
        request=InputSerializer,
        responses={200: OutputSerializer, **WRITE_ERRORS},
    )
    def put(self, request: Request, annotation_id: str) -> Response:
        annotation = selectors.annotation_row(annotation_id=annotation_id)
        self.check_object_permissions(request, annotation)
        body = validate_body(self.InputSerializer, request)
        services.annotation_update(
            annotation_id=annotation.pk, data=cast(services.AnnotationChangeInput, body)
        )
        detail = selectors.annotation_get(annotation_id=str(annotation.pk))
        return Response(self.OutputSerializer(detail).data)

    @extend_schema(
        operation_id="annotation_delete",
        parameters=[uuid_path("annotation_id")],
        request=None,
        responses={200: DeleteOutputSerializer, **WRITE_ERRORS},
    )
    def delete(self, request: Request, annotation_id: str) -> Response:
        annotation = selectors.annotation_row(annotation_id=annotation_id)
        self.check_object_permissions(request, annotation)
        services.annotation_delete(annotation_id=annotation.pk)
        return Response(self.DeleteOutputSerializer({"deleted": annotation.pk}).data)
