"""Re-hash stored content-addressed rows (the store's ``fsck``): every row must read back to
content that hashes to its key. Reads only; reports mismatches instead of raising."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db.models import Prefetch, QuerySet

from chukwa_core import hashing
from chukwa_core.errors import ChukwaError
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
    ScenarioEntity,
)

CHUNK = 500


@dataclass(frozen=True)
class Mismatch:
    kind: str
    key: str
    actual: str  # the hash the stored content has now, or why it could not be hashed


def _rehash(compute: Callable[[], str]) -> str:
    try:
        return compute()
    except ChukwaError as exc:
        return f"unhashable: {exc.message}"


def _scan(
    kind: str, rows: QuerySet[Any], compute: Callable[[Any], str]
) -> Iterator[tuple[str, Mismatch | None]]:
    for row in rows.order_by("pk").iterator(chunk_size=CHUNK):
        actual = _rehash(partial(compute, row))
        key = str(row.pk)
        yield kind, (None if actual == key else Mismatch(kind, key, actual))


def _scenario_hash(row: Scenario) -> str:
    return hashing.scenario_hash(
        scenario_slug=row.scenario_slug,
        description=row.description,
        chronon_seconds=row.chronon_seconds,
        cognition_profiles={b.label: b.profile_id for b in row.profile_bindings.all()},
        environments={b.label: b.environment_id for b in row.environment_bindings.all()},
        entities=[b.entity_id for b in row.entity_bindings.all()],
    )


def store_verify() -> Iterator[tuple[str, Mismatch | None]]:
    """(kind, mismatch or None) for every content-addressed row of the store, kind by kind."""
    yield from _scan(
        "json_schema", JsonSchema.objects.all(), lambda r: hashing.json_hash(r.content)
    )
    yield from _scan(
        "response_source", ResponseSource.objects.all(), lambda r: hashing.json_hash(r.content)
    )
    yield from _scan(
        "cognition_workflow",
        CognitionWorkflow.objects.all(),
        lambda r: hashing.json_hash(r.content),
    )
    yield from _scan(
        "cognition_profile",
        CognitionProfile.objects.all(),
        lambda r: hashing.cognition_profile_hash(r.workflow_id),
    )
    yield from _scan(
        "environment", Environment.objects.all(), lambda r: hashing.environment_hash(r.content)
    )
    yield from _scan("entity", Entity.objects.all(), lambda r: hashing.entity_hash(r.content))
    yield from _scan("metric", Metric.objects.all(), lambda r: hashing.metric_hash(r.content))
    yield from _scan(
        "population", Population.objects.all(), lambda r: hashing.population_hash(r.content)
    )
    yield from _scan(
        "scenario",
        Scenario.objects.prefetch_related(
            "profile_bindings",
            "environment_bindings",
            Prefetch("entity_bindings", queryset=ScenarioEntity.objects.order_by("position")),
        ),
        _scenario_hash,
    )
