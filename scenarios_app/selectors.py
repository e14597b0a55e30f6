"""Reads from the scenario store. No per-row queries: lists annotate and prefetch."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from chukwa_core import clock  # pure calendar helpers (no Django), shared with worlds
from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import is_hash, label_problem
from scenarios_app.models import COLLECTION_SEGMENTS as COLLECTION_SEGMENTS
from scenarios_app.models import SCENARIO_KINDS as SCENARIO_KINDS
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    Entity,
    Environment,
    JsonSchema,
    Metric,
    Population,
    ResponseSource,
    Scenario,
    ScenarioCognitionProfile,
    ScenarioDerivation,
    ScenarioDerivationParent,
    ScenarioEntity,
    ScenarioEnvironment,
    ScenarioName,
    ScenarioNameHistory,
    ScenarioPopulation,
    WorkflowComponentRef,
    WorkflowDerivation,
)
from scenarios_app.models import ComponentKind as ComponentKind

MODEL_BY_KIND = {
    ComponentKind.JSON_SCHEMA: JsonSchema,
    ComponentKind.RESPONSE_SOURCE: ResponseSource,
    ComponentKind.COGNITION_WORKFLOW: CognitionWorkflow,
    ComponentKind.COGNITION_PROFILE: CognitionProfile,
    ComponentKind.ENVIRONMENT: Environment,
    ComponentKind.ENTITY: Entity,
    ComponentKind.METRIC: Metric,
    ComponentKind.POPULATION: Population,
}
MAX_LIMIT = 200
DEFAULT_LIMIT = 50
USES_LIMIT = 200


def parse_paging(params: Mapping[str, Any]) -> tuple[int, int]:
    def number(key: str, default: int, low: int, high: int | None) -> int:
        raw = params.get(key)
        if raw in (None, ""):
            return default
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise invalid("invalid_query", key, f"must be an integer, got {raw!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"{low}…{high}" if high is not None else f"≥ {low}"
            raise invalid("invalid_query", key, f"must be {bound}, got {value}")
        return value

    return number("limit", DEFAULT_LIMIT, 1, MAX_LIMIT), number("offset", 0, 0, 1_000_000_000)


def _require_hash(value: str, fieldname: str = "hash") -> str:
    if not is_hash(value):
        raise invalid("invalid_hash", fieldname, f"{value!r} is not a lowercase sha256 hex")
    return value


# --- components ----------------------------------------------------------------------------


def component_as_dict(kind: str, row: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": kind, "hash": row.pk, "created_at": row.created_at}
    if kind == ComponentKind.COGNITION_PROFILE:
        data["content"] = {"workflow_hash": row.workflow_id}
        data["workflow_hash"] = row.workflow_id
    else:
        data["content"] = row.content
    if kind == ComponentKind.ENTITY:
        data["entity_id"] = row.entity_id
        data["is_agent"] = row.is_agent
    if kind == ComponentKind.RESPONSE_SOURCE:
        data["label"] = row.label
        data["interface"] = row.interface
    if kind == ComponentKind.METRIC:
        data["label"] = row.label
        data["metric_kind"] = row.kind
    if kind == ComponentKind.POPULATION:
        data["label"] = row.label
        data["size"] = row.size
        data["sampler"] = row.sampler
    return data


def component_get(*, kind: str, hash: str) -> dict[str, Any]:
    _require_hash(hash)
    row = MODEL_BY_KIND[ComponentKind(kind)]._default_manager.filter(pk=hash).first()
    if row is None:
        raise NotFoundError(
            "component_not_found",
            f"hash: no stored {kind} has hash {hash}",
            {"field": "hash", "hash": hash},
        )
    return component_as_dict(kind, row)


def component_list(*, kind: str, limit: int, offset: int) -> dict[str, Any]:
    model = MODEL_BY_KIND[ComponentKind(kind)]
    qs = model._default_manager.order_by("-created_at", "pk")
    rows = list(qs[offset : offset + limit])
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "results": [component_as_dict(kind, row) for row in rows],
    }


def _scenarios_using(bindings: QuerySet[Any]) -> list[dict[str, Any]]:
    hashes = bindings.values("scenario_id")
    return scenario_summaries(
        Scenario.objects.filter(pk__in=hashes).order_by("-created_at", "pk")[:USES_LIMIT]
    )


def component_uses(*, kind: str, hash: str) -> dict[str, Any]:
    """Which workflows, profiles and scenarios reference this component (directly or not); for a
    response source also the metrics that judge with it, for a metric the worlds it measured."""
    component_get(kind=kind, hash=hash)  # 404 when absent
    kind = ComponentKind(kind)
    if kind == ComponentKind.METRIC:
        return _metric_uses(hash)
    workflows: QuerySet[Any] = CognitionWorkflow.objects.none()
    profiles: QuerySet[Any] = CognitionProfile.objects.none()
    bindings: QuerySet[Any]
    if kind in (ComponentKind.JSON_SCHEMA, ComponentKind.RESPONSE_SOURCE):
        workflows = CognitionWorkflow.objects.filter(refs__component_hash=hash).distinct()
        profiles = CognitionProfile.objects.filter(workflow__in=workflows.values("pk"))
        bindings = ScenarioCognitionProfile.objects.filter(profile__in=profiles.values("pk"))
    elif kind == ComponentKind.COGNITION_WORKFLOW:
        profiles = CognitionProfile.objects.filter(workflow_id=hash)
        bindings = ScenarioCognitionProfile.objects.filter(profile__workflow_id=hash)
    elif kind == ComponentKind.COGNITION_PROFILE:
        bindings = ScenarioCognitionProfile.objects.filter(profile_id=hash)
    elif kind == ComponentKind.ENVIRONMENT:
        bindings = ScenarioEnvironment.objects.filter(environment_id=hash)
    elif kind == ComponentKind.POPULATION:
        bindings = ScenarioPopulation.objects.filter(population_id=hash)
    else:
        bindings = ScenarioEntity.objects.filter(entity_id=hash)
    ref_paths: dict[str, list[str]] = defaultdict(list)
    if kind in (ComponentKind.JSON_SCHEMA, ComponentKind.RESPONSE_SOURCE):
        for workflow_id, path in WorkflowComponentRef.objects.filter(
            component_hash=hash
        ).values_list("workflow_id", "path"):
            ref_paths[workflow_id].append(path)
    uses: dict[str, Any] = {
        "kind": kind.value,
        "hash": hash,
        "workflows": [
            {"hash": w.pk, "created_at": w.created_at, "paths": sorted(ref_paths.get(w.pk, []))}
            for w in workflows.order_by("-created_at", "pk")[:USES_LIMIT]
        ],
        "cognition_profiles": [
            {"hash": p.pk, "workflow_hash": p.workflow_id, "created_at": p.created_at}
            for p in profiles.order_by("-created_at", "pk")[:USES_LIMIT]
        ],
        "scenarios": _scenarios_using(bindings),
    }
    if kind == ComponentKind.RESPONSE_SOURCE:
        uses["metrics"] = [
            {"hash": h, "label": label, "created_at": created}
            for h, label, created in Metric.objects.filter(source_id=hash)
            .order_by("-created_at", "pk")
            .values_list("pk", "label", "created_at")[:USES_LIMIT]
        ]
    return uses


def _metric_uses(hash: str) -> dict[str, Any]:
    """The worlds a metric measured (with how many turns and errors) and their scenarios.
    Through the reverse relations the worlds app declares (Measurement.metric, related_name
    "measurements"; World.scenario, "worlds"): the store counts what it is used by without
    importing the worlds app, which sits above it."""
    worlds = list(
        Metric.objects.filter(pk=hash, measurements__isnull=False)
        .values("measurements__world__slug", "measurements__world__scenario_id")
        .annotate(
            turns=Count("measurements"),
            error_turns=Count("measurements", filter=~Q(measurements__error_code="")),
        )
        .order_by("measurements__world__slug")[:USES_LIMIT]
    )
    scenario_hashes = {row["measurements__world__scenario_id"] for row in worlds}
    return {
        "kind": ComponentKind.METRIC.value,
        "hash": hash,
        "workflows": [],
        "cognition_profiles": [],
        "scenarios": scenario_summaries(
            Scenario.objects.filter(pk__in=scenario_hashes).order_by("-created_at", "pk")
        ),
        "worlds": [
            {
                "slug": row["measurements__world__slug"],
                "turns": row["turns"],
                "error_turns": row["error_turns"],
            }
            for row in worlds
        ],
    }


def metric_content(*, metric_hash: str) -> dict[str, Any] | None:
    """A stored metric's content, or None."""
    content = Metric.objects.filter(pk=metric_hash).values_list("content", flat=True).first()
    return None if content is None else dict(content)


def metric_rows(*, hashes: Iterable[str] = (), labels: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The stored metrics of some hashes and labels (every version of a label), newest first."""
    rows = Metric.objects.filter(Q(pk__in=list(hashes)) | Q(label__in=list(labels)))
    return [
        dict(row)
        for row in rows.order_by("-created_at", "pk").values("hash", "label", "kind", "content")
    ]


def metric_labels() -> list[str]:
    """Every stored metric's label, once each, in order."""
    return list(Metric.objects.order_by("label").values_list("label", flat=True).distinct())


# --- scenarios -----------------------------------------------------------------------------


def _world_counts(hashes: Iterable[str]) -> dict[str, int]:
    # Through the reverse relation the worlds app declares (World.scenario, related_name
    # "worlds"): the store counts the worlds built on it without importing the worlds app,
    # which sits above it.
    rows = (
        Scenario.objects.filter(pk__in=list(hashes))
        .annotate(n=Count("worlds"))
        .values_list("pk", "n")
    )
    return dict(rows)


def _annotated(qs: QuerySet[Scenario]) -> QuerySet[Scenario]:
    children = (
        ScenarioDerivationParent.objects.filter(parent=OuterRef("pk"))
        .values("parent")
        .annotate(n=Count("derivation__child", distinct=True))
        .values("n")
    )
    return qs.annotate(
        has_parents_flag=Exists(
            ScenarioDerivationParent.objects.filter(derivation__child=OuterRef("pk"))
        ),
        child_count_value=Coalesce(Subquery(children, output_field=IntegerField()), Value(0)),
    ).prefetch_related("names")


def scenario_summaries(qs: QuerySet[Scenario]) -> list[dict[str, Any]]:
    rows = list(_annotated(qs))
    worlds = _world_counts(r.pk for r in rows)
    return [
        {
            "hash": r.pk,
            "scenario_slug": r.scenario_slug,
            "description": r.description,
            "chronon_seconds": r.chronon_seconds,
            "created_at": r.created_at,
            "names": sorted(n.name for n in r.names.all()),
            "child_count": r.child_count_value,  # type: ignore[attr-defined]  # see _annotated
            "world_count": worlds.get(r.pk, 0),
            "has_parents": r.has_parents_flag,  # type: ignore[attr-defined]  # see _annotated
        }
        for r in rows
    ]


def scenario_hash_for_ref(*, ref: str) -> str:
    """A path segment that is a hash or a name → the scenario hash."""
    if is_hash(ref):
        if not Scenario.objects.filter(pk=ref).exists():
            raise NotFoundError(
                "scenario_not_found", f"hash: no stored scenario has hash {ref}", {"hash": ref}
            )
        return ref
    problem = label_problem(ref)
    if problem is not None:
        raise invalid(
            "invalid_reference", "scenario", f"{ref!r} is neither a hash nor a name ({problem})"
        )
    return scenario_name_resolve(name=ref, field="name")


def scenario_name_resolve(*, name: str, field: str) -> str:
    """The scenario hash a name points to now; the one place names are resolved. ``field``
    is where the name came from, for the error."""
    problem = label_problem(name)
    if problem is not None:
        raise invalid("invalid_name", field, f"{name!r} {problem}")
    current = ScenarioName.objects.filter(pk=name).values_list("scenario_id", flat=True).first()
    if current is None:
        raise NotFoundError(
            "name_not_found",
            f"{field}: no scenario is named {name!r}",
            {"field": field, "name": name},
        )
    return current


def scenario_get(*, ref: str) -> dict[str, Any]:
    """Full reconstruction plus hash maps, names, child count, world count, has_parents."""
    scenario_hash = scenario_hash_for_ref(ref=ref)
    (summary,) = scenario_summaries(Scenario.objects.filter(pk=scenario_hash))
    profile_rows = list(
        ScenarioCognitionProfile.objects.filter(scenario_id=scenario_hash)
        .select_related("profile__workflow")
        .order_by("label")
    )
    env_rows = list(
        ScenarioEnvironment.objects.filter(scenario_id=scenario_hash)
        .select_related("environment")
        .order_by("label")
    )
    entity_rows = list(
        ScenarioEntity.objects.filter(scenario_id=scenario_hash)
        .select_related("entity")
        .order_by("position")
    )
    return {
        **summary,
        "scenario": {
            "scenario_slug": summary["scenario_slug"],
            "description": summary["description"],
            "chronon_seconds": summary["chronon_seconds"],
            "cognition_profiles": {
                b.label: {
                    "workflow_hash": b.profile.workflow_id,
                    "workflow": b.profile.workflow.content,
                }
                for b in profile_rows
            },
            "environments": {b.label: b.environment.content for b in env_rows},
            "entities": [b.entity.content for b in entity_rows],
        },
        "cognition_profiles": {b.label: b.profile_id for b in profile_rows},
        "environments": {b.label: b.environment_id for b in env_rows},
        "entities": [b.entity_id for b in entity_rows],
    }


def _parse_bool(raw: str, key: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise invalid("invalid_query", key, f"must be true or false, got {raw!r}")


def _parse_time(raw: str, key: str) -> datetime:
    try:
        return clock.parse_instant(raw)
    except clock.NotAnInstant as exc:
        shown = raw if len(raw) <= 64 else raw[:64] + "…"
        raise invalid("invalid_query", key, f"{exc}, got {shown!r}") from None
    except clock.CalendarOverflow as exc:
        raise invalid("invalid_query", key, str(exc)) from None


USES_FILTERS = {f"uses_{kind.value}_hash": kind for kind in SCENARIO_KINDS}
LIST_FILTERS = ("created_after", "created_before", "has_name", "has_parents", *USES_FILTERS)


def scenario_list(*, params: Mapping[str, Any]) -> dict[str, Any]:
    """Filters: created_after/before, has_name, has_parents, uses_<kind>_hash; limit/offset."""
    limit, offset = parse_paging(params)
    unknown = sorted(k for k in params if k not in (*LIST_FILTERS, "limit", "offset", "format"))
    if unknown:
        raise invalid(
            "invalid_query",
            unknown[0],
            f"unknown filter; known: {', '.join(LIST_FILTERS)}, limit, offset",
        )
    qs = Scenario.objects.all()
    if params.get("created_after"):
        qs = qs.filter(created_at__gt=_parse_time(params["created_after"], "created_after"))
    if params.get("created_before"):
        qs = qs.filter(created_at__lt=_parse_time(params["created_before"], "created_before"))
    if params.get("has_name"):
        named = Exists(ScenarioName.objects.filter(scenario=OuterRef("pk")))
        qs = qs.filter(named) if _parse_bool(params["has_name"], "has_name") else qs.filter(~named)
    if params.get("has_parents"):
        parented = Exists(ScenarioDerivationParent.objects.filter(derivation__child=OuterRef("pk")))
        wanted = _parse_bool(params["has_parents"], "has_parents")
        qs = qs.filter(parented) if wanted else qs.filter(~parented)
    for key, kind in USES_FILTERS.items():
        if not params.get(key):
            continue
        h = _require_hash(params[key], key)
        uses: Q
        if kind == ComponentKind.ENTITY:
            uses = Q(pk__in=ScenarioEntity.objects.filter(entity_id=h).values("scenario_id"))
        elif kind == ComponentKind.ENVIRONMENT:
            uses = Q(
                pk__in=ScenarioEnvironment.objects.filter(environment_id=h).values("scenario_id")
            )
        elif kind == ComponentKind.COGNITION_PROFILE:
            uses = Q(
                pk__in=ScenarioCognitionProfile.objects.filter(profile_id=h).values("scenario_id")
            )
        elif kind == ComponentKind.COGNITION_WORKFLOW:
            uses = Q(
                pk__in=ScenarioCognitionProfile.objects.filter(profile__workflow_id=h).values(
                    "scenario_id"
                )
            )
        else:
            uses = Q(
                pk__in=ScenarioCognitionProfile.objects.filter(
                    profile__workflow__refs__component_hash=h
                ).values("scenario_id")
            )
        qs = qs.filter(uses)
    qs = qs.order_by("-created_at", "pk")
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "results": scenario_summaries(qs[offset : offset + limit]),
    }


def scenario_lineage(*, ref: str, max_depth: int = 1000) -> dict[str, Any]:
    """Ancestors and descendants as a DAG: nodes oldest first, edges parent → child."""
    root = scenario_hash_for_ref(ref=ref)
    edges: dict[tuple[int, str, str], dict[str, Any]] = {}
    relation: dict[str, str] = {root: "self"}

    def walk(direction: str) -> None:
        frontier = {root}
        for _ in range(max_depth):
            if not frontier:
                return
            if direction == "up":
                qs = ScenarioDerivationParent.objects.filter(derivation__child_id__in=frontier)
            else:
                qs = ScenarioDerivationParent.objects.filter(parent_id__in=frontier)
            rows = qs.values_list(
                "derivation_id",
                "parent_id",
                "derivation__child_id",
                "role",
                "derivation__created_at",
            )
            nxt: set[str] = set()
            for derivation_id, parent, child, role, created in rows:
                edges[(derivation_id, parent, child)] = {
                    "parent": parent,
                    "child": child,
                    "role": role,
                    "derivation_id": derivation_id,
                    "created_at": created,
                }
                other = parent if direction == "up" else child
                if other not in relation:
                    relation[other] = "ancestor" if direction == "up" else "descendant"
                    nxt.add(other)
            frontier = nxt

    walk("up")
    walk("down")
    nodes = scenario_summaries(Scenario.objects.filter(pk__in=list(relation)))
    nodes.sort(key=lambda n: (n["created_at"], n["hash"]))
    for node in nodes:
        node["relation"] = relation[node["hash"]]
    ordered_edges = sorted(edges.values(), key=lambda e: (e["created_at"], e["derivation_id"]))
    return {"root": root, "nodes": nodes, "edges": ordered_edges}


def scenario_derivations(*, scenario_hash: str) -> list[dict[str, Any]]:
    rows = ScenarioDerivation.objects.filter(child_id=scenario_hash).prefetch_related("parents")
    return [
        {
            "id": d.pk,
            "operator": d.operator,
            "note": d.note,
            "metadata": d.metadata,
            "created_at": d.created_at,
            "parents": [{"hash": p.parent_id, "role": p.role} for p in d.parents.all()],
        }
        for d in rows
    ]


# --- names ---------------------------------------------------------------------------------


def scenario_name_get(*, name: str) -> dict[str, Any]:
    problem = label_problem(name)
    if problem is not None:
        raise invalid("invalid_name", "name", f"{name!r} {problem}")
    current = ScenarioName.objects.filter(pk=name).first()
    history = list(ScenarioNameHistory.objects.filter(name=name).order_by("-changed_at", "-id"))
    if current is None and not history:
        raise NotFoundError(
            "name_not_found", f"name: no scenario is named {name!r}", {"name": name}
        )
    scenario = None
    if current is not None:
        (scenario,) = scenario_summaries(Scenario.objects.filter(pk=current.scenario_id))
    return {
        "name": name,
        "hash": current.scenario_id if current else None,
        "updated_at": current.updated_at if current else None,
        "scenario": scenario,
        "history": [
            {
                "old_hash": h.old_hash,
                "new_hash": h.new_scenario_id,
                "note": h.note,
                "operator": h.operator,
                "changed_at": h.changed_at,
            }
            for h in history
        ],
    }


def scenario_name_list(*, limit: int, offset: int) -> dict[str, Any]:
    qs = ScenarioName.objects.order_by("name")
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "results": [
            {"name": n.name, "hash": n.scenario_id, "updated_at": n.updated_at}
            for n in qs[offset : offset + limit]
        ],
    }


def store_counts() -> dict[str, int]:
    return {
        "json_schemas": JsonSchema.objects.count(),
        "response_sources": ResponseSource.objects.count(),
        "cognition_workflows": CognitionWorkflow.objects.count(),
        "cognition_profiles": CognitionProfile.objects.count(),
        "environments": Environment.objects.count(),
        "entities": Entity.objects.count(),
        "metrics": Metric.objects.count(),
        "populations": Population.objects.count(),
        "scenarios": Scenario.objects.count(),
        "names": ScenarioName.objects.count(),
    }


def workflow_versions(*, workflow_hash: str) -> dict[str, list[dict[str, Any]]]:
    """The versions a workflow was derived from in the editor, and those derived from it, oldest
    first (two queries)."""
    fields = ("operator", "note", "created_at")
    return {
        "derived_from": [
            {"hash": row.pop("parent_id"), **row}
            for row in WorkflowDerivation.objects.filter(child_id=workflow_hash)
            .order_by("created_at", "pk")
            .values("parent_id", *fields)
        ],
        "derived": [
            {"hash": row.pop("child_id"), **row}
            for row in WorkflowDerivation.objects.filter(parent_id=workflow_hash)
            .order_by("created_at", "pk")
            .values("child_id", *fields)
        ],
    }


def workflow_content(*, workflow_hash: str, field: str) -> dict[str, Any]:
    """A stored workflow's content; 404 naming ``field`` when there is none."""
    content = (
        CognitionWorkflow.objects.filter(pk=workflow_hash).values_list("content", flat=True).first()
    )
    if content is None:
        raise NotFoundError(
            "not_found",
            f"{field}: no stored cognition_workflow has hash {workflow_hash}",
            {"field": field},
        )
    return dict(content)


def source_labels(*, source_hashes: set[str]) -> dict[str, str]:
    """hash → label of the stored response sources among ``source_hashes``."""
    return dict(ResponseSource.objects.filter(pk__in=source_hashes).values_list("pk", "label"))


def source_interfaces(*, source_hashes: set[str]) -> dict[str, str]:
    """hash → interface name of the stored response sources among ``source_hashes``."""
    if not source_hashes:
        return {}
    return dict(ResponseSource.objects.filter(pk__in=source_hashes).values_list("pk", "interface"))


def scenario_names_of(*, hashes: Iterable[str]) -> dict[str, list[str]]:
    """hash → the names that point at it now (sorted), for any number of scenarios: one query.
    A scenario no name points at is left out."""
    wanted = {h for h in hashes if h}
    found: dict[str, list[str]] = {}
    if not wanted:
        return found
    rows = ScenarioName.objects.filter(scenario_id__in=wanted).order_by("name")
    for name, scenario_hash in rows.values_list("name", "scenario_id"):
        found.setdefault(scenario_hash, []).append(name)
    return found
