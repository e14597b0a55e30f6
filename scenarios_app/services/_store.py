"""Shared write machinery: ref parsing, bulk idempotent inserts, the per-transaction resolver."""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import connection, models
from psycopg.types.json import Jsonb

from chukwa_core import hashing
from chukwa_core.component_validation import (
    normalize_entity_content,
    type_name,
    validate_environment_content,
    validate_json_schema_content,
)
from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.ids import is_hash
from chukwa_core.metric_kinds import registered_kind
from chukwa_core.metric_validation import validate_metric_content
from chukwa_core.patch_schema import world_patch_schema_hash
from chukwa_core.population import validate_population
from chukwa_core.source_validation import validate_response_source_content
from chukwa_core.workflow_refs import (
    JSON_SCHEMA,
    OPAQUE_KEYS,
    REF_KINDS,
    RESPONSE_SOURCE,
    StoredRef,
    iter_refs,
)
from chukwa_core.workflow_validation import validate_workflow
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    ComponentKind,
    Entity,
    Environment,
    JsonSchema,
    Metric,
    Population,
    ResponseSource,
    WorkflowComponentRef,
)

# Counts of new rows by table, as reported in assemble/fork results.
NEW_COMPONENT_KEYS = (
    "json_schemas",
    "response_sources",
    "cognition_workflows",
    "cognition_profiles",
    "environments",
    "entities",
)

_MODEL_BY_KIND: dict[str, type[models.Model]] = {
    ComponentKind.JSON_SCHEMA: JsonSchema,
    ComponentKind.RESPONSE_SOURCE: ResponseSource,
    ComponentKind.COGNITION_WORKFLOW: CognitionWorkflow,
    ComponentKind.COGNITION_PROFILE: CognitionProfile,
    ComponentKind.ENVIRONMENT: Environment,
    ComponentKind.ENTITY: Entity,
    ComponentKind.METRIC: Metric,
    ComponentKind.POPULATION: Population,
}
_COUNTER_KEY: dict[str, str] = {
    ComponentKind.JSON_SCHEMA: "json_schemas",
    ComponentKind.RESPONSE_SOURCE: "response_sources",
    ComponentKind.COGNITION_WORKFLOW: "cognition_workflows",
    ComponentKind.COGNITION_PROFILE: "cognition_profiles",
    ComponentKind.ENVIRONMENT: "environments",
    ComponentKind.ENTITY: "entities",
    ComponentKind.METRIC: "metrics",
    ComponentKind.POPULATION: "populations",
}
# PostgreSQL takes at most 65,535 bind parameters per statement.
_MAX_PARAMS = 60_000


_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


MAX_JSON_DEPTH = 64


def reject_nul(value: Any, fieldname: str, _depth: int = 0) -> None:
    """PostgreSQL text and jsonb cannot hold U+0000, and UTF-8 cannot hold a lone surrogate;
    reject either with the field's path (instead of a database error). Also caps nesting depth,
    so later recursive walks (validation, canonicalization) cannot exhaust the stack."""
    if _depth > MAX_JSON_DEPTH:
        raise invalid(
            "nested_too_deeply", fieldname, f"JSON is nested more than {MAX_JSON_DEPTH} levels deep"
        )
    if isinstance(value, str):
        if _BAD_CHARS.search(value):
            raise invalid(
                "invalid_character",
                fieldname,
                "contains U+0000 or a lone UTF-16 surrogate, which cannot be stored",
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            if _BAD_CHARS.search(str(key)):
                raise invalid(
                    "invalid_character", fieldname, "a key contains U+0000 or a lone surrogate"
                )
            reject_nul(item, f"{fieldname}.{key}" if fieldname else str(key), _depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            reject_nul(item, f"{fieldname}[{index}]", _depth + 1)


def parse_ref(value: Any, fieldname: str) -> tuple[str, Any]:
    """``{"hash": H}`` → ("hash", H); ``{"inline": content}`` → ("inline", content)."""
    if (
        not isinstance(value, dict)
        or len(value) != 1
        or next(iter(value)) not in ("hash", "inline")
    ):
        raise invalid(
            "invalid_reference",
            fieldname,
            f'must be {{"hash": "<sha256>"}} or {{"inline": <content>}}, got {_short(value)}',
        )
    ((mode, payload),) = value.items()
    if mode == "hash" and not is_hash(payload):
        raise invalid(
            "invalid_hash", f"{fieldname}.hash", f"{_short(payload)} is not a lowercase sha256 hex"
        )
    return mode, payload


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def insert_missing(model: type[models.Model], rows: list[dict[str, Any]]) -> set[str]:
    """``INSERT … ON CONFLICT DO NOTHING RETURNING pk`` in as few statements as possible.

    Returns the primary keys actually inserted, so ``was_new`` is exact even when two
    transactions store the same content at once.
    """
    if not rows:
        return set()
    unique: dict[Any, dict[str, Any]] = {}
    pk_name = model._meta.pk.name
    for row in rows:
        unique.setdefault(row[pk_name], row)
    names = list(rows[0])
    fields = [cast("models.Field[Any, Any]", model._meta.get_field(n)) for n in names]
    has_created = any(f.name == "created_at" for f in model._meta.fields)
    qn = connection.ops.quote_name
    columns = [qn(str(f.column)) for f in fields] + ([qn("created_at")] if has_created else [])
    row_sql = (
        "(" + ", ".join(["%s"] * len(fields) + (["clock_timestamp()"] if has_created else [])) + ")"
    )
    assert model._meta.pk is not None  # every store model has a hash primary key
    pk_column = qn(str(model._meta.pk.column))
    per_batch = max(1, _MAX_PARAMS // len(fields))
    inserted: set[str] = set()
    values = list(unique.values())
    with connection.cursor() as cursor:
        for start in range(0, len(values), per_batch):
            batch = values[start : start + per_batch]
            params: list[Any] = []
            for row in batch:
                for f in fields:
                    item = row[f.name]
                    params.append(Jsonb(item) if isinstance(f, models.JSONField) else item)
            # Identifiers come from model metadata; every value is a bind parameter.
            table = qn(model._meta.db_table)
            sql = (
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES "  # noqa: S608
                f"{', '.join([row_sql] * len(batch))} "
                f"ON CONFLICT ({pk_column}) DO NOTHING "
                f"RETURNING {pk_column}"
            )
            cursor.execute(sql, params)
            inserted.update(r[0] for r in cursor.fetchall())
    return inserted


def existing_hashes(model: type[models.Model], hashes: Iterable[str]) -> set[str]:
    wanted = set(hashes)
    if not wanted:
        return set()
    return set(model._default_manager.filter(pk__in=wanted).values_list("pk", flat=True))


@dataclass
class Resolver:
    """Resolves hash-or-inline references inside one transaction, counting new rows."""

    new: Counter[str] = field(default_factory=Counter)

    def new_components(self) -> dict[str, int]:
        return {key: self.new.get(key, 0) for key in NEW_COMPONENT_KEYS}

    def _record(self, kind: str, inserted: set[str]) -> None:
        self.new[_COUNTER_KEY[kind]] += len(inserted)

    def require_existing(self, kind: str, refs: Mapping[str, str]) -> None:
        """``refs`` maps field path → hash; each must be a stored component of ``kind``."""
        if not refs:
            return
        found = existing_hashes(_MODEL_BY_KIND[kind], refs.values())
        for fieldname, ref_hash in refs.items():
            if ref_hash not in found:
                raise invalid(
                    "unresolved_reference",
                    fieldname,
                    f"no stored {kind} has hash {ref_hash}",
                    hash=ref_hash,
                    expected_kind=kind,
                )

    # --- leaf components --------------------------------------------------------------------

    def put_json_schema(self, content: Any, fieldname: str = "content") -> tuple[str, bool]:
        reject_nul(content, fieldname)
        schema = validate_json_schema_content(content, fieldname)
        schema_hash = hashing.json_schema_hash(schema)
        inserted = insert_missing(JsonSchema, [{"hash": schema_hash, "content": schema}])
        self._record(ComponentKind.JSON_SCHEMA, inserted)
        return schema_hash, bool(inserted)

    def put_response_source(self, content: Any, fieldname: str = "content") -> tuple[str, bool]:
        reject_nul(content, fieldname)
        source = validate_response_source_content(content, fieldname)
        source_hash = hashing.response_source_hash(source)
        inserted = insert_missing(
            ResponseSource,
            [
                {
                    "hash": source_hash,
                    "content": source,
                    "label": source["label"],
                    "interface": source["interface"]["name"],
                }
            ],
        )
        self._record(ComponentKind.RESPONSE_SOURCE, inserted)
        return source_hash, bool(inserted)

    def prepare_environment(self, content: Any, fieldname: str) -> tuple[str, str]:
        reject_nul(content, fieldname)
        text = validate_environment_content(content, fieldname)
        return hashing.environment_hash(text), text

    def store_environments(self, prepared: Iterable[tuple[str, str]]) -> set[str]:
        rows = [{"hash": h, "content": text} for h, text in prepared]
        inserted = insert_missing(Environment, rows)
        self._record(ComponentKind.ENVIRONMENT, inserted)
        return inserted

    def prepare_entity(self, content: Any, fieldname: str) -> tuple[str, dict[str, Any]]:
        reject_nul(content, fieldname)
        entity = normalize_entity_content(content, fieldname)
        return hashing.entity_hash(entity), entity

    def store_entities(self, prepared: Iterable[tuple[str, dict[str, Any]]]) -> set[str]:
        rows = [
            {
                "hash": h,
                "content": entity,
                "entity_id": entity["id"],
                "is_agent": isinstance(entity["kind"], dict),
            }
            for h, entity in prepared
        ]
        inserted = insert_missing(Entity, rows)
        self._record(ComponentKind.ENTITY, inserted)
        return inserted

    # --- workflows and profiles -------------------------------------------------------------

    def _resolve_inline_refs(self, value: Any, path: str) -> Any:
        """Replace every ``{"inline": …}`` under a known ``*_ref`` key with ``{"hash": …}``."""
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                child = f"{path}.{key}" if path else key
                kind = REF_KINDS.get(key) if isinstance(key, str) else None
                if kind is not None and isinstance(item, dict) and set(item) == {"inline"}:
                    if kind == JSON_SCHEMA:
                        ref_hash, _ = self.put_json_schema(item["inline"], f"{child}.inline")
                    else:
                        ref_hash, _ = self.put_response_source(item["inline"], f"{child}.inline")
                    out[key] = {"hash": ref_hash}
                elif kind is not None or key in OPAQUE_KEYS:
                    out[key] = item  # validated (shape and existence) by validate_workflow
                else:
                    out[key] = self._resolve_inline_refs(item, child)
            return out
        if isinstance(value, list):
            return [self._resolve_inline_refs(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return value

    def put_workflow(self, content: Any, fieldname: str = "content") -> tuple[str, bool]:
        reject_nul(content, fieldname)
        if not isinstance(content, dict):
            raise invalid(
                "invalid_workflow", fieldname, f"must be an object, got {type_name(content)}"
            )
        resolved = self._resolve_inline_refs(copy.deepcopy(content), "")
        refs = [(p, k, v) for p, k, _kind, v in iter_refs(resolved)]
        hashes = {
            v["hash"]
            for _p, _k, v in refs
            if isinstance(v, dict) and isinstance(v.get("hash"), str)
        }
        lookup: dict[str, StoredRef] = {}
        if hashes:
            for h in JsonSchema.objects.filter(pk__in=hashes).values_list("pk", flat=True):
                lookup[h] = StoredRef(JSON_SCHEMA)
            for h, iface in ResponseSource.objects.filter(pk__in=hashes).values_list(
                "pk", "interface"
            ):
                lookup[h] = StoredRef(RESPONSE_SOURCE, iface)
        try:
            validate_workflow(resolved, lookup=lookup, world_patch_hash=world_patch_schema_hash())
        except ChukwaError as exc:
            # Workflow paths are relative to the workflow; report them from the request root.
            where = exc.details.get("field", "")
            full = f"{fieldname}.{where}" if where else fieldname
            exc.details["field"] = full
            exc.message = f"{full}: {exc.message.split(': ', 1)[-1]}"
            raise
        workflow_hash = hashing.cognition_workflow_hash(resolved)
        inserted = insert_missing(CognitionWorkflow, [{"hash": workflow_hash, "content": resolved}])
        if inserted:
            WorkflowComponentRef.objects.bulk_create(
                [
                    WorkflowComponentRef(
                        workflow_id=workflow_hash,
                        kind=REF_KINDS[key],
                        component_hash=value["hash"],
                        path=path,
                    )
                    for path, key, value in refs
                ],
                ignore_conflicts=True,
            )
        self._record(ComponentKind.COGNITION_WORKFLOW, inserted)
        return workflow_hash, bool(inserted)

    def put_profile(self, content: Any, fieldname: str = "content") -> tuple[str, bool, str]:
        """Authored ``{"workflow": ref}`` or stored ``{"workflow_hash": H}`` → profile hash."""
        if isinstance(content, dict) and set(content) == {"workflow_hash"}:
            workflow_hash = content["workflow_hash"]
            if not is_hash(workflow_hash):
                raise invalid(
                    "invalid_hash",
                    f"{fieldname}.workflow_hash",
                    f"{_short(workflow_hash)} is not a lowercase sha256 hex",
                )
            self.require_existing(
                ComponentKind.COGNITION_WORKFLOW, {f"{fieldname}.workflow_hash": workflow_hash}
            )
        elif isinstance(content, dict) and set(content) == {"workflow"}:
            mode, payload = parse_ref(content["workflow"], f"{fieldname}.workflow")
            if mode == "inline":
                workflow_hash, _ = self.put_workflow(payload, f"{fieldname}.workflow.inline")
            else:
                workflow_hash = payload
                self.require_existing(
                    ComponentKind.COGNITION_WORKFLOW, {f"{fieldname}.workflow.hash": workflow_hash}
                )
        else:
            raise invalid(
                "invalid_cognition_profile",
                fieldname,
                'must be {"workflow": {"hash": H}}, {"workflow": {"inline": <workflow>}} or '
                f'{{"workflow_hash": H}}, got {_short(content)}',
            )
        profile_hash = hashing.cognition_profile_hash(workflow_hash)
        inserted = insert_missing(
            CognitionProfile, [{"hash": profile_hash, "workflow": workflow_hash}]
        )
        self._record(ComponentKind.COGNITION_PROFILE, inserted)
        return profile_hash, bool(inserted), workflow_hash

    # --- metrics ----------------------------------------------------------------------------

    def put_metric(self, content: Any, fieldname: str = "content") -> tuple[str, bool]:
        """A judge's ``source`` may be inline (stored first, like a workflow's references)."""
        reject_nul(content, fieldname)
        if not isinstance(content, dict):
            raise invalid(
                "invalid_metric", fieldname, f"must be an object, got {type_name(content)}"
            )
        metric = copy.deepcopy(content)
        lookup: dict[str, StoredRef] = {}
        # the content key naming the LLM source its kind calls (a judge's "source"), if any; an
        # unknown kind is refused by the validation below, in its order of fields
        kind = registered_kind(metric.get("kind"))
        key = kind.source_key if kind is not None else None
        source = metric.get(key) if key is not None else None
        if key is not None and isinstance(source, dict) and set(source) == {"inline"}:
            source_hash, _ = self.put_response_source(source["inline"], f"{fieldname}.{key}.inline")
            metric[key] = source = {"hash": source_hash}
        if isinstance(source, dict) and is_hash(source.get("hash")):
            for h, iface in ResponseSource.objects.filter(pk=source["hash"]).values_list(
                "pk", "interface"
            ):
                lookup[h] = StoredRef(RESPONSE_SOURCE, iface)
        metric = validate_metric_content(metric, lookup, fieldname)
        metric_hash = hashing.metric_hash(metric)
        source_edge = metric[key]["hash"] if key is not None else None
        inserted = insert_missing(
            Metric,
            [
                {
                    "hash": metric_hash,
                    "content": metric,
                    "label": metric["label"],
                    "kind": metric["kind"],
                    "source": source_edge,
                }
            ],
        )
        self._record(ComponentKind.METRIC, inserted)
        return metric_hash, bool(inserted)

    # --- populations ------------------------------------------------------------------------

    def put_population(self, content: Any, fieldname: str = "content") -> tuple[str, bool]:
        reject_nul(content, fieldname)
        population = validate_population(content, fieldname)
        population_hash = hashing.population_hash(population)
        inserted = insert_missing(
            Population,
            [
                {
                    "hash": population_hash,
                    "content": population,
                    "label": population["label"],
                    "size": population["size"],
                    "sampler": population["sampler"],
                }
            ],
        )
        self._record(ComponentKind.POPULATION, inserted)
        return population_hash, bool(inserted)

    def resolve_profile_ref(self, value: Any, fieldname: str) -> str:
        mode, payload = parse_ref(value, fieldname)
        if mode == "inline":
            return self.put_profile(payload, f"{fieldname}.inline")[0]
        self.require_existing(ComponentKind.COGNITION_PROFILE, {f"{fieldname}.hash": payload})
        return payload
