"""Interviews (docs/populations.md, "Interviewing without disturbing"): operators ask a world's
agents questions about a committed turn, each in its own view; everyone signed in lists them,
with every answer and the world's state hash before and after (equal: nothing moved)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from surfaces.api.contract import (
    HASH_SCHEMA,
    LABEL_SCHEMA,
    READ_ERRORS,
    WRITE_ERRORS,
    HashOutField,
    InstantField,
    StrictInputSerializer,
    StrictIntegerField,
    described,
    path_parameter,
    validate_body,
)
from worlds_app.interview_selectors import interview_list
from worlds_app.services.interviews import interview_create

WORLD_PATH = path_parameter("slug", LABEL_SCHEMA, "world slug")


class InterviewInputSerializer(StrictInputSerializer):
    field_codes = {
        "turn": "invalid_turn",
        "subjects": "invalid_subjects",
        "questions": "invalid_questions",
        "source": "invalid_source",
    }
    turn = StrictIntegerField(min_value=0, help_text="a committed turn of the world")
    subjects = described(
        {
            "oneOf": [
                {"type": "string", "enum": ["all"]},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ]
        },
        help_text='"all" agents of that turn, or their ids',
    )
    questions = described(
        {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 2000},
            "minItems": 1,
            "maxItems": 20,
        },
        help_text="asked in order, in one conversation per agent",
    )
    source = described(  # type: ignore[assignment]  # the API's field name shadows a Field attribute
        {
            "type": "object",
            "properties": {"hash": HASH_SCHEMA},
            "required": ["hash"],
            "additionalProperties": False,
        },
        help_text="the llm_chat_completions source that answers for the agents",
    )

    class Meta:
        ref_name = "InterviewInput"


class AnswerSerializer(serializers.Serializer):
    subject = serializers.CharField()
    question = serializers.CharField()
    answer = serializers.CharField()
    llm_call = serializers.UUIDField(help_text="the traced generation of the answer")

    class Meta:
        ref_name = "InterviewAnswer"


class InterviewSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    turn = serializers.IntegerField(source="turn_number")
    subjects = serializers.ListField(child=serializers.CharField())
    questions = serializers.ListField(child=serializers.CharField())
    source_hash = HashOutField()
    status = serializers.ChoiceField(
        choices=["queued", "running", "completed", "failed"],
        help_text="queued → running (on a worker) → completed | failed",
    )
    tries = serializers.IntegerField(help_text="how many times a worker took it up")
    error_code = serializers.CharField(allow_blank=True)
    error_message = serializers.CharField(allow_blank=True)
    answers = AnswerSerializer(many=True)
    state_hash_before = serializers.CharField(
        allow_blank=True, help_text="the world's latest state before asking ('' until started)"
    )
    state_hash_after = serializers.CharField(
        allow_blank=True, help_text="and after: equal, nothing moved ('' until finished)"
    )
    unchanged = serializers.SerializerMethodField()
    created_at = InstantField()
    started_at = InstantField(allow_null=True)
    finished_at = InstantField(allow_null=True)
    created_by = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "Interview"

    def get_unchanged(self, obj: Any) -> bool | None:
        """Whether the hashes before and after are equal; null until the interview ends."""
        if not (obj.state_hash_before and obj.state_hash_after):
            return None
        return bool(obj.state_hash_before == obj.state_hash_after)


class InterviewListSerializer(serializers.Serializer):
    results = InterviewSerializer(many=True)

    class Meta:
        ref_name = "InterviewList"


class InterviewCollectionApi(APIView):
    """GET a world's interviews (newest first); POST queues one asking agents about a committed
    turn (202: a worker runs it on a throwaway branch; poll the list for its answers)."""

    @extend_schema(
        operation_id="interview_list",
        parameters=[WORLD_PATH],
        responses={200: InterviewListSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(InterviewListSerializer({"results": interview_list(slug=slug)}).data)

    @extend_schema(
        operation_id="interview_create",
        parameters=[WORLD_PATH],
        request=InterviewInputSerializer,
        responses={202: InterviewSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        body = validate_body(InterviewInputSerializer, request)
        made = interview_create(slug=slug, data=body, created_by=request.user.get_username())
        return Response(InterviewSerializer(made).data, status=status.HTTP_202_ACCEPTED)
