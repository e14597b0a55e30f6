"""Validators for component contents and scenarios, and the generic checks every validator
uses (keys, types, labels, JSON Schemas). Pure: no Django. A response source's rules are in
:mod:`chukwa_core.source_validation`.

Each failure raises :class:`ChukwaError` with a stable code, a message that starts with the
field it names, and ``details.field`` holding that field's path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import NoSuchResource

from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.ids import IdentifierError, label_problem, normalize_entity_id

ENVIRONMENT_MAX_BYTES = 64 * 1024
SCENARIO_MAX_BYTES = 256 * 1024
CHRONON_MAX_SECONDS = 31_536_000
# The only meta-schema a stored schema may declare (the one it is validated with).
DRAFT_2020_12_URIS = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_keys(
    obj: Mapping[str, Any],
    field: str,
    *,
    required: Sequence[str],
    optional: Sequence[str] = (),
    code: str,
) -> None:
    """Reject missing required keys and unknown keys, naming each."""
    for key in required:
        if key not in obj:
            raise invalid(code, f"{field}.{key}" if field else key, "is required")
    allowed = set(required) | set(optional)
    unknown = sorted(k for k in obj if k not in allowed)
    if unknown:
        where = f"{field}.{unknown[0]}" if field else unknown[0]
        raise invalid(
            code,
            where,
            f"unknown field; allowed fields are {', '.join(sorted(allowed))}",
            unknown=unknown,
        )


def require_object(value: object, field: str, code: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise invalid(code, field, f"must be an object, got {type_name(value)}")
    return value


def require_string(value: object, field: str, code: str, *, non_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise invalid(code, field, f"must be a string, got {type_name(value)}")
    if non_empty and not value.strip():
        raise invalid(code, field, "must be a non-empty string")
    return value


def require_label(value: object, field: str, code: str = "invalid_label") -> str:
    problem = label_problem(value)
    if problem is not None:
        raise invalid(code, field, f"label {value!r} {problem}")
    return value  # type: ignore[return-value]


# --- json_schema ---------------------------------------------------------------------------


def validate_json_schema_content(content: object, field: str = "content") -> dict[str, Any]:
    if not isinstance(content, dict):
        raise invalid(
            "invalid_json_schema", field, f"must be a JSON Schema object, got {type_name(content)}"
        )
    _check_schema_references(content, field)
    try:
        Draft202012Validator.check_schema(content)
    except SchemaError as exc:
        pointer = "/" + "/".join(str(p) for p in exc.absolute_path) if exc.absolute_path else ""
        raise invalid(
            "invalid_json_schema",
            f"{field}{pointer}",
            f"is not a valid Draft 2020-12 schema: {exc.message}",
            schema_path=list(map(str, exc.absolute_schema_path)),
        ) from None
    return content


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs alias mypy misses


# jsonschema's default registry still fetches http(s) references (with a deprecation warning);
# every validator Chukwa builds uses this one, which can never retrieve anything.
NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def schema_validator_for(schema: Mapping[str, Any]) -> Draft202012Validator:
    """The one way to build a validator for a stored schema: Draft 2020-12, nothing retrieved."""
    return Draft202012Validator(schema, registry=NO_RETRIEVAL)


def _schema_nodes(value: Any, pointer: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object in a schema document with its JSON pointer (keywords and data alike: a
    ``$ref`` inside ``const`` is harmless, but rejecting it too keeps the rule one line)."""
    if isinstance(value, dict):
        yield pointer, value
        for key, child in value.items():
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            yield from _schema_nodes(child, f"{pointer}/{escaped}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _schema_nodes(child, f"{pointer}/{index}")


def _check_schema_references(content: Mapping[str, Any], field: str) -> None:
    """A stored schema is self-contained: references only to fragments of the same
    document, no ``$id`` that would re-base them, no meta-schema but Draft 2020-12. Validation
    also runs with a registry that refuses retrieval; this rule makes the refusal unreachable."""
    for pointer, node in _schema_nodes(content):
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            if keyword in node:
                ref = node[keyword]
                if not isinstance(ref, str) or not ref.startswith("#"):
                    raise invalid(
                        "schema_reference_not_local",
                        f"{field}{pointer}/{keyword}",
                        f"{keyword} {ref!r} is not a fragment of this document: only references "
                        'starting with "#" are allowed, and nothing is ever retrieved',
                    )
        if "$id" in node:
            raise invalid(
                "schema_id_not_allowed",
                f"{field}{pointer}/$id",
                "$id is not allowed: a stored schema is identified by its hash, and an $id would "
                "change what its references resolve to",
            )
        if "$schema" in node and (pointer or node["$schema"] not in DRAFT_2020_12_URIS):
            raise invalid(
                "unsupported_meta_schema",
                f"{field}{pointer}/$schema",
                "only the root may declare $schema, and only as "
                '"https://json-schema.org/draft/2020-12/schema" (schemas are Draft 2020-12)',
            )


# --- environment ---------------------------------------------------------------------------


def validate_environment_content(content: object, field: str = "content") -> str:
    if not isinstance(content, str):
        raise invalid("invalid_environment", field, f"must be a string, got {type_name(content)}")
    if not content.strip():
        raise invalid("empty_environment", field, "environment text must be non-empty")
    if "\x00" in content:
        raise invalid(
            "invalid_character", field, "contains the NUL character U+0000, which cannot be stored"
        )
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise invalid(
            "invalid_character",
            field,
            f"contains a lone surrogate (U+{ord(content[exc.start]):04X}) at position {exc.start}",
        ) from None
    if size > ENVIRONMENT_MAX_BYTES:
        raise invalid(
            "environment_too_large",
            field,
            f"environment text is {size} bytes; at most {ENVIRONMENT_MAX_BYTES} are allowed",
        )
    return content


# --- entity --------------------------------------------------------------------------------


def normalize_entity_content(content: object, field: str = "content") -> dict[str, Any]:
    """Validate an entity and return it with its id normalized (the form that is hashed)."""
    code = "invalid_entity"
    entity = require_object(content, field, code)
    check_keys(entity, field, required=("id", "name", "state", "environment", "kind"), code=code)
    raw_id = entity["id"]
    if not isinstance(raw_id, str):
        raise invalid(
            "invalid_entity_id", f"{field}.id", f"must be a string, got {type_name(raw_id)}"
        )
    try:
        entity_id = normalize_entity_id(raw_id)
    except IdentifierError as exc:
        raise invalid("invalid_entity_id", f"{field}.id", str(exc)) from None
    name = require_string(entity["name"], f"{field}.name", code)
    state = require_string(entity["state"], f"{field}.state", code, non_empty=False)
    environment = require_label(entity["environment"], f"{field}.environment")
    kind = entity["kind"]
    normalized_kind: Any
    if kind == "prop":
        normalized_kind = "prop"
    elif isinstance(kind, dict) and set(kind) == {"agent"}:
        agent_field = f"{field}.kind.agent"
        agent = require_object(kind["agent"], agent_field, code)
        check_keys(agent, agent_field, required=("goal", "memory", "cognition_profile"), code=code)
        goal = require_string(agent["goal"], f"{agent_field}.goal", code)
        memory = require_string(agent["memory"], f"{agent_field}.memory", code, non_empty=False)
        profile = require_label(agent["cognition_profile"], f"{agent_field}.cognition_profile")
        normalized_kind = {"agent": {"goal": goal, "memory": memory, "cognition_profile": profile}}
    elif isinstance(kind, dict) and set(kind) == {"prop"}:
        raise invalid(
            "prop_has_profile" if _mentions_profile(kind["prop"]) else code,
            f"{field}.kind",
            'a prop is written as "prop" and has no cognition profile',
        )
    else:
        raise invalid(
            code,
            f"{field}.kind",
            f'must be "prop" or {{"agent": {{"goal", "memory", "cognition_profile"}}}}, got {kind!r}',
        )
    return {
        "id": entity_id,
        "name": name,
        "state": state,
        "environment": environment,
        "kind": normalized_kind,
    }


def _mentions_profile(value: object) -> bool:
    return isinstance(value, dict) and "cognition_profile" in value


def is_agent(entity: Mapping[str, Any]) -> bool:
    return isinstance(entity.get("kind"), dict)


# --- scenario ------------------------------------------------------------------------------


def validate_scenario_scalars(
    *, scenario_slug: object, description: object, chronon_seconds: object
) -> None:
    problem = label_problem(scenario_slug)
    if problem is not None:
        raise invalid("invalid_slug", "scenario_slug", f"{scenario_slug!r} {problem}")
    if not isinstance(description, str) or not description.strip():
        raise invalid("invalid_description", "description", "must be a non-empty string")
    if not is_int(chronon_seconds) or not 1 <= chronon_seconds <= CHRONON_MAX_SECONDS:  # type: ignore[operator]
        raise invalid(
            "invalid_chronon",
            "chronon_seconds",
            f"must be an integer 1…{CHRONON_MAX_SECONDS}, got {chronon_seconds!r}",
        )


def validate_scenario_bindings(
    *,
    cognition_profiles: Mapping[str, str],
    environments: Mapping[str, str],
    entities: Sequence[Mapping[str, Any]],
    entities_field: str = "entities",
) -> None:
    """Label resolution and roster rules over resolved entity contents."""
    if not cognition_profiles:
        raise invalid(
            "no_cognition_profiles", "cognition_profiles", "at least one profile is required"
        )
    if not environments:
        raise invalid("no_environments", "environments", "at least one environment is required")
    for label in cognition_profiles:
        require_label(label, f"cognition_profiles.{label}")
    for label in environments:
        require_label(label, f"environments.{label}")
    if not entities:
        raise invalid("no_entities", entities_field, "at least one entity is required")
    seen: dict[str, int] = {}
    for index, entity in enumerate(entities):
        where = f"{entities_field}[{index}]"
        if entity["environment"] not in environments:
            raise invalid(
                "unknown_environment_label",
                f"{where}.environment",
                f"entity {entity['id']!r} is in environment {entity['environment']!r}, which the "
                f"scenario does not bind. Bound environments: {', '.join(sorted(environments))}",
            )
        if is_agent(entity):
            profile = entity["kind"]["agent"]["cognition_profile"]
            if profile not in cognition_profiles:
                raise invalid(
                    "unknown_cognition_profile_label",
                    f"{where}.kind.agent.cognition_profile",
                    f"agent {entity['id']!r} uses cognition profile {profile!r}, which the "
                    f"scenario does not bind. Bound profiles: {', '.join(sorted(cognition_profiles))}",
                )
        if entity["id"] in seen:
            raise invalid(
                "duplicate_entity_id",
                f"{where}.id",
                f"entity id {entity['id']!r} is already used by {entities_field}[{seen[entity['id']]}]",
            )
        seen[entity["id"]] = index
    if not any(is_agent(e) for e in entities):
        raise invalid("no_agent", entities_field, "at least one entity must be an agent")


def check_scenario_size(canonical_size: int) -> None:
    if canonical_size > SCENARIO_MAX_BYTES:
        raise ChukwaError(
            "scenario_too_large",
            f"scenario: canonical size is {canonical_size} bytes; at most {SCENARIO_MAX_BYTES} "
            "are allowed",
            {"field": "scenario", "size": canonical_size, "limit": SCENARIO_MAX_BYTES},
        )
