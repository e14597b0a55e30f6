"""Idempotent puts for every component kind. Same content → same hash, ``was_new`` false."""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import transaction

from scenarios_app.models import ComponentKind
from scenarios_app.services._store import Resolver


class PutResult(TypedDict, total=False):
    hash: str
    was_new: bool
    workflow_hash: str
    new_components: dict[str, int]


def json_schema_put(*, content: Any) -> PutResult:
    with transaction.atomic(durable=True):
        h, new = Resolver().put_json_schema(content)
    return {"hash": h, "was_new": new}


def response_source_put(*, content: Any) -> PutResult:
    with transaction.atomic(durable=True):
        h, new = Resolver().put_response_source(content)
    return {"hash": h, "was_new": new}


def cognition_workflow_put(*, content: Any) -> PutResult:
    """Inline sub-references (schemas, sources) are stored first; the result counts them."""
    resolver = Resolver()
    with transaction.atomic(durable=True):
        h, new = resolver.put_workflow(content)
    return {"hash": h, "was_new": new, "new_components": resolver.new_components()}


def cognition_profile_put(*, content: Any) -> PutResult:
    resolver = Resolver()
    with transaction.atomic(durable=True):
        h, new, workflow_hash = resolver.put_profile(content)
    return {
        "hash": h,
        "was_new": new,
        "workflow_hash": workflow_hash,
        "new_components": resolver.new_components(),
    }


def environment_put(*, content: Any) -> PutResult:
    resolver = Resolver()
    with transaction.atomic(durable=True):
        h, text = resolver.prepare_environment(content, "content")
        inserted = resolver.store_environments([(h, text)])
    return {"hash": h, "was_new": h in inserted}


def entity_put(*, content: Any) -> PutResult:
    """The id is normalized before hashing, so ``"Ant"`` and ``"ant"`` are the same entity."""
    resolver = Resolver()
    with transaction.atomic(durable=True):
        h, entity = resolver.prepare_entity(content, "content")
        inserted = resolver.store_entities([(h, entity)])
    return {"hash": h, "was_new": h in inserted}


def metric_put(*, content: Any) -> PutResult:
    """A judge's inline source is stored first."""
    with transaction.atomic(durable=True):
        h, new = Resolver().put_metric(content)
    return {"hash": h, "was_new": new}


def population_put(*, content: Any) -> PutResult:
    with transaction.atomic(durable=True):
        h, new = Resolver().put_population(content)
    return {"hash": h, "was_new": new}


PUT_BY_KIND = {
    ComponentKind.JSON_SCHEMA: json_schema_put,
    ComponentKind.RESPONSE_SOURCE: response_source_put,
    ComponentKind.COGNITION_WORKFLOW: cognition_workflow_put,
    ComponentKind.COGNITION_PROFILE: cognition_profile_put,
    ComponentKind.ENVIRONMENT: environment_put,
    ComponentKind.ENTITY: entity_put,
    ComponentKind.METRIC: metric_put,
    ComponentKind.POPULATION: population_put,
}


def component_put(*, kind: str, content: Any) -> PutResult:
    return PUT_BY_KIND[ComponentKind(kind)](content=content)
