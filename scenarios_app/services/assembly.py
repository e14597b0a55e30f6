"""Scenario assembly: a scenario composed from hash-or-inline references at every
level."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from chukwa_core.component_validation import check_keys, require_object, validate_scenario_scalars
from scenarios_app.services._store import Resolver, reject_nul
from scenarios_app.services.manifest import (
    META_FIELDS,
    AssembleResult,
    Manifest,
    ScenarioAssembleInput,
    parse_meta,
    resolve_entities,
    resolve_environments,
    resolve_profiles,
    store_and_record,
    validate_manifest,
)
from scenarios_app.services.population_expansion import (
    expand_populations,
    record_populations,
    resolve_populations,
)

ASSEMBLE_FIELDS = (
    "scenario_slug",
    "description",
    "chronon_seconds",
    "cognition_profiles",
    "environments",
    "entities",
)


def scenario_assemble(*, data: ScenarioAssembleInput) -> AssembleResult:
    """Compose a scenario from hash-or-inline references at every level; records a derivation
    with no parents; optionally sets a name in the same transaction."""
    with transaction.atomic(durable=True):
        return scenario_assemble_within(data=data)


def scenario_assemble_within(*, data: ScenarioAssembleInput) -> AssembleResult:
    """The same assembly inside the caller's transaction (world creation from ``{"data"}``)."""
    body = require_object(data, "body", "invalid_input")
    check_keys(
        body,
        "",
        required=ASSEMBLE_FIELDS,
        optional=(*META_FIELDS, "populations"),
        code="invalid_input",
    )
    meta = parse_meta(body)
    reject_nul(body["description"], "description")
    validate_scenario_scalars(
        scenario_slug=body["scenario_slug"],
        description=body["description"],
        chronon_seconds=body["chronon_seconds"],
    )
    resolver = Resolver()
    with transaction.atomic():
        profiles = resolve_profiles(resolver, body["cognition_profiles"], "cognition_profiles")
        environments = resolve_environments(resolver, body["environments"], "environments")
        entities: list[str]
        contents: dict[str, dict[str, Any]]
        if body["entities"] == [] and body.get("populations"):
            entities, contents = [], {}  # every agent from the populations
        else:
            entities, contents = resolve_entities(resolver, body["entities"], "entities")
        populations = resolve_populations(resolver, body.get("populations", []), "populations")
        bindings = expand_populations(resolver, populations, entities, contents, "populations")
        manifest = Manifest(
            scenario_slug=body["scenario_slug"],
            description=body["description"],
            chronon_seconds=body["chronon_seconds"],
            cognition_profiles=profiles,
            environments=environments,
            entities=entities,
            entity_contents=contents,
        )
        validate_manifest(manifest)
        result = store_and_record(manifest, meta, meta.metadata, (), resolver)
        record_populations(result["scenario_hash"], bindings)
        return result
