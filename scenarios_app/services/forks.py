"""Scenario forks: a child scenario from a parent's bindings with changes applied."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from chukwa_core.component_validation import (
    check_keys,
    require_label,
    require_object,
    type_name,
    validate_scenario_scalars,
)
from chukwa_core.errors import ConflictError, NotFoundError, invalid
from chukwa_core.ids import is_hash
from scenarios_app.models import (
    Entity,
    Scenario,
    ScenarioCognitionProfile,
    ScenarioEntity,
    ScenarioEnvironment,
)
from scenarios_app.selectors import scenario_name_resolve
from scenarios_app.services._store import Resolver, reject_nul
from scenarios_app.services.manifest import (
    META_FIELDS,
    AssembleResult,
    Manifest,
    ScenarioForkInput,
    parse_meta,
    resolve_entities,
    resolve_environments,
    resolve_profiles,
    store_and_record,
    validate_manifest,
)

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
    return scenario_name_resolve(name=value, field=f"{fieldname}.name")


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


def scenario_fork(*, data: ScenarioForkInput, durable: bool = True) -> AssembleResult:
    """A new scenario from a parent plus changes; the derivation's parent edges and
    ``metadata.touched_components`` are its provenance. ``durable=False``: in the caller's
    transaction (an experiment's factorial arms are forked in the experiment's own)."""
    body = require_object(data, "body", "invalid_input")
    check_keys(
        body,
        "",
        required=("primary_parent", "changes"),
        optional=("additional_parents", *META_FIELDS),
        code="invalid_input",
    )
    meta = parse_meta(body)
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
    with transaction.atomic(durable=durable):
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
            upserts=resolve_profiles(
                resolver, profile_upserts_raw, "changes.cognition_profile_upserts", allow_empty=True
            ),
            removals=profile_removals,
            removals_field="changes.cognition_profile_removals",
            touched=touched,
        )
        environments = _apply_label_changes(
            kind="environment",
            current=parent_envs,
            upserts=resolve_environments(
                resolver, env_upserts_raw, "changes.environment_upserts", allow_empty=True
            ),
            removals=env_removals,
            removals_field="changes.environment_removals",
            touched=touched,
        )
        entities_field = "entities"
        if "entities" in changes:
            entities_field = "changes.entities"
            entities, contents = resolve_entities(resolver, changes["entities"], entities_field)
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
        manifest = Manifest(
            cognition_profiles=profiles,
            environments=environments,
            entities=entities,
            entity_contents=contents,
            **scalars,
        )
        validate_manifest(manifest, entities_field=entities_field)
        metadata = {**meta.metadata, "touched_components": touched}
        return store_and_record(manifest, meta, metadata, parents, resolver)
