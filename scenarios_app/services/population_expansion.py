"""A scenario's populations (docs/populations.md): each ``{"ref", "environment",
"cognition_profile"}`` is stored or found, drawn, and its agents appended to the scenario's
entities as ordinary entities — deterministic for the population's content, so the scenario's
hash is stable. Which populations a scenario included is recorded beside it (outside its hash)."""

from __future__ import annotations

from typing import Any

from chukwa_core.component_validation import check_keys, require_object, type_name
from chukwa_core.errors import invalid
from chukwa_core.population import agent_entities
from scenarios_app.models import ComponentKind, Population, ScenarioPopulation
from scenarios_app.services._store import Resolver, parse_ref

MAX_POPULATIONS = 20


def resolve_populations(
    resolver: Resolver, refs: Any, fieldname: str
) -> list[tuple[str, str, str, dict[str, Any]]]:
    """Each included population as (hash, environment, cognition profile, content)."""
    if not isinstance(refs, list):
        raise invalid("invalid_input", fieldname, f"must be an array, got {type_name(refs)}")
    if len(refs) > MAX_POPULATIONS:
        raise invalid("invalid_input", fieldname, f"at most {MAX_POPULATIONS} populations")
    found = []
    for i, item in enumerate(refs):
        where = f"{fieldname}[{i}]"
        entry = require_object(item, where, "invalid_input")
        check_keys(
            entry, where, required=("ref", "environment", "cognition_profile"), code="invalid_input"
        )
        mode, payload = parse_ref(entry["ref"], f"{where}.ref")
        if mode == "inline":
            h, _ = resolver.put_population(payload, f"{where}.ref.inline")
        else:
            h = payload
            resolver.require_existing(ComponentKind.POPULATION, {f"{where}.ref.hash": h})
        content = Population.objects.values_list("content", flat=True).get(pk=h)
        for key in ("environment", "cognition_profile"):
            if not isinstance(entry[key], str):
                raise invalid("invalid_input", f"{where}.{key}", "must be a label")
        found.append((h, entry["environment"], entry["cognition_profile"], content))
    return found


def expand_populations(
    resolver: Resolver,
    populations: list[tuple[str, str, str, dict[str, Any]]],
    entities: list[str],
    contents: dict[str, dict[str, Any]],
    fieldname: str,
) -> list[tuple[int, str, str, str, int]]:
    """Append each population's agents to ``entities`` (stored as entities); answers the
    bindings to record: (position, hash, environment, profile, first entity position)."""
    seen = {c["id"]: f"entities[{i}]" for i, c in enumerate(contents[h] for h in entities)}
    bindings = []
    for i, (h, environment, profile, content) in enumerate(populations):
        where = f"{fieldname}[{i}]"
        first = len(entities)
        prepared = []
        for n, raw in enumerate(
            agent_entities(content, environment=environment, cognition_profile=profile), start=1
        ):
            entity_hash, entity = resolver.prepare_entity(raw, f"{where}.agents[{n}]")
            if entity["id"] in seen:
                raise invalid(
                    "duplicate_entity_id",
                    where,
                    f"agent {n} of population {content['label']!r} has the id {entity['id']!r}, "
                    f"already the id of {seen[entity['id']]}: the template's id must come out "
                    "unique (use {{index}})",
                )
            seen[entity["id"]] = f"{where}.agents[{n}]"
            prepared.append((entity_hash, entity))
            entities.append(entity_hash)
            contents[entity_hash] = entity
        resolver.store_entities(prepared)
        bindings.append((i, h, environment, profile, first))
    return bindings


def record_populations(scenario_hash: str, bindings: list[tuple[int, str, str, str, int]]) -> None:
    ScenarioPopulation.objects.bulk_create(
        [
            ScenarioPopulation(
                scenario_id=scenario_hash,
                position=position,
                population_id=h,
                environment=environment,
                cognition_profile=profile,
                first_position=first,
            )
            for position, h, environment, profile, first in bindings
        ],
        ignore_conflicts=True,
    )
