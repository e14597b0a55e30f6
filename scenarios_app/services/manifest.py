"""Scenario assembly, forks and names (SPEC §3). Each entry point is one transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from django.db import connection, transaction

from chukwa_core import hashing
from chukwa_core.component_validation import (
    check_keys,
    check_scenario_size,
    require_label,
    require_object,
    type_name,
    validate_scenario_bindings,
    validate_scenario_scalars,
)
from chukwa_core.errors import ChukwaError, ConflictError, NotFoundError, invalid
from chukwa_core.ids import is_hash, label_problem
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
    ScenarioName,
    ScenarioNameHistory,
)
from scenarios_app.services._store import Resolver, insert_missing, parse_ref, reject_nul

ASSEMBLE_FIELDS = (
    "scenario_slug",
    "description",
    "chronon_seconds",
    "cognition_profiles",
    "environments",
    "entities",
)
META_FIELDS = ("name", "operator", "note", "metadata")
CHANGE_FIELDS = (
    "scenario_slug",
    "description",
    "chronon_seconds",
    "cognition_profile_upserts",
    "cognition_profile_removals",
    "environment_upserts",
    "environment_removals",
    "entities",
)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


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
class _Manifest:
    scenario_slug: str
    description: str
    chronon_seconds: int
    cognition_profiles: dict[str, str]
    environments: dict[str, str]
    entities: list[str]
    entity_contents: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class _Meta:
    name: str | None
    operator: str
    note: str
    metadata: dict[str, Any]


def _parse_meta(data: Mapping[str, Any]) -> _Meta:
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
    return _Meta(name, operator, note, dict(metadata))


# --- resolution ----------------------------------------------------------------------------


def _resolve_profiles(
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


def _resolve_environments(
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


def _resolve_entities(
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


def _check_rule_policy_references(manifest: _Manifest, workflows: Mapping[str, Any]) -> None:
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


def _check_size(manifest: _Manifest) -> None:
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


def _validate(manifest: _Manifest, *, entities_field: str = "entities") -> None:
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


def _store_scenario(manifest: _Manifest) -> tuple[str, bool]:
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
    meta: _Meta,
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
    manifest: _Manifest,
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


def _store_and_record(
    manifest: _Manifest,
    meta: _Meta,
    metadata: dict[str, Any],
    parents: Sequence[tuple[str, str]],
    resolver: Resolver,
) -> AssembleResult:
    """Store the scenario (if new), record the derivation and set the name, if one was given,
    in the caller's transaction."""
    scenario_hash, was_new = _store_scenario(manifest)
    derivation_id = _record_derivation(scenario_hash, meta, metadata, parents)
    if meta.name is not None:
        _name_set(
            name=meta.name,
            scenario_hash=scenario_hash,
            expected_current_hash=UNSET,
            note=meta.note,
            operator=meta.operator,
        )
    return _result(manifest, scenario_hash, was_new, resolver, derivation_id, meta.name)


# --- assemble ------------------------------------------------------------------------------


def scenario_assemble(*, data: Any) -> AssembleResult:
    """Compose a scenario from hash-or-inline references at every level; records a derivation
    with no parents; optionally sets a name in the same transaction."""
    with transaction.atomic(durable=True):
        return scenario_assemble_within(data=data)


def scenario_assemble_within(*, data: Any) -> AssembleResult:
    """The same assembly inside the caller's transaction (world creation from ``{"data"}``)."""
    body = require_object(data, "body", "invalid_input")
    check_keys(body, "", required=ASSEMBLE_FIELDS, optional=META_FIELDS, code="invalid_input")
    meta = _parse_meta(body)
    reject_nul(body["description"], "description")
    validate_scenario_scalars(
        scenario_slug=body["scenario_slug"],
        description=body["description"],
        chronon_seconds=body["chronon_seconds"],
    )
    resolver = Resolver()
    with transaction.atomic():
        profiles = _resolve_profiles(resolver, body["cognition_profiles"], "cognition_profiles")
        environments = _resolve_environments(resolver, body["environments"], "environments")
        entities, contents = _resolve_entities(resolver, body["entities"], "entities")
        manifest = _Manifest(
            scenario_slug=body["scenario_slug"],
            description=body["description"],
            chronon_seconds=body["chronon_seconds"],
            cognition_profiles=profiles,
            environments=environments,
            entities=entities,
            entity_contents=contents,
        )
        _validate(manifest)
        return _store_and_record(manifest, meta, meta.metadata, (), resolver)


# --- fork ----------------------------------------------------------------------------------


def _scenario_ref_hash(ref: Any, fieldname: str) -> str:
    """``{"name": N}`` or ``{"hash": H}`` → an existing scenario hash."""
    if not isinstance(ref, dict) or len(ref) != 1 or next(iter(ref)) not in ("name", "hash"):
        raise invalid(
            "invalid_reference", fieldname, f'must be {{"name": N}} or {{"hash": H}}, got {ref!r}'
        )
    ((mode, value),) = ref.items()
    if mode == "hash":
        if not is_hash(value):
            raise invalid(
                "invalid_hash", f"{fieldname}.hash", f"{value!r} is not a lowercase sha256 hex"
            )
        if not Scenario.objects.filter(pk=value).exists():
            raise NotFoundError(
                "scenario_not_found",
                f"{fieldname}.hash: no stored scenario has hash {value}",
                {"field": f"{fieldname}.hash", "hash": value},
            )
        return value
    problem = label_problem(value)
    if problem is not None:
        raise invalid("invalid_name", f"{fieldname}.name", f"{value!r} {problem}")
    current = ScenarioName.objects.filter(pk=value).values_list("scenario_id", flat=True).first()
    if current is None:
        raise NotFoundError(
            "name_not_found",
            f"{fieldname}.name: no scenario is named {value!r}",
            {"field": f"{fieldname}.name", "name": value},
        )
    return current


def _label_list(value: Any, fieldname: str) -> list[str]:
    if not isinstance(value, list):
        raise invalid(
            "invalid_input", fieldname, f"must be an array of labels, got {type_name(value)}"
        )
    for index, label in enumerate(value):
        require_label(label, f"{fieldname}[{index}]")
    return list(value)


def _apply_label_changes(
    *,
    kind: str,
    current: dict[str, str],
    upserts: dict[str, str],
    removals: list[str],
    removals_field: str,
    touched: list[dict[str, Any]],
) -> dict[str, str]:
    result = dict(current)
    for index, label in enumerate(removals):
        if label not in result:
            raise invalid(
                "unknown_label",
                f"{removals_field}[{index}]",
                f"the parent binds no {kind} labelled {label!r}; bound: "
                f"{', '.join(sorted(current)) or 'none'}",
            )
        touched.append(
            {"kind": kind, "label": label, "op": "remove", "old_hash": result.pop(label)}
        )
    for label, new_hash in upserts.items():
        old = result.get(label)
        if old != new_hash:
            touched.append(
                {
                    "kind": kind,
                    "label": label,
                    "op": "upsert",
                    "old_hash": old,
                    "new_hash": new_hash,
                }
            )
        result[label] = new_hash
    return result


def scenario_fork(*, data: Any) -> AssembleResult:
    """A new scenario from a parent plus changes; the derivation's parent edges and
    ``metadata.touched_components`` are its provenance."""
    body = require_object(data, "body", "invalid_input")
    check_keys(
        body,
        "",
        required=("primary_parent", "changes"),
        optional=("additional_parents", *META_FIELDS),
        code="invalid_input",
    )
    meta = _parse_meta(body)
    if "touched_components" in meta.metadata:
        raise invalid(
            "invalid_input",
            "metadata.touched_components",
            "is recorded by the fork and cannot be set",
        )
    changes = require_object(body["changes"], "changes", "invalid_input")
    check_keys(changes, "changes", required=(), optional=CHANGE_FIELDS, code="invalid_input")
    reject_nul(changes.get("description", ""), "changes.description")
    profile_upserts_raw = require_object(
        changes.get("cognition_profile_upserts", {}),
        "changes.cognition_profile_upserts",
        "invalid_input",
    )
    env_upserts_raw = require_object(
        changes.get("environment_upserts", {}), "changes.environment_upserts", "invalid_input"
    )
    profile_removals = _label_list(
        changes.get("cognition_profile_removals", []), "changes.cognition_profile_removals"
    )
    env_removals = _label_list(
        changes.get("environment_removals", []), "changes.environment_removals"
    )
    for kind, upserts, removals in (
        ("cognition_profile", profile_upserts_raw, profile_removals),
        ("environment", env_upserts_raw, env_removals),
    ):
        both = sorted(set(upserts) & set(removals))
        if both:
            raise ConflictError(
                "conflicting_label_ops",
                f"changes: {kind} label {both[0]!r} is both upserted and removed",
                {"field": f"changes.{kind}_upserts.{both[0]}", "kind": kind, "labels": both},
            )
    additional = body.get("additional_parents", [])
    if not isinstance(additional, list):
        raise invalid(
            "invalid_input", "additional_parents", f"must be an array, got {type_name(additional)}"
        )

    resolver = Resolver()
    with transaction.atomic(durable=True):
        parent_hash = _scenario_ref_hash(body["primary_parent"], "primary_parent")
        parents: list[tuple[str, str]] = [(parent_hash, "primary")]
        for index, item in enumerate(additional):
            where = f"additional_parents[{index}]"
            edge = require_object(item, where, "invalid_input")
            check_keys(edge, where, required=("hash", "role"), code="invalid_input")
            role = edge["role"]
            if not isinstance(role, str) or not role.strip() or len(role) > 64:
                raise invalid(
                    "invalid_input", f"{where}.role", "must be a non-empty string ≤ 64 chars"
                )
            reject_nul(role, f"{where}.role")
            parents.append((_scenario_ref_hash({"hash": edge["hash"]}, where), role))

        parent = Scenario.objects.get(pk=parent_hash)
        parent_profiles = dict(
            ScenarioCognitionProfile.objects.filter(scenario_id=parent_hash).values_list(
                "label", "profile_id"
            )
        )
        parent_envs = dict(
            ScenarioEnvironment.objects.filter(scenario_id=parent_hash).values_list(
                "label", "environment_id"
            )
        )
        parent_entities = list(
            ScenarioEntity.objects.filter(scenario_id=parent_hash)
            .order_by("position")
            .values_list("entity_id", flat=True)
        )
        touched: list[dict[str, Any]] = []
        scalars: dict[str, Any] = {
            "scenario_slug": parent.scenario_slug,
            "description": parent.description,
            "chronon_seconds": parent.chronon_seconds,
        }
        # Validate the requested values as given: 60.0 == 60 and True == 1 must not slip through
        # as "no change".
        validate_scenario_scalars(**{**scalars, **{k: changes[k] for k in scalars if k in changes}})
        for key in ("scenario_slug", "description", "chronon_seconds"):
            if key in changes and changes[key] != scalars[key]:
                touched.append(
                    {
                        "kind": "scenario_field",
                        "field": key,
                        "old": scalars[key],
                        "new": changes[key],
                    }
                )
                scalars[key] = changes[key]

        profiles = _apply_label_changes(
            kind="cognition_profile",
            current=parent_profiles,
            upserts=_resolve_profiles(
                resolver, profile_upserts_raw, "changes.cognition_profile_upserts", allow_empty=True
            ),
            removals=profile_removals,
            removals_field="changes.cognition_profile_removals",
            touched=touched,
        )
        environments = _apply_label_changes(
            kind="environment",
            current=parent_envs,
            upserts=_resolve_environments(
                resolver, env_upserts_raw, "changes.environment_upserts", allow_empty=True
            ),
            removals=env_removals,
            removals_field="changes.environment_removals",
            touched=touched,
        )
        entities_field = "entities"
        if "entities" in changes:
            entities_field = "changes.entities"
            entities, contents = _resolve_entities(resolver, changes["entities"], entities_field)
            if entities != parent_entities:
                touched.append(
                    {
                        "kind": "entities",
                        "op": "replace",
                        "added": [h for h in entities if h not in set(parent_entities)],
                        "removed": [h for h in parent_entities if h not in set(entities)],
                    }
                )
        else:
            entities = parent_entities
            contents = dict(
                Entity.objects.filter(pk__in=set(entities)).values_list("pk", "content")
            )
        manifest = _Manifest(
            cognition_profiles=profiles,
            environments=environments,
            entities=entities,
            entity_contents=contents,
            **scalars,
        )
        _validate(manifest, entities_field=entities_field)
        metadata = {**meta.metadata, "touched_components": touched}
        return _store_and_record(manifest, meta, metadata, parents, resolver)


# --- names ---------------------------------------------------------------------------------


class NameResult(TypedDict):
    name: str
    hash: str | None
    previous_hash: str | None


def _lock_name(name: str) -> None:
    # Serialize writers of one name, including the first set, when no row exists to lock yet.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["scenario_name:" + name])


def _check_cas(name: str, current: str | None, expected: Any) -> None:
    if expected is UNSET:
        return
    if expected is not None and not is_hash(expected):
        raise invalid(
            "invalid_hash", "expected_current_hash", f"{expected!r} is not a lowercase sha256 hex"
        )
    if expected != current:
        raise ConflictError(
            "cas_failed",
            f"expected_current_hash: name {name!r} points to {current or 'nothing'}, "
            f"not {expected or 'nothing'}",
            {
                "field": "expected_current_hash",
                "name": name,
                "expected": expected,
                "current": current,
            },
        )


def _name_set(
    *, name: str, scenario_hash: str, expected_current_hash: Any, note: str, operator: str
) -> NameResult:
    _lock_name(name)
    current = ScenarioName.objects.filter(pk=name).values_list("scenario_id", flat=True).first()
    _check_cas(name, current, expected_current_hash)
    if current != scenario_hash:
        ScenarioName.objects.update_or_create(name=name, defaults={"scenario_id": scenario_hash})
        ScenarioNameHistory.objects.create(
            name=name, old_hash=current, new_scenario_id=scenario_hash, note=note, operator=operator
        )
    return {"name": name, "hash": scenario_hash, "previous_hash": current}


def _validate_name_args(name: Any, note: Any, operator: Any) -> None:
    require_label(name, "name", "invalid_name")
    for key, value in (("note", note), ("operator", operator)):
        if not isinstance(value, str):
            raise invalid("invalid_input", key, f"must be a string, got {type_name(value)}")
        reject_nul(value, key)


def scenario_name_set(
    *,
    name: str,
    scenario_hash: str,
    expected_current_hash: Any = UNSET,
    note: str = "",
    operator: str = "",
) -> NameResult:
    """Point ``name`` at a scenario. ``expected_current_hash`` (a hash, or None for "unset")
    makes it a compare-and-set; a mismatch is ``409 cas_failed``."""
    _validate_name_args(name, note, operator)
    if not is_hash(scenario_hash):
        raise invalid("invalid_hash", "hash", f"{scenario_hash!r} is not a lowercase sha256 hex")
    with transaction.atomic(durable=True):
        if not Scenario.objects.filter(pk=scenario_hash).exists():
            raise NotFoundError(
                "scenario_not_found",
                f"hash: no stored scenario has hash {scenario_hash}",
                {"field": "hash", "hash": scenario_hash},
            )
        return _name_set(
            name=name,
            scenario_hash=scenario_hash,
            expected_current_hash=expected_current_hash,
            note=note,
            operator=operator,
        )


def scenario_name_unset(
    *, name: str, expected_current_hash: Any = UNSET, note: str = "", operator: str = ""
) -> NameResult:
    """Remove the pointer, leaving a tombstone in the history."""
    _validate_name_args(name, note, operator)
    with transaction.atomic(durable=True):
        _lock_name(name)
        current = ScenarioName.objects.filter(pk=name).values_list("scenario_id", flat=True).first()
        if current is None and expected_current_hash is UNSET:
            raise NotFoundError(
                "name_not_found",
                f"name: no scenario is named {name!r}",
                {"field": "name", "name": name},
            )
        _check_cas(name, current, expected_current_hash)
        if current is None:
            raise NotFoundError(
                "name_not_found",
                f"name: no scenario is named {name!r}",
                {"field": "name", "name": name},
            )
        ScenarioName.objects.filter(pk=name).delete()
        ScenarioNameHistory.objects.create(
            name=name, old_hash=current, new_scenario=None, note=note, operator=operator
        )
    return {"name": name, "hash": None, "previous_hash": current}


__all__ = [
    "UNSET",
    "AssembleResult",
    "ChukwaError",
    "NameResult",
    "scenario_assemble",
    "scenario_assemble_within",
    "scenario_fork",
    "scenario_name_set",
    "scenario_name_unset",
]
