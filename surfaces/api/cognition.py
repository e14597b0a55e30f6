"""REST API for traces: source invocations and LLM calls (SPEC §9)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cognition_app import selectors
from surfaces.api.store import ERRORS


class SourceInvocationDetailApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, invocation_id: str) -> Response:
        return Response(selectors.invocation_get(invocation_id=invocation_id))


class LlmCallDetailApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request: Request, call_id: str) -> Response:
        return Response(selectors.llm_call_get(call_id=call_id))
