"""Retrying the attempt that ended a world's last batch: its turn and the turns its batch had
left, queued again as a new batch (README, "When things break")."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from surfaces.api.contract import (
    WRITE_ERRORS,
    StrictInputSerializer,
    uuid_path,
    validate_body,
)
from worlds_app.services import turn_attempt_retry


class AttemptRetryApi(APIView):
    """POST (operators): queue the failed or interrupted attempt's turn again, with the rest of
    its batch; 409 unless it ended the world's last batch and nothing of the world is queued or
    running. 409 too while its failure's cause is still there (``intervention_still_pending``,
    ``experiment_budget_exhausted``), unless the body says ``{"force": true}``."""

    class InputSerializer(StrictInputSerializer):
        force = serializers.BooleanField(
            default=False,
            help_text="queue it even though the failure's cause is still there",
        )

        class Meta:
            ref_name = "AttemptRetryInput"

    class OutputSerializer(serializers.Serializer):
        batch_id = serializers.UUIDField()
        attempt_ids = serializers.ListField(
            child=serializers.UUIDField(), help_text="the new batch, in the order they run"
        )

        class Meta:
            ref_name = "AttemptRetryOutput"

    @extend_schema(
        operation_id="attempt_retry",
        parameters=[uuid_path("attempt_id")],
        request=InputSerializer,
        responses={202: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, attempt_id: str) -> Response:
        body = validate_body(self.InputSerializer, request)
        result = turn_attempt_retry(
            attempt_id=attempt_id,
            requested_by=request.user.get_username(),
            force=body["force"],
        )
        return Response(self.OutputSerializer(result).data, status=status.HTTP_202_ACCEPTED)
