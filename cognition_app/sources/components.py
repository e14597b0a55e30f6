"""Response sources and JSON schemas read from the store, cached per process (components are
immutable, so a process-wide cache is safe)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

from chukwa_core.component_validation import schema_validator_for
from scenarios_app.models import JsonSchema, ResponseSource


@lru_cache(maxsize=4096)
def source_content(source_hash: str) -> dict[str, Any]:
    return ResponseSource.objects.values_list("content", flat=True).get(pk=source_hash)


@lru_cache(maxsize=4096)
def schema_content(schema_hash: str) -> dict[str, Any]:
    return JsonSchema.objects.values_list("content", flat=True).get(pk=schema_hash)


@lru_cache(maxsize=4096)
def schema_validator(schema_hash: str) -> Draft202012Validator:
    return schema_validator_for(schema_content(schema_hash))


def schema_errors(validator: Draft202012Validator, value: Any) -> list[dict[str, str]]:
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    return [
        {"pointer": "".join(f"/{p}" for p in e.absolute_path), "message": e.message} for e in errors
    ]
