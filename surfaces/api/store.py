"""REST API for the scenario store. One view per operation: the view validates the
body with its InputSerializer, calls one service or selector, and shapes the answer with its
OutputSerializer; the same serializers generate the OpenAPI document.

Component views exist once per kind (``component_views``), so each kind's operations have their
own operation ids and their own content schema.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chukwa_core.component_validation import CHRONON_MAX_SECONDS
from chukwa_core.metric_kinds import BUILT_IN_METRIC_KINDS
from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA, world_patch_schema_hash
from scenarios_app import selectors, services
from scenarios_app.models import COLLECTION_SEGMENTS, ComponentKind
from surfaces.api.contract import (
    HASH_PATH,
    HASH_SCHEMA,
    LABEL_SCHEMA,
    NAME_PATH,
    PAGING,
    READ_ERRORS,
    REF_PATH,
    WRITE_ERRORS,
    DeleteBodySchema,
    HashField,
    HashOutField,
    InstantField,
    JSONObjectField,
    LabelField,
    LabelOutField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    StrictListField,
    described,
    hash_or_inline,
    name_or_hash,
    operator_of,
    validate_body,
)

COLLECTIONS: dict[str, ComponentKind] = COLLECTION_SEGMENTS

OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": {}}
ENVIRONMENT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "description": "prose, at most 64 KiB of UTF-8",
}
PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"workflow": hash_or_inline(OBJECT_SCHEMA)},
    "required": ["workflow"],
    "additionalProperties": False,
}
# What a write may send as each kind's content; the services validate the rest.
CONTENT_SCHEMAS: dict[ComponentKind, dict[str, Any]] = {
    ComponentKind.JSON_SCHEMA: {**OBJECT_SCHEMA, "description": "a Draft 2020-12 JSON Schema"},
    ComponentKind.RESPONSE_SOURCE: {
        **OBJECT_SCHEMA,
        "description": "a response source: {version: 1, label, interface}",
    },
    ComponentKind.COGNITION_WORKFLOW: {
        **OBJECT_SCHEMA,
        "description": "a cognition workflow: {version: 1, execution, nodes, apply, ...}",
    },
    ComponentKind.COGNITION_PROFILE: PROFILE_SCHEMA,
    ComponentKind.ENVIRONMENT: ENVIRONMENT_SCHEMA,
    ComponentKind.ENTITY: {
        **OBJECT_SCHEMA,
        "description": "an entity: id, kind, and its kind's fields",
    },
    ComponentKind.METRIC: {
        **OBJECT_SCHEMA,
        "description": 'a metric: {version: 1, label, kind: "expression" | "llm_judge", '
        "aggregate: any|all|sum|mean|min|max|last, and expression (JMESPath over the turn view) "
        "or source, system, user_template, scale {min, max}, subject?, "
        "max_generation_attempts? (1…5)}",
    },
    ComponentKind.POPULATION: {
        **OBJECT_SCHEMA,
        "description": "a population: {version: 1, label, size (1…10,000), sampler: sobol | "
        "random, seed, axes: [{name, categories: [{value, weight}]} | {name, range: [low, high], "
        "integer?, marginal?: [{low, high, share}]}], entity_template: {id, name, state, goal, "
        "memory} with {{index}} and {{axes.<name>}} (and {{biography}} with biographies), "
        "biographies?: {source: {hash}, prompt, texts: [one per agent]} (written by "
        "POST /api/populations/<hash>/biographies/)}",
    },
}
# A population a scenario includes: its agents live in ``environment`` and think with the
# scenario's ``cognition_profile``.
POPULATION_INCLUSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ref": hash_or_inline(CONTENT_SCHEMAS[ComponentKind.POPULATION]),
        "environment": LABEL_SCHEMA,
        "cognition_profile": LABEL_SCHEMA,
    },
    "required": ["ref", "environment", "cognition_profile"],
    "additionalProperties": False,
}
# What a read returns as each kind's content: profiles are stored with the workflow's hash.
STORED_CONTENT_SCHEMAS: dict[ComponentKind, dict[str, Any]] = {
    **CONTENT_SCHEMAS,
    ComponentKind.COGNITION_PROFILE: {
        "type": "object",
        "properties": {"workflow_hash": HASH_SCHEMA},
        "required": ["workflow_hash"],
    },
}


# --- shared output pieces -----------------------------------------------------------------


class ScenarioSummarySerializer(serializers.Serializer):
    hash = HashOutField()
    scenario_slug = LabelOutField()
    description = serializers.CharField()
    chronon_seconds = serializers.IntegerField()
    created_at = InstantField()
    names = serializers.ListField(child=LabelOutField())
    child_count = serializers.IntegerField()
    world_count = serializers.IntegerField()
    has_parents = serializers.BooleanField()

    class Meta:
        ref_name = "ScenarioSummary"


class WorkflowUseSerializer(serializers.Serializer):
    hash = HashOutField()
    created_at = InstantField()
    paths = serializers.ListField(child=serializers.CharField())

    class Meta:
        ref_name = "WorkflowUse"


class MetricUseSerializer(serializers.Serializer):
    hash = HashOutField()
    label = LabelOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    created_at = InstantField()

    class Meta:
        ref_name = "MetricUse"


class MeasuredWorldSerializer(serializers.Serializer):
    slug = LabelOutField()
    turns = serializers.IntegerField(help_text="turns measured (values and errors)")
    error_turns = serializers.IntegerField(help_text="of them, turns whose measurement is an error")

    class Meta:
        ref_name = "MeasuredWorld"


class ProfileUseSerializer(serializers.Serializer):
    hash = HashOutField()
    workflow_hash = HashOutField()
    created_at = InstantField()

    class Meta:
        ref_name = "CognitionProfileUse"


def _paged(name: str, row: serializers.Serializer) -> type[serializers.Serializer]:
    return type(
        f"{name}Serializer",
        (serializers.Serializer,),
        {
            "count": serializers.IntegerField(),
            "limit": serializers.IntegerField(),
            "offset": serializers.IntegerField(),
            "results": row,
            "Meta": type("Meta", (), {"ref_name": name}),
        },
    )


# --- components ---------------------------------------------------------------------------


def _component_output(kind: ComponentKind, name: str) -> type[serializers.Serializer]:
    fields: dict[str, Any] = {
        "kind": described({"type": "string", "pattern": f"^{kind.value}$"}),
        "hash": HashOutField(),
        "content": described(STORED_CONTENT_SCHEMAS[kind]),
        "created_at": InstantField(),
    }
    if kind == ComponentKind.COGNITION_PROFILE:
        fields["workflow_hash"] = HashOutField()
    if kind == ComponentKind.ENTITY:
        fields["entity_id"] = serializers.CharField()
        fields["is_agent"] = serializers.BooleanField()
    if kind == ComponentKind.RESPONSE_SOURCE:
        fields["label"] = LabelOutField()
        fields["interface"] = JSONObjectField()
    if kind == ComponentKind.METRIC:
        fields["label"] = LabelOutField()
        fields["metric_kind"] = serializers.ChoiceField(choices=list(BUILT_IN_METRIC_KINDS))
    if kind == ComponentKind.POPULATION:
        fields["label"] = LabelOutField()
        fields["size"] = serializers.IntegerField()
        fields["sampler"] = serializers.ChoiceField(choices=["sobol", "random"])
    fields["Meta"] = type("Meta", (), {"ref_name": name})
    return type(f"{name}Serializer", (serializers.Serializer,), fields)


def component_views(segment: str, kind: ComponentKind) -> dict[str, type[APIView]]:
    """The list/put, get and uses views of one component kind."""
    title = "".join(part.title() for part in kind.value.split("_"))
    op = segment.replace("-", "_")

    put_input = type(
        f"{title}PutInputSerializer",
        (StrictInputSerializer,),
        {
            "content": described(
                CONTENT_SCHEMAS[kind], help_text="The content; sub-references may be inline."
            ),
            "Meta": type("Meta", (), {"ref_name": f"{title}PutInput"}),
        },
    )
    put_fields: dict[str, Any] = {"hash": HashOutField(), "was_new": serializers.BooleanField()}
    if kind == ComponentKind.COGNITION_PROFILE:
        put_fields["workflow_hash"] = HashOutField()
    if kind in (ComponentKind.COGNITION_PROFILE, ComponentKind.COGNITION_WORKFLOW):
        put_fields["new_components"] = serializers.DictField(child=serializers.IntegerField())
    put_fields["Meta"] = type("Meta", (), {"ref_name": f"{title}PutOutput"})
    put_output = type(f"{title}PutOutputSerializer", (serializers.Serializer,), put_fields)
    get_output = _component_output(kind, f"{title}GetOutput")
    list_output = _paged(f"{title}ListOutput", _component_output(kind, f"{title}Row")(many=True))
    uses_fields: dict[str, Any] = {
        "kind": described({"type": "string", "pattern": f"^{kind.value}$"}),
        "hash": HashOutField(),
        "workflows": WorkflowUseSerializer(many=True),
        "cognition_profiles": ProfileUseSerializer(many=True),
        "scenarios": ScenarioSummarySerializer(many=True),
        "Meta": type("Meta", (), {"ref_name": f"{title}UsesOutput"}),
    }
    if kind == ComponentKind.RESPONSE_SOURCE:
        uses_fields["metrics"] = MetricUseSerializer(
            many=True, help_text="the llm_judge metrics that judge with this source"
        )
    if kind == ComponentKind.METRIC:
        uses_fields["worlds"] = MeasuredWorldSerializer(
            many=True, help_text="the worlds it measured (scenarios: theirs)"
        )
    uses_output = type(f"{title}UsesOutputSerializer", (serializers.Serializer,), uses_fields)

    class CollectionApi(APIView):
        InputSerializer = put_input
        OutputSerializer = put_output
        ListOutputSerializer = list_output

        @extend_schema(
            operation_id=f"{op}_list",
            parameters=PAGING,
            responses={200: list_output, **READ_ERRORS},
        )
        def get(self, request: Request) -> Response:
            limit, offset = selectors.parse_paging(request.query_params)
            page = selectors.component_list(kind=kind, limit=limit, offset=offset)
            return Response(list_output(page).data)

        @extend_schema(
            operation_id=f"{op}_put",
            request=put_input,
            responses={200: put_output, 201: put_output, **WRITE_ERRORS},
        )
        def post(self, request: Request) -> Response:
            data = validate_body(put_input, request)
            result = services.component_put(kind=kind, content=data["content"])
            code = status.HTTP_201_CREATED if result["was_new"] else status.HTTP_200_OK
            return Response(put_output(result).data, status=code)

    class DetailApi(APIView):
        OutputSerializer = get_output

        @extend_schema(
            operation_id=f"{op}_get",
            parameters=[HASH_PATH],
            responses={200: get_output, **READ_ERRORS},
        )
        def get(self, request: Request, hash: str) -> Response:
            return Response(get_output(selectors.component_get(kind=kind, hash=hash)).data)

    class UsesApi(APIView):
        OutputSerializer = uses_output

        @extend_schema(
            operation_id=f"{op}_uses",
            parameters=[HASH_PATH],
            responses={200: uses_output, **READ_ERRORS},
        )
        def get(self, request: Request, hash: str) -> Response:
            return Response(uses_output(selectors.component_uses(kind=kind, hash=hash)).data)

    for view, suffix in ((CollectionApi, "CollectionApi"), (DetailApi, "DetailApi")):
        view.__name__ = view.__qualname__ = f"{title}{suffix}"
    UsesApi.__name__ = UsesApi.__qualname__ = f"{title}UsesApi"
    return {"collection": CollectionApi, "detail": DetailApi, "uses": UsesApi}


COMPONENT_VIEWS = {segment: component_views(segment, kind) for segment, kind in COLLECTIONS.items()}


# --- scenarios ----------------------------------------------------------------------------


class ScenarioAssembleApi(APIView):
    class InputSerializer(StrictInputSerializer):
        field_codes = {
            "scenario_slug": "invalid_slug",
            "description": "invalid_description",
            "chronon_seconds": "invalid_chronon",
            "name": "invalid_name",
        }
        scenario_slug = LabelField()
        description = StrictCharField()
        chronon_seconds = StrictIntegerField(min_value=1, max_value=CHRONON_MAX_SECONDS)
        cognition_profiles = serializers.DictField(
            child=described(hash_or_inline(PROFILE_SCHEMA)),
            help_text='label → {"hash": H} | {"inline": profile}; at least one',
        )
        environments = serializers.DictField(
            child=described(hash_or_inline(ENVIRONMENT_SCHEMA)),
            help_text='label → {"hash": H} | {"inline": text}; at least one',
        )
        entities = StrictListField(
            child=described(hash_or_inline(CONTENT_SCHEMAS[ComponentKind.ENTITY])),
            help_text='[{"hash": H} | {"inline": entity}, …]; at least one, unless populations '
            "give the agents",
        )
        populations = StrictListField(
            child=described(POPULATION_INCLUSION_SCHEMA),
            required=False,
            help_text="populations whose agents are appended to the entities (drawn "
            "deterministically: the same population gives the same entities and hash)",
        )
        name = LabelField(required=False, allow_null=True, help_text="set this name to it")
        operator = StrictCharField(
            required=False, allow_null=True, allow_blank=True, max_length=200
        )
        note = StrictCharField(required=False, allow_null=True, allow_blank=True)
        metadata = JSONObjectField(required=False, allow_null=True)

        class Meta:
            ref_name = "ScenarioAssembleInput"

    class OutputSerializer(serializers.Serializer):
        scenario_hash = HashOutField()
        was_new_scenario = serializers.BooleanField()
        cognition_profiles = serializers.DictField(child=HashOutField())
        environments = serializers.DictField(child=HashOutField())
        entities = serializers.ListField(child=HashOutField())
        new_components = serializers.DictField(child=serializers.IntegerField())
        derivation_id = serializers.IntegerField()
        name = LabelOutField(allow_null=True)

        class Meta:
            ref_name = "ScenarioAssembleOutput"

    @extend_schema(
        operation_id="scenario_assemble",
        request=InputSerializer,
        responses={200: OutputSerializer, 201: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = operator_of(request, validate_body(self.InputSerializer, request))
        # the InputSerializer checked its shape; the service checks the rest
        result = services.scenario_assemble(data=cast(services.ScenarioAssembleInput, data))
        code = status.HTTP_201_CREATED if result["was_new_scenario"] else status.HTTP_200_OK
        return Response(self.OutputSerializer(result).data, status=code)


class ForkChangesSerializer(StrictInputSerializer):
    # Scalars pass through: the service validates them against the parent's values.
    scenario_slug = described(LABEL_SCHEMA, required=False)
    description = described({"type": "string", "minLength": 1}, required=False)
    chronon_seconds = described(
        {"type": "integer", "minimum": 1, "maximum": CHRONON_MAX_SECONDS}, required=False
    )
    cognition_profile_upserts = serializers.DictField(
        child=described(hash_or_inline(PROFILE_SCHEMA)), required=False
    )
    cognition_profile_removals = StrictListField(child=described(LABEL_SCHEMA), required=False)
    environment_upserts = serializers.DictField(
        child=described(hash_or_inline(ENVIRONMENT_SCHEMA)), required=False
    )
    environment_removals = StrictListField(child=described(LABEL_SCHEMA), required=False)
    entities = StrictListField(
        child=described(hash_or_inline(CONTENT_SCHEMAS[ComponentKind.ENTITY])),
        required=False,
        help_text="replaces the parent's entities",
    )

    class Meta:
        ref_name = "ScenarioForkChanges"


class ScenarioForkApi(APIView):
    class InputSerializer(StrictInputSerializer):
        field_codes = {"name": "invalid_name"}
        primary_parent = described(name_or_hash())
        changes = ForkChangesSerializer()
        additional_parents = StrictListField(
            child=described(
                {
                    "type": "object",
                    "properties": {
                        "hash": HASH_SCHEMA,
                        "role": {"type": "string", "minLength": 1, "maxLength": 64},
                    },
                    "required": ["hash", "role"],
                    "additionalProperties": False,
                }
            ),
            required=False,
        )
        name = LabelField(required=False, allow_null=True)
        operator = StrictCharField(
            required=False, allow_null=True, allow_blank=True, max_length=200
        )
        note = StrictCharField(required=False, allow_null=True, allow_blank=True)
        metadata = JSONObjectField(required=False, allow_null=True)

        class Meta:
            ref_name = "ScenarioForkInput"

    class OutputSerializer(ScenarioAssembleApi.OutputSerializer):
        class Meta:
            ref_name = "ScenarioForkOutput"

    @extend_schema(
        operation_id="scenario_fork",
        request=InputSerializer,
        responses={200: OutputSerializer, 201: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = operator_of(request, validate_body(self.InputSerializer, request))
        result = services.scenario_fork(data=cast(services.ScenarioForkInput, data))
        code = status.HTTP_201_CREATED if result["was_new_scenario"] else status.HTTP_200_OK
        return Response(self.OutputSerializer(result).data, status=code)


class ScenarioListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        limit = serializers.IntegerField()
        offset = serializers.IntegerField()
        results = ScenarioSummarySerializer(many=True)

        class Meta:
            ref_name = "ScenarioListOutput"

    @extend_schema(
        operation_id="scenario_list",
        parameters=[
            *PAGING,
            OpenApiParameter("created_after", {"type": "string", "format": "date-time"}),
            OpenApiParameter("created_before", {"type": "string", "format": "date-time"}),
            OpenApiParameter("has_name", bool),
            OpenApiParameter("has_parents", bool),
            *[OpenApiParameter(key, HASH_SCHEMA) for key in selectors.USES_FILTERS],
        ],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        page = selectors.scenario_list(params=request.query_params)
        return Response(self.OutputSerializer(page).data)


class DerivationSerializer(serializers.Serializer):
    class ParentSerializer(serializers.Serializer):
        hash = HashOutField()
        role = serializers.CharField()

        class Meta:
            ref_name = "DerivationParent"

    id = serializers.IntegerField()
    operator = serializers.CharField(allow_blank=True)
    note = serializers.CharField(allow_blank=True)
    metadata = JSONObjectField()
    created_at = InstantField()
    parents = ParentSerializer(many=True)

    class Meta:
        ref_name = "Derivation"


class ScenarioContentSerializer(serializers.Serializer):
    class ProfileSerializer(serializers.Serializer):
        workflow_hash = HashOutField()
        workflow = JSONObjectField()

        class Meta:
            ref_name = "ScenarioContentProfile"

    scenario_slug = LabelOutField()
    description = serializers.CharField()
    chronon_seconds = serializers.IntegerField()
    cognition_profiles = serializers.DictField(child=ProfileSerializer())
    environments = serializers.DictField(child=serializers.CharField())
    entities = serializers.ListField(child=JSONObjectField())

    class Meta:
        ref_name = "ScenarioContent"


class ScenarioDetailApi(APIView):
    class OutputSerializer(ScenarioSummarySerializer):
        scenario = ScenarioContentSerializer()
        cognition_profiles = serializers.DictField(child=HashOutField())
        environments = serializers.DictField(child=HashOutField())
        entities = serializers.ListField(child=HashOutField())
        derivations = DerivationSerializer(many=True)

        class Meta:
            ref_name = "ScenarioGetOutput"

    @extend_schema(
        operation_id="scenario_get",
        parameters=[REF_PATH],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, ref: str) -> Response:
        data = selectors.scenario_get(ref=ref)
        data["derivations"] = selectors.scenario_derivations(scenario_hash=data["hash"])
        return Response(self.OutputSerializer(data).data)


class LineageNodeSerializer(ScenarioSummarySerializer):
    relation = serializers.ChoiceField(choices=["self", "ancestor", "descendant"])

    class Meta:
        ref_name = "LineageNode"


class LineageEdgeSerializer(serializers.Serializer):
    parent = HashOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
    child = HashOutField()
    role = serializers.CharField()
    derivation_id = serializers.IntegerField()
    created_at = InstantField()

    class Meta:
        ref_name = "LineageEdge"


class ScenarioLineageApi(APIView):
    class OutputSerializer(serializers.Serializer):
        root = HashOutField()  # type: ignore[assignment]  # the API's field name shadows a Field attribute
        nodes = LineageNodeSerializer(many=True)
        edges = LineageEdgeSerializer(many=True)

        class Meta:
            ref_name = "ScenarioLineageOutput"

    @extend_schema(
        operation_id="scenario_lineage",
        parameters=[REF_PATH],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, ref: str) -> Response:
        return Response(self.OutputSerializer(selectors.scenario_lineage(ref=ref)).data)


class ScenarioNameChangeSerializer(serializers.Serializer):
    old_hash = HashOutField(allow_null=True)
    new_hash = HashOutField(allow_null=True)
    note = serializers.CharField(allow_blank=True)
    operator = serializers.CharField(allow_blank=True)
    changed_at = InstantField()

    class Meta:
        ref_name = "ScenarioNameChange"


class ScenarioNameApi(APIView):
    """GET, PUT (compare-and-set) and DELETE of one scenario name: three operations, each with
    its own serializers, on one path."""

    schema = DeleteBodySchema()

    class OutputSerializer(serializers.Serializer):
        name = LabelOutField()
        hash = HashOutField(allow_null=True)
        updated_at = InstantField(allow_null=True)
        scenario = ScenarioSummarySerializer(allow_null=True)
        history = ScenarioNameChangeSerializer(many=True)

        class Meta:
            ref_name = "ScenarioNameGetOutput"

    class PutInputSerializer(StrictInputSerializer):
        field_codes = {"hash": "invalid_hash", "expected_current_hash": "invalid_hash"}
        hash = HashField()
        expected_current_hash = HashField(
            required=False, allow_null=True, help_text="compare-and-set; null means 'must be unset'"
        )
        note = StrictCharField(required=False, allow_blank=True)
        operator = StrictCharField(required=False, allow_blank=True, max_length=200)

        class Meta:
            ref_name = "ScenarioNameSetInput"

    class PutOutputSerializer(OutputSerializer):
        class Meta:
            ref_name = "ScenarioNameSetOutput"

    class DeleteInputSerializer(StrictInputSerializer):
        field_codes = {"expected_current_hash": "invalid_hash"}
        expected_current_hash = HashField(
            required=False, allow_null=True, help_text="compare-and-set; null means 'must be unset'"
        )
        note = StrictCharField(required=False, allow_blank=True)
        operator = StrictCharField(required=False, allow_blank=True, max_length=200)

        class Meta:
            ref_name = "ScenarioNameUnsetInput"

    class DeleteOutputSerializer(OutputSerializer):
        class Meta:
            ref_name = "ScenarioNameUnsetOutput"

    @extend_schema(
        operation_id="scenario_name_get",
        parameters=[NAME_PATH],
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(self.OutputSerializer(selectors.scenario_name_get(name=name)).data)

    @extend_schema(
        operation_id="scenario_name_set",
        parameters=[NAME_PATH],
        request=PutInputSerializer,
        responses={200: PutOutputSerializer, **WRITE_ERRORS},
    )
    def put(self, request: Request, name: str) -> Response:
        data = operator_of(request, validate_body(self.PutInputSerializer, request))
        services.scenario_name_set(
            name=name,
            scenario_hash=data["hash"],
            expected_current_hash=data.get("expected_current_hash", services.UNSET),
            note=data.get("note", ""),
            operator=data["operator"],
        )
        return Response(self.PutOutputSerializer(selectors.scenario_name_get(name=name)).data)

    @extend_schema(
        operation_id="scenario_name_unset",
        parameters=[NAME_PATH],
        request=DeleteInputSerializer,
        responses={200: DeleteOutputSerializer, **WRITE_ERRORS},
    )
    def delete(self, request: Request, name: str) -> Response:
        data = operator_of(request, validate_body(self.DeleteInputSerializer, request))
        services.scenario_name_unset(
            name=name,
            expected_current_hash=data.get("expected_current_hash", services.UNSET),
            note=data.get("note", ""),
            operator=data["operator"],
        )
        return Response(self.DeleteOutputSerializer(selectors.scenario_name_get(name=name)).data)


class WorldPatchSchemaApi(APIView):
    class OutputSerializer(serializers.Serializer):
        hash = HashOutField()
        schema = JSONObjectField()

        class Meta:
            ref_name = "WorldPatchSchemaOutput"

    @extend_schema(
        operation_id="world_patch_schema_get", responses={200: OutputSerializer, **READ_ERRORS}
    )
    def get(self, request: Request) -> Response:
        data = {"hash": world_patch_schema_hash(), "schema": WORLD_PATCH_SCHEMA}
        return Response(self.OutputSerializer(data).data)
