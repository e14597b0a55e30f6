"""Canonical hashing: RFC 8785 (JCS) for JSON, UTF-8 bytes for text. Pure: no Django.

One function per kind; every write path (API, admin, fixtures, world creation) calls these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import rfc8785

from chukwa_core.errors import ChukwaError
from chukwa_core.json_values import UnstorableValue, hashable, simple_json


def canonical_json_bytes(value: Any) -> bytes:
    """RFC 8785 bytes of a value, numbers read as doubles (see json_values.hashable), so content
    read back from JSONB hashes to the key it was stored under.

    A *simple* value (strings, ASCII keys, arrays, booleans, null, integers, the floats whose
    shortest form is RFC 8785's: a world snapshot) is written by orjson with sorted keys, which
    gives exactly the RFC 8785 bytes for it (same escapes: only ``"``, ``\\`` and U+0000 to
    U+001F, lowercase ``\\u00xx``), several times faster than ``json``'s C encoder (the same
    bytes, which writes a value nested deeper than orjson goes); anything else goes through the
    rfc8785 library."""
    if simple_json(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # nested more than 255 deep
            return json.dumps(
                value, ensure_ascii=False, sort_keys=True, separators=(",", ":")
            ).encode("utf-8")
    try:
        return rfc8785.dumps(hashable(value))
    except UnstorableValue as exc:
        raise ChukwaError(
            "not_canonicalizable",
            f"content{exc.pointer}: {exc.problem}",
            {"field": f"content{exc.pointer}"},
        ) from None
    except (rfc8785.CanonicalizationError, UnicodeError) as exc:
        raise ChukwaError(
            "not_canonicalizable", f"content: cannot be canonicalized (RFC 8785): {exc}"
        ) from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_hash(value: Any) -> str:
    return _sha256(canonical_json_bytes(value))


def text_hash(value: str) -> str:
    return _sha256(value.encode("utf-8"))


def json_schema_hash(content: Mapping[str, Any]) -> str:
    return json_hash(content)


def response_source_hash(content: Mapping[str, Any]) -> str:
    return json_hash(content)


def cognition_workflow_hash(content: Mapping[str, Any]) -> str:
    """The content must already have every reference resolved to ``{"hash": …}``."""
    return json_hash(content)


def cognition_profile_content(workflow_hash: str) -> dict[str, str]:
    return {"workflow_hash": workflow_hash}


def cognition_profile_hash(workflow_hash: str) -> str:
    return json_hash(cognition_profile_content(workflow_hash))


def environment_hash(content: str) -> str:
    return text_hash(content)


def entity_hash(content: Mapping[str, Any]) -> str:
    """The content's id must already be normalized."""
    return json_hash(content)


def scenario_manifest(
    *,
    scenario_slug: str,
    description: str,
    chronon_seconds: int,
    cognition_profiles: Mapping[str, str],
    environments: Mapping[str, str],
    entities: Sequence[str],
) -> dict[str, Any]:
    """The hashed form of a scenario: scalars, label → hash maps sorted by label, entity hashes."""
    return {
        "scenario_slug": scenario_slug,
        "description": description,
        "chronon_seconds": chronon_seconds,
        "cognition_profiles": dict(sorted(cognition_profiles.items())),
        "environments": dict(sorted(environments.items())),
        "entities": list(entities),
    }


def scenario_hash(
    *,
    scenario_slug: str,
    description: str,
    chronon_seconds: int,
    cognition_profiles: Mapping[str, str],
    environments: Mapping[str, str],
    entities: Sequence[str],
) -> str:
    return json_hash(
        scenario_manifest(
            scenario_slug=scenario_slug,
            description=description,
            chronon_seconds=chronon_seconds,
            cognition_profiles=cognition_profiles,
            environments=environments,
            entities=entities,
        )
    )


def metric_hash(content: Mapping[str, Any]) -> str:
    """The content must already have its source resolved to ``{"hash": …}``."""
    return json_hash(content)


def population_hash(content: Mapping[str, Any]) -> str:
    """A population's content as validated (``chukwa_core.population.validate_population``)."""
    return json_hash(content)
