"""A scenario's manifest: its bindings resolved, validated, stored with its derivation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from chukwa_core import hashing
from chukwa_core.component_validation import (
    check_scenario_size,
    require_label,
    require_object,
    type_name,
    validate_scenario_bindings,
    validate_scenario_scalars,
)
from chukwa_core.errors import invalid
from chukwa_core.rule_policy import rule_policy_references
from scenarios_app.models import (
    CognitionProfile,
    ComponentKind,
    Entity,
    Environment,
    Scenario,
    ScenarioCognitionProfile,
    ScenarioDerivation,
    ScenarioDerivationParent,
    ScenarioEntity,
    ScenarioEnvironment,
)
from scenarios_app.services._store import Resolver, insert_missing, parse_ref, reject_nul
from scenarios_app.services.names import UNSET, name_set_within

META_FIELDS = ("name", "operator", "note", "metadata")


# A component reference as authored: {"hash": H} or {"inline": <content>}.
ComponentRef = dict[str, Any]


class ScenarioAssembleInput(TypedDict, total=False):
    """The assembly input (also world creation's ``{"data": …}``). The API's
    serializer checks its shape; the service checks it again in full, since the admin, the CLI
    and the fixtures hand it JSON as authored."""

    scenario_slug: str
    description: str
    chronon_seconds: int
    cognition_profiles: dict[str, ComponentRef]
    environments: dict[str, ComponentRef]
    entities: list[ComponentRef]
    populations: list[dict[str, Any]]
    name: str
    operator: str
    note: str
    metadata: dict[str, Any]


class ScenarioForkInput(TypedDict, total=False):
    """A fork: the primary parent by name or hash, the changes, more parents."""

    primary_parent: dict[str, str]
    changes: dict[str, Any]
    additional_parents: list[dict[str, str]]
    name: str
    operator: str
    note: str
    metadata: dict[str, Any]


class AssembleResult(TypedDict):
    scenario_hash: str
    was_new_scenario: bool
    cognition_profiles: dict[str, str]
    environments: dict[str, str]
    entities: list[str]
    new_components: dict[str, int]
    derivation_id: int
    name: str | None


@dataclass
class Manifest:
    scenario_slug: str
    description: str
    chronon_seconds: int
    cognition_profiles: dict[str, str]
    environments: dict[str, str]
    entities: list[str]
    entity_contents: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Meta:
    name: str | None
    operator: str
    note: str
    metadata: dict[str, Any]


def parse_meta(data: Mapping[str, Any]) -> Meta:
    name = data.get("name")
    if name is not None:
        require_label(name, "name", "invalid_name")
    operator = data.get("operator")
    operator = "" if operator is None else operator
    note = data.get("note")
    note = "" if note is None else note
    for key, value in (("operator", operator), ("note", note)):
        if not isinstance(value, str):
            raise invalid("invalid_input", key, f"must be a string, got {type_name(value)}")
        reject_nul(value, key)
    if len(operator) > 200:
        raise invalid("invalid_input", "operator", "must be at most 200 characters")
    metadata = data.get("metadata", {})
    if metadata is None:
        metadata = {}
    require_object(metadata, "metadata", "invalid_input")
    reject_nul(metadata, "metadata")
    return Meta(name, operator, note, dict(metadata))


# --- resolution ----------------------------------------------------------------------------


def resolve_profiles(
    resolver: Resolver, refs: Any, fieldname: str, *, allow_empty: bool = False
) -> dict[str, str]:
    mapping = require_object(refs, fieldname, "invalid_input")
    if not mapping and not allow_empty:
        raise invalid("no_cognition_profiles", fieldname, "at least one profile is required")
    out: dict[str, str] = {}
    by_hash: dict[str, str] = {}
    for label, ref in mapping.items():
        where = f"{fieldname}.{label}"
        require_label(label, where)
        mode, payload = parse_ref(ref, where)
        if mode == "inline":
            out[label] = resolver.put_profile(payload, f"{where}.inline")[0]
        else:
            out[label] = payload
            by_hash[f"{where}.hash"] = payload
    resolver.require_existing(ComponentKind.COGNITION_PROFILE, by_hash)
    return out


def resolve_environments(
    resolver: Resolver, refs: Any, fieldname: str, *, allow_empty: bool = False
) -> dict[str, str]:
    mapping = require_object(refs, fieldname, "invalid_input")
    if not mapping and not allow_empty:
        raise invalid("no_environments", fieldname, "at least one environment is required")
    out: dict[str, str] = {}
    by_hash: dict[str, str] = {}
    inline: list[tuple[str, str]] = []
    for label, ref in mapping.items():
        where = f"{fieldname}.{label}"
        require_label(label, where)
        mode, payload = parse_ref(ref, where)
        if mode == "inline":
            prepared = resolver.prepare_environment(payload, f"{where}.inline")
            inline.append(prepared)
            out[label] = prepared[0]
        else:
            out[label] = payload
            by_hash[f"{where}.hash"] = payload
    resolver.require_existing(ComponentKind.ENVIRONMENT, by_hash)
    resolver.store_environments(inline)
    return out


def resolve_entities(
    resolver: Resolver, refs: Any, fieldname: str
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    if not isinstance(refs, list):
        raise invalid("invalid_input", fieldname, f"must be an array, got {type_name(refs)}")
    if not refs:
        raise invalid("no_entities", fieldname, "at least one entity is required")
    hashes: list[str] = []
    contents: dict[str, dict[str, Any]] = {}
    by_hash: dict[str, str] = {}
    inline: list[tuple[str, dict[str, Any]]] = []
    for index, ref in enumerate(refs):
        where = f"{fieldname}[{index}]"
        mode, payload = parse_ref(ref, where)
        if mode == "inline":
            h, entity = resolver.prepare_entity(payload, f"{where}.inline")
            inline.append((h, entity))
            contents[h] = entity
        else:
            h = payload
            by_hash[f"{where}.hash"] = h
        hashes.append(h)
    if by_hash:
        stored = dict(
            Entity.objects.filter(pk__in=set(by_hash.values())).values_list("pk", "content")
        )
        for where, h in by_hash.items():
            if h not in stored:
                raise invalid(
                    "unresolved_reference",
                    where,
                    f"no stored entity has hash {h}",
                    hash=h,
                    expected_kind="entity",
                )
        contents.update(stored)
    resolver.store_entities(inline)
    return hashes, contents


def _check_rule_policy_references(manifest: Manifest, workflows: Mapping[str, Any]) -> None:
    """Ids a rule policy names must exist in the scenario that binds it."""
    entity_ids = {c["id"] for c in manifest.entity_contents.values()}
    known_by_kind = {"entity": entity_ids, "environment": set(manifest.environments)}
    for label, profile_hash in sorted(manifest.cognition_profiles.items()):
        workflow = workflows.get(profile_hash)
        if not isinstance(workflow, dict):
            continue
        for path, kind, ref in rule_policy_references(workflow):
            known = known_by_kind[kind]
            if ref not in known:
                raise invalid(
                    f"unknown_{kind}_reference",
                    f"cognition_profiles.{label}.workflow.{path}",
                    f"the rule policy names {kind} {ref!r}, which this scenario does not have; "
                    f"known: {', '.join(sorted(known))}",
                )


def _check_size(manifest: Manifest) -> None:
    """Canonical size of the full reconstruction (contents, not hashes) ≤ 256 KiB."""
    profiles = dict(
        CognitionProfile.objects.filter(pk__in=set(manifest.cognition_profiles.values()))
        .select_related("workflow")
        .values_list("pk", "workflow__content")
    )
    env_text = dict(
        Environment.objects.filter(pk__in=set(manifest.environments.values())).values_list(
            "pk", "content"
        )
    )
    reconstruction = {
        "scenario_slug": manifest.scenario_slug,
        "description": manifest.description,
        "chronon_seconds": manifest.chronon_seconds,
        "cognition_profiles": {
            label: {"workflow": profiles.get(h)} for label, h in manifest.cognition_profiles.items()
        },
        "environments": {label: env_text.get(h) for label, h in manifest.environments.items()},
        "entities": [manifest.entity_contents[h] for h in manifest.entities],
    }
    check_scenario_size(len(hashing.canonical_json_bytes(reconstruction)))
    _check_rule_policy_references(manifest, profiles)


def validate_manifest(manifest: Manifest, *, entities_field: str = "entities") -> None:
    validate_scenario_scalars(
        scenario_slug=manifest.scenario_slug,
        description=manifest.description,
        chronon_seconds=manifest.chronon_seconds,
    )
    validate_scenario_bindings(
        cognition_profiles=manifest.cognition_profiles,
        environments=manifest.environments,
        entities=[manifest.entity_contents[h] for h in manifest.entities],
        entities_field=entities_field,
    )
    _check_size(manifest)


def _store_scenario(manifest: Manifest) -> tuple[str, bool]:
    scenario_hash = hashing.scenario_hash(
        scenario_slug=manifest.scenario_slug,
        description=manifest.description,
        chronon_seconds=manifest.chronon_seconds,
        cognition_profiles=manifest.cognition_profiles,
        environments=manifest.environments,
        entities=manifest.entities,
    )
    inserted = insert_missing(
        Scenario,
        [
            {
                "hash": scenario_hash,
                "scenario_slug": manifest.scenario_slug,
                "description": manifest.description,
                "chronon_seconds": manifest.chronon_seconds,
            }
        ],
    )
    if inserted:
        # Bindings are written once, with the scenario row; they are part of its content.
        ScenarioCognitionProfile.objects.bulk_create(
            [
                ScenarioCognitionProfile(scenario_id=scenario_hash, label=label, profile_id=h)
                for label, h in sorted(manifest.cognition_profiles.items())
            ]
        )
        ScenarioEnvironment.objects.bulk_create(
            [
                ScenarioEnvironment(scenario_id=scenario_hash, label=label, environment_id=h)
                for label, h in sorted(manifest.environments.items())
            ]
        )
        ScenarioEntity.objects.bulk_create(
            [
                ScenarioEntity(scenario_id=scenario_hash, position=i, entity_id=h)
                for i, h in enumerate(manifest.entities)
            ],
            batch_size=10_000,
        )
    return scenario_hash, bool(inserted)


def _record_derivation(
    child_hash: str,
    meta: Meta,
    metadata: dict[str, Any],
    parents: Sequence[tuple[str, str]] = (),
) -> int:
    derivation = ScenarioDerivation.objects.create(
        child_id=child_hash, operator=meta.operator, note=meta.note, metadata=metadata
    )
    if parents:
        ScenarioDerivationParent.objects.bulk_create(
            [
                ScenarioDerivationParent(
                    derivation=derivation, parent_id=parent, position=i, role=role
                )
                for i, (parent, role) in enumerate(parents)
            ]
        )
    return derivation.pk


def _result(
    manifest: Manifest,
    scenario_hash: str,
    was_new: bool,
    resolver: Resolver,
    derivation_id: int,
    name: str | None,
) -> AssembleResult:
    return {
        "scenario_hash": scenario_hash,
        "was_new_scenario": was_new,
        "cognition_profiles": dict(sorted(manifest.cognition_profiles.items())),
        "environments": dict(sorted(manifest.environments.items())),
        "entities": list(manifest.entities),
        "new_components": resolver.new_components(),
        "derivation_id": derivation_id,
        "name": name,
    }


def store_and_record(
    manifest: Manifest,
    meta: Meta,
    metadata: dict[str, Any],
    parents: Sequence[tuple[str, str]],
    resolver: Resolver,
) -> AssembleResult:
    """Store the scenario (if new), record the derivation and set the name, if one was given,
    in the caller's transaction."""
    scenario_hash, was_new = _store_scenario(manifest)
    derivation_id = _record_derivation(scenario_hash, meta, metadata, parents)
    if meta.name is not None:
        name_set_within(
            name=meta.name,
            scenario_hash=scenario_hash,
            expected_current_hash=UNSET,
            note=meta.note,
            operator=meta.operator,
        )
    return _result(manifest, scenario_hash, was_new, resolver, derivation_id, meta.name)
