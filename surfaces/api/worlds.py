"""REST API for worlds, turns and attempts. One view per operation: validate with the
InputSerializer, call one service or selector, answer through the OutputSerializer."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.errors import invalid
from chukwa_core.metric_kinds import BUILT_IN_METRIC_KINDS
from cognition_app.sources import REPLAY_MODES, REUSE_MODES
from surfaces.api.branches import (
    BranchFromInputSerializer,
    BranchFromSerializer,
    SeedWarningSerializer,
)
from surfaces.api.cognition import InvocationSummarySerializer
from surfaces.api.contract import (
    HASH_SCHEMA,
    MAX_TURN_NUMBER,
    PAGING,
    READ_ERRORS,
    SLUG_PATH,
    TURN_PATH,
    WRITE_ERRORS,
    BudgetInputSerializer,
    BudgetSerializer,
    CostTotalsSerializer,
    HashOutField,
    InstantField,
    InstantInField,
    JSONObjectField,
    LabelField,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    described,
    name_or_hash,
    uuid_path,
    validate_body,
)
from surfaces.api.interventions import PatchInterventionSerializer
from surfaces.api.queries import (
    AttemptEventsQuerySerializer,
    PagingQuerySerializer,
    parse_query,
    split_paging,
)
from surfaces.api.represent import represent
from worlds_app import indexes, selectors, services
from worlds_app.models import AttemptStatus
from worlds_app.services.attempts import MAX_BATCH


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


def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(allow_blank=True, **kwargs)


STATUSES = [choice.value for choice in AttemptStatus]


class ReplayFromSerializer(serializers.Serializer):
    world = LabelOutField(help_text="the world whose recorded invocations serve this one's calls")
    mode = serializers.ChoiceField(choices=list(REPLAY_MODES))

    class Meta:
        ref_name = "ReplayFrom"


class LastAttemptSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    status = serializers.ChoiceField(choices=STATUSES)
    ended_at = InstantField(allow_null=True)

    class Meta:
        ref_name = "LastAttempt"


class WorldSummarySerializer(serializers.Serializer):
    slug = LabelOutField()
    name = serializers.CharField()
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    scenario_hash = HashOutField()
    scenario_names = serializers.ListField(
        child=LabelOutField(), help_text="the scenario names that point at scenario_hash now"
    )
    scenario_ref = JSONObjectField(help_text="the reference the world was created from")
    replay_from = ReplayFromSerializer(
        allow_null=True, help_text="the world whose recordings it replays, if any"
    )
    seed = serializers.IntegerField(
        allow_null=True, help_text="the world's seed (0 ≤ seed < 2^53); null: unseeded"
    )
    reuse = serializers.ChoiceField(
        choices=list(REUSE_MODES),
        help_text="exact: calls whose whole request was answered before are answered from "
        "the record (docs/costs.md); off: every call is sent",
    )
    branched_from = BranchFromSerializer(
        allow_null=True, help_text="the world and turn this branch started from; null: none"
    )
    experiment = serializers.CharField(
        allow_null=True, help_text="the experiment this world is a replicate of; null: none"
    )
    arm = serializers.CharField(allow_null=True, help_text="its arm in the experiment")
    replicate = serializers.IntegerField(
        allow_null=True, help_text="its replicate (1…R): the same seed in every arm"
    )
    chronon_seconds = serializers.IntegerField()
    current_turn = serializers.IntegerField()
    created_at = InstantField()
    attempts_queued = serializers.IntegerField()
    attempts_running = serializers.IntegerField()
    last_attempt = LastAttemptSerializer(
        allow_null=True, help_text="the newest finished attempt (its outcome); null: none yet"
    )

    class Meta:
        ref_name = "WorldSummary"


class RecentAttemptSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    status = serializers.ChoiceField(choices=STATUSES)
    attempted_turn = serializers.IntegerField(allow_null=True)
    produced_turn = serializers.IntegerField(allow_null=True)
    queued_at = InstantField()
    ended_at = InstantField(allow_null=True)
    failure_reason = _text()

    class Meta:
        ref_name = "RecentAttempt"


class MeasuredMetricSerializer(serializers.Serializer):
    hash = HashOutField()
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    kind = serializers.ChoiceField(choices=list(BUILT_IN_METRIC_KINDS))
    turns = serializers.IntegerField(help_text="turns measured (values and errors)")
    error_turns = serializers.IntegerField(help_text="of them, turns whose measurement is an error")

    class Meta:
        ref_name = "MeasuredMetric"


class WorldDetailSerializer(WorldSummarySerializer):
    simulation_time = InstantField()
    state = JSONObjectField()
    state_hash = HashOutField()
    scenario_snapshot = JSONObjectField()
    recent_attempts = RecentAttemptSerializer(many=True)
    budget = BudgetSerializer(allow_null=True, help_text="the budget in force; null: none")
    cost = CostTotalsSerializer(help_text="every LLM call of the world, failed attempts included")
    warnings = SeedWarningSerializer(
        many=True,
        help_text="what undoes the world's seed: an LLM source whose params fix a seed sends "
        "that seed, not the world's",
    )
    measured_metrics = MeasuredMetricSerializer(
        many=True,
        help_text="the metrics it was measured with, by label "
        "(GET /api/worlds/<slug>/measurements/ lists the values)",
    )

    class Meta:
        ref_name = "WorldDetail"


class ReplayFromInputSerializer(StrictInputSerializer):
    world = LabelField(help_text="an existing world, whose recorded invocations serve this one's")
    mode = serializers.ChoiceField(
        choices=list(REPLAY_MODES),
        help_text="replay_then_live: unmatched calls go live; replay_strict: they fail the attempt",
    )

    class Meta:
        ref_name = "ReplayFromInput"


class WorldCreateInputSerializer(StrictInputSerializer):
    field_codes = {
        "slug": "invalid_slug",
        "start_time": "invalid_start_time",
        "replay_from": "invalid_replay_from",
        "replay_from.world": "invalid_replay_from",
        "replay_from.mode": "invalid_replay_from",
        "seed": "invalid_seed",
        "branch_from": "invalid_branch_from",
        "branch_from.world": "invalid_branch_from",
        "branch_from.turn": "invalid_branch_from",
        "reuse": "invalid_reuse",
        **{f"budget.{k}": v for k, v in BudgetInputSerializer.field_codes.items()},
    }
    slug = LabelField()
    name = StrictCharField(required=False, allow_null=True, max_length=200)
    scenario_ref = described(
        name_or_hash(
            {
                "type": "object",
                "properties": {"data": {"$ref": "#/components/schemas/ScenarioAssembleInput"}},
                "required": ["data"],
                "additionalProperties": False,
            }
        ),
        help_text='{"name": N} | {"hash": H} | {"data": <full scenario input>}; required '
        "unless branch_from is given (a branch defaults to its parent's scenario)",
        required=False,
    )
    start_time = InstantInField(
        required=False, allow_null=True, help_text="ISO 8601 with an offset; default now"
    )
    replay_from = ReplayFromInputSerializer(
        required=False,
        help_text="serve calls from another world's recordings (replay); replaying exactly "
        "needs the same scenario and start_time",
    )
    budget = BudgetInputSerializer(
        required=False,
        allow_null=True,
        help_text="spending limits per attempt and in all (tokens, cost)",
    )
    seed = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=2**53 - 1,
        help_text="0 ≤ seed < 2^53: rule-policy draws and the seed each LLM call sends come "
        "from it; a replay without one takes the replayed world's",
    )
    branch_from = BranchFromInputSerializer(
        required=False,
        help_text="start at a committed turn of another world, with a copy of its state; "
        "scenario_ref then defaults to that world's scenario and must have its entity ids, "
        "kinds and environment labels",
    )
    reuse = serializers.ChoiceField(
        choices=list(REUSE_MODES),
        required=False,
        help_text="exact: an LLM call whose whole request (endpoint, model, body with seed and "
        "params) equals a recorded succeeded call's is answered from it, nothing sent; "
        "off (default): every call is sent",
    )

    class Meta:
        ref_name = "WorldCreateInput"


class WorldCollectionApi(APIView):
    """GET lists worlds, POST creates one: two operations on one path."""

    InputSerializer = WorldCreateInputSerializer

    class OutputSerializer(WorldDetailSerializer):
        class Meta:
            ref_name = "WorldCreateOutput"

    class ListOutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = WorldSummarySerializer(many=True)

        class Meta:
            ref_name = "WorldListOutput"

    @extend_schema(
        operation_id="world_list",
        parameters=[
            *PAGING,
            OpenApiParameter("scenario", HASH_SCHEMA, description="only this scenario's worlds"),
        ],
        responses={200: ListOutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        page = selectors.world_list(params=request.query_params)
        return Response(represent(self.ListOutputSerializer, page))

    @extend_schema(
        operation_id="world_create",
        request=WorldCreateInputSerializer,
        responses={201: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        body = validate_body(self.InputSerializer, request)
        world = services.world_create(
            data=cast(services.WorldCreateInput, body), created_by=request.user.get_username()
        )
        detail = selectors.world_get(slug=world.slug)
        return Response(self.OutputSerializer(detail).data, status=status.HTTP_201_CREATED)


class WorldDetailApi(APIView):
    """GET reads a world, DELETE deletes it: two operations on one path."""

    class OutputSerializer(WorldDetailSerializer):
        class Meta:
            ref_name = "WorldGetOutput"

    class DeleteOutputSerializer(serializers.Serializer):
        deleted = LabelOutField(help_text="the deleted world's slug")
        name = serializers.CharField()
        label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
        scenario_hash = HashOutField()
        final_turn = serializers.IntegerField()
        deleted_at = InstantField()

        class Meta:
            ref_name = "WorldDeleteOutput"

    @extend_schema(
        operation_id="world_get",
        parameters=[SLUG_PATH],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(represent(self.OutputSerializer, selectors.world_get(slug=slug)))

    @extend_schema(
        operation_id="world_delete",
        parameters=[SLUG_PATH],
        request=None,
        responses={200: DeleteOutputSerializer, **WRITE_ERRORS},
    )
    def delete(self, request: Request, slug: str) -> Response:
        record = services.world_delete(slug=slug, deleted_by=request.user.get_username())
        return Response(
            self.DeleteOutputSerializer(
                {
                    "deleted": record.slug,
                    "name": record.name,
                    "label": record.label,
                    "scenario_hash": record.scenario_hash,
                    "final_turn": record.final_turn,
                    "deleted_at": record.deleted_at,
                }
            ).data
        )


class TurnNarrationSerializer(serializers.Serializer):
    subject_id = serializers.CharField()
    patch_seq = serializers.IntegerField(allow_null=True)
    narration = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "TurnNarration"


class TurnRowSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    simulation_time = InstantField()
    state_hash = HashOutField()
    attempt_id = serializers.UUIDField(allow_null=True, help_text="null for turn 0")
    created_at = InstantField()
    narrations = TurnNarrationSerializer(many=True)
    cost = CostTotalsSerializer(help_text="every attempt at this turn, failed ones included")

    class Meta:
        ref_name = "TurnRow"


class TurnCollectionApi(APIView):
    """GET pages through a world's committed turns (newest first), POST queues attempts: two
    operations on one path."""

    class InputSerializer(StrictInputSerializer):
        field_codes = {"count": "invalid_count"}
        count = StrictIntegerField(
            required=False, min_value=1, max_value=MAX_BATCH, help_text="default 1"
        )

        class Meta:
            ref_name = "TurnEnqueueInput"

    class OutputSerializer(serializers.Serializer):
        batch_id = serializers.UUIDField()
        attempt_ids = serializers.ListField(child=serializers.UUIDField())

        class Meta:
            ref_name = "TurnEnqueueOutput"

    class ListOutputSerializer(serializers.Serializer):
        world = LabelOutField()
        current_turn = serializers.IntegerField()
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = TurnRowSerializer(many=True)

        class Meta:
            ref_name = "TurnListOutput"

    @extend_schema(
        operation_id="turn_list",
        parameters=[SLUG_PATH, PagingQuerySerializer],
        responses={200: ListOutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        _filters, limit, offset = split_paging(
            parse_query(PagingQuerySerializer, request.query_params)
        )
        page = indexes.turn_list(slug=slug, limit=limit, offset=offset)
        return Response(self.ListOutputSerializer(page).data)

    @extend_schema(
        operation_id="turn_enqueue",
        parameters=[SLUG_PATH],
        request=InputSerializer,
        responses={202: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        data = validate_body(self.InputSerializer, request)
        result = services.turn_attempt_enqueue(
            slug=slug, count=data.get("count", 1), requested_by=request.user.get_username()
        )
        return Response(self.OutputSerializer(result).data, status=status.HTTP_202_ACCEPTED)


class TurnPatchSerializer(serializers.Serializer):
    subject_id = serializers.CharField(allow_blank=True, help_text='"" for an intervention')
    patch_seq = serializers.IntegerField()
    narration = serializers.CharField()
    patch = JSONObjectField(help_text="the accepted WorldPatch")
    intervention = PatchInterventionSerializer(
        allow_null=True, required=False, help_text="the operator's intervention it is, if any"
    )

    class Meta:
        ref_name = "TurnPatch"


class TransitionSerializer(serializers.Serializer):
    patch_seq = serializers.IntegerField()
    effect_index = serializers.IntegerField()
    subject_id = _text()
    node_id = _text()
    workflow_hash = _text()
    op = serializers.CharField()
    target_kind = serializers.CharField()
    target_id = _text()
    before = _text()
    after = _text()
    intervention_id = serializers.IntegerField(
        allow_null=True, required=False, help_text="the intervention that made it, if any"
    )

    class Meta:
        ref_name = "PatchTransition"


class TurnDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        world = LabelOutField()
        number = serializers.IntegerField()
        simulation_time = InstantField()
        state = JSONObjectField()
        state_hash = HashOutField()
        attempt_id = serializers.UUIDField(allow_null=True)
        created_at = InstantField()
        patches = TurnPatchSerializer(many=True)
        transitions = TransitionSerializer(many=True)
        cost = CostTotalsSerializer(help_text="every attempt at this turn, failed ones included")

        class Meta:
            ref_name = "TurnGetOutput"

    @extend_schema(
        operation_id="turn_get",
        parameters=[SLUG_PATH, TURN_PATH],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str, number: int) -> Response:
        turn = selectors.turn_get(slug=slug, number=number)
        return Response(represent(self.OutputSerializer, turn))


class ChangeSerializer(serializers.Serializer):
    target_kind = serializers.ChoiceField(choices=["entity_state", "entity_memory", "environment"])
    target_id = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)

    class Meta:
        ref_name = "WorldChange"


class WorldDiffApi(APIView):
    OutputSerializer = type(
        "OutputSerializer",
        (serializers.Serializer,),
        {
            "world": LabelOutField(),
            # "from" is a keyword, so the fields are given as a mapping.
            "from": serializers.IntegerField(),
            "to": serializers.IntegerField(),
            "changes": ChangeSerializer(many=True),
            "Meta": type("Meta", (), {"ref_name": "WorldDiffOutput"}),
        },
    )

    @extend_schema(
        operation_id="world_diff",
        parameters=[
            SLUG_PATH,
            OpenApiParameter(
                "from", {"type": "integer", "minimum": 0, "maximum": MAX_TURN_NUMBER}, required=True
            ),
            OpenApiParameter(
                "to", {"type": "integer", "minimum": 0, "maximum": MAX_TURN_NUMBER}, required=True
            ),
        ],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        diff = selectors.world_diff(
            slug=slug,
            from_turn=_int_param(request.query_params.get("from"), "from"),
            to_turn=_int_param(request.query_params.get("to"), "to"),
        )
        return Response(self.OutputSerializer(diff).data)


class InvocationRowSerializer(InvocationSummarySerializer):
    llm_call_id = serializers.UUIDField(allow_null=True)
    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)
    ttft_ms = serializers.IntegerField(allow_null=True)
    cost = serializers.DecimalField(
        max_digits=20, decimal_places=10, allow_null=True, help_text="null: unknown (no price)"
    )
    cost_estimated = serializers.BooleanField()

    class Meta:
        ref_name = "AttemptSourceInvocation"


class AttemptEventSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    kind = serializers.CharField()
    subject_id = _text()
    node_id = _text()
    workflow_hash = _text()
    patch_seq = serializers.IntegerField(allow_null=True)
    payload = serializers.JSONField()
    content_hash = _text()
    invocation_id = serializers.UUIDField(allow_null=True)
    llm_call_id = serializers.UUIDField(allow_null=True)
    created_at = InstantField()
    # world_patch_applied / effect_contested: provisional until turn_committed
    commit_state = serializers.ChoiceField(
        choices=["provisional", "committed", "not_committed"], allow_null=True
    )

    class Meta:
        ref_name = "AttemptEvent"


class AttemptFailureSerializer(serializers.Serializer):
    step = _text()
    subject_id = _text()
    reason = serializers.CharField()

    class Meta:
        ref_name = "AttemptFailure"


class AttemptDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.UUIDField()
        world = LabelOutField()
        seq = serializers.IntegerField()
        batch_id = serializers.UUIDField()
        batch_index = serializers.IntegerField()
        batch_size = serializers.IntegerField()
        status = serializers.ChoiceField(choices=STATUSES)
        attempted_turn = serializers.IntegerField(allow_null=True)
        produced_turn = serializers.IntegerField(allow_null=True)
        lease_owner = _text()
        lease_expires_at = InstantField(allow_null=True)
        queued_at = InstantField()
        started_at = InstantField(allow_null=True)
        ended_at = InstantField(allow_null=True)
        duration_ms = serializers.IntegerField(allow_null=True)
        failure = AttemptFailureSerializer(allow_null=True)
        waiting_for = serializers.CharField(
            allow_blank=True,
            help_text="what a running attempt's call waits for now (a model slot and who holds it, "
            "a rate limit, an interactive turn served first); empty when none waits",
        )
        events = AttemptEventSerializer(many=True)
        events_next_after = serializers.IntegerField(
            allow_null=True,
            help_text="with events_limit: the events_after of the next window when this one "
            "left events out; null when it holds the last",
        )
        source_invocations = InvocationRowSerializer(many=True)
        cost = CostTotalsSerializer()

        class Meta:
            ref_name = "AttemptGetOutput"

    @extend_schema(
        operation_id="attempt_get",
        parameters=[uuid_path("attempt_id"), AttemptEventsQuerySerializer],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, attempt_id: str) -> Response:
        window = (
            parse_query(AttemptEventsQuerySerializer, request.query_params, others_allowed=True)
            if request.query_params
            else {}
        )
        attempt = selectors.attempt_get(
            attempt_id=attempt_id,
            events_after=window.get("events_after", 0),
            events_limit=window.get("events_limit"),
        )
        return Response(represent(self.OutputSerializer, attempt))


class BudgetHistorySerializer(BudgetSerializer):
    set_at = InstantField()
    set_by = _text()

    class Meta:
        ref_name = "BudgetSetting"


class WorldBudgetApi(APIView):
    """GET reads a world's budget and its history; PUT replaces it (limits left out are
    lifted), keeping the history. A change applies from the next attempt."""

    InputSerializer = BudgetInputSerializer

    class OutputSerializer(serializers.Serializer):
        world = LabelOutField()
        budget = BudgetSerializer(allow_null=True, help_text="in force; null: none")
        history = BudgetHistorySerializer(many=True, help_text="newest first")

        class Meta:
            ref_name = "WorldBudgetOutput"

    @extend_schema(
        operation_id="world_budget_get",
        parameters=[SLUG_PATH],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(self.OutputSerializer(selectors.world_budget_get(slug=slug)).data)

    @extend_schema(
        operation_id="world_budget_put",
        parameters=[SLUG_PATH],
        request=BudgetInputSerializer,
        responses={200: OutputSerializer, **WRITE_ERRORS},
    )
    def put(self, request: Request, slug: str) -> Response:
        body = validate_body(self.InputSerializer, request)
        services.world_budget_set(slug=slug, budget=body, set_by=request.user.get_username())
        return Response(self.OutputSerializer(selectors.world_budget_get(slug=slug)).data)
