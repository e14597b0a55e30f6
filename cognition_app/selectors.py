"""Reads for traces: source invocations, LLM calls and their streamed chunks."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Substr

from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import is_url_env_name
from cognition_app.models import (
    InvocationKind,
    InvocationStatus,
    LlmCall,
    LlmChunk,
    ModelPrice,
    SourceInvocation,
)
from scenarios_app.services._store import reject_nul
from scenarios_app.sql_rows import fetch_dict, fetch_dicts

SUMMARY_FIELDS = (
    "id",
    "seq",
    "kind",
    "status",
    "source_hash",
    "source_label",
    "workflow_hash",
    "node_id",
    "subject_id",
    "ambient_source_id",
    "tool_name",
    "parent_id",
    "failure_class",
    "failure_message",
    "started_at",
    "ended_at",
    "duration_ms",
    "http_status",
    "validation_status",
    "generation_attempt",
    "tool_loop_round",
    "model_output_kind",
    "request_key",
    "replayed_from",
    "reused_from",
    "retry_of_id",
    "limit_wait_ms",
    "limit_wait",
)


def _uuid(value: str, field: str) -> UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise invalid("invalid_id", field, f"{value!r} is not a UUID") from None


def _summary_columns() -> str:
    column = {f.attname: f.column for f in SourceInvocation._meta.concrete_fields}
    return ", ".join(f"inv.{column[name]} AS {name}" for name in SUMMARY_FIELDS)


def invocation_summaries(*, attempt_id: UUID) -> list[dict[str, Any]]:
    """An attempt's invocations in order, each with its LLM call's id, usage and cost (null
    when it made none). Plain SQL: the attempt page and API read it on every request."""
    rows = fetch_dicts(
        # the column list is built from the model's own field names; the id is a parameter
        f"SELECT {_summary_columns()}, c.cost AS cost, c.cost_estimated AS cost_estimated, "  # noqa: S608
        "c.id AS llm_call_id, c.prompt_tokens AS prompt_tokens, "
        "c.completion_tokens AS completion_tokens, c.ttft_ms AS ttft_ms, "
        "c.tokens_reused AS tokens_reused, c.cost_saved AS cost_saved "
        "FROM cognition_app_sourceinvocation inv "
        "LEFT JOIN cognition_app_llmcall c ON c.invocation_id = inv.id "
        "WHERE inv.attempt_id = %s ORDER BY inv.seq",
        [attempt_id],
    )
    for row in rows:
        row["cost_estimated"] = bool(row["cost_estimated"])
    return rows


def invocation_get(*, invocation_id: str) -> dict[str, Any]:
    pk = _uuid(invocation_id, "invocation_id")
    inv = SourceInvocation.objects.select_related("world").filter(pk=pk).first()
    if inv is None:
        raise NotFoundError(
            "invocation_not_found",
            f"invocation_id: no source invocation {pk}",
            {"field": "invocation_id"},
        )
    call_id = LlmCall.objects.filter(invocation_id=pk).values_list("id", flat=True).first()
    return {
        **{f: getattr(inv, f if f != "parent_id" else "parent_id") for f in SUMMARY_FIELDS},
        "attempt_id": inv.attempt_id,
        "world": inv.world.slug if inv.world is not None else "",  # "": a biography's
        "attempted_turn": inv.attempted_turn,
        "request": inv.request,
        "response_json": inv.response_json,
        "response_text": inv.response_text,
        "response_headers": inv.response_headers,
        "input_schema_hash": inv.input_schema_hash,
        "output_schema_hash": inv.output_schema_hash,
        "validation_errors": inv.validation_errors,
        "llm_call_id": call_id,
    }


def llm_call_get(*, call_id: str) -> dict[str, Any]:
    pk = _uuid(call_id, "call_id")
    call = LlmCall.objects.select_related("invocation").filter(pk=pk).first()
    if call is None:
        raise NotFoundError(
            "llm_call_not_found", f"call_id: no LLM call {pk}", {"field": "call_id"}
        )
    chunks = list(
        LlmChunk.objects.filter(call=call).order_by("seq").values("seq", "offset_ms", "text")
    )
    inv = call.invocation
    return {
        "id": call.pk,
        "invocation_id": inv.pk,
        "attempt_id": inv.attempt_id,
        "subject_id": inv.subject_id,
        "node_id": inv.node_id,
        "generation_attempt": inv.generation_attempt,
        "status": call.status,
        "base_url": call.base_url,
        "requested_model": call.requested_model,
        "response_model": call.response_model,
        "messages": call.messages,
        "params": call.params,
        "response_format": call.response_format,
        "started_at": call.started_at,
        "ended_at": call.ended_at,
        "ttft_ms": call.ttft_ms,
        "raw_text": call.raw_text or "".join(c["text"] for c in chunks),
        "normalized_text": call.normalized_text,
        "finish_reason": call.finish_reason,
        "usage": {
            "prompt_tokens": call.prompt_tokens,
            "completion_tokens": call.completion_tokens,
            "cached_tokens": call.cached_tokens,
            "source": call.usage_source,
        },
        "cost": call.cost,  # null: no price matched, shown "unknown" (never 0)
        "cost_estimated": call.cost_estimated,
        "reused_from": inv.reused_from,
        "tokens_reused": call.tokens_reused,
        "cost_saved": call.cost_saved,
        "price_id": call.price_id,
        "parse_error": call.parse_error,
        "validation_errors": call.validation_errors,
        "artifacts": call.artifacts,
        "error": call.error,
        "chunks": chunks,
    }


# --- the LLM-call index ------------------------------------------------------------

# What became of a call, as a reviewer reads it: a call whose text was refused (unparsable, or
# against the schema) is "rejected" even though its transport succeeded, never "succeeded".
CALL_OUTCOMES = ("running", "accepted", "rejected", "failed", "interrupted", "cancelled")
_REJECTED = ~Q(parse_error="") | ~Q(validation_errors=[])
PROBLEM_CHARS = 300


class LlmCallFilters(TypedDict, total=False):
    """What the surfaces' filter serializer validated; every key is optional."""

    status: str  # one of CALL_OUTCOMES
    world: str
    subject: str
    model: str  # requested or answering model
    experiment: str  # an experiment's slug: its worlds' calls only
    arm: str  # an arm's label: the calls of that arm's worlds only
    since: datetime  # started at or after
    until: datetime  # started before


def _outcome_filter(outcome: str) -> Q:
    if outcome == "accepted":
        return Q(status=InvocationStatus.SUCCEEDED) & ~_REJECTED
    if outcome == "rejected":
        return Q(status=InvocationStatus.SUCCEEDED) & _REJECTED
    return Q(status=outcome)


def call_outcome(status: str, parse_error: str, validation_errors: Any) -> str:
    if status == InvocationStatus.SUCCEEDED:
        return "rejected" if parse_error or validation_errors else "accepted"
    return status


def _problem(row: Mapping[str, Any]) -> str:
    errors = row["validation_errors"] or []
    first = errors[0] if errors else ""
    if row["error"]:
        text = row["error"]
    elif row["parse_error"]:
        text = f"parse error: {row['parse_error']}"
    elif errors:
        text = "schema: " + (first.get("message", "") if isinstance(first, dict) else str(first))
    else:
        text = ""
    return text if len(text) <= PROBLEM_CHARS else text[: PROBLEM_CHARS - 1] + "…"


PREVIEW_CHARS = 120

# The LLM call index's columns read as stored (besides those it derives or renames).
_CALL_INDEX_FIELDS = (
    "requested_model",
    "response_model",
    "started_at",
    "ended_at",
    "ttft_ms",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "cost_estimated",
    "finish_reason",
)


def llm_call_list(*, filters: LlmCallFilters, limit: int, offset: int) -> dict[str, Any]:
    """LLM calls of every world, newest first: two queries whatever the page size."""
    qs = LlmCall.objects.all()
    if "status" in filters:
        qs = qs.filter(_outcome_filter(filters["status"]))
    if "world" in filters:
        # a lookup through the foreign key (a schema link), not an import of the worlds app
        qs = qs.filter(invocation__world__slug=filters["world"])
    if "experiment" in filters:
        qs = qs.filter(invocation__world__experiment__slug=filters["experiment"])
    if "arm" in filters:
        qs = qs.filter(invocation__world__arm=filters["arm"])
    if "subject" in filters:
        qs = qs.filter(invocation__subject_id=filters["subject"])
    if "model" in filters:
        model = filters["model"]
        qs = qs.filter(Q(requested_model=model) | Q(response_model=model))
    if "since" in filters:
        qs = qs.filter(started_at__gte=filters["since"])
    if "until" in filters:
        qs = qs.filter(started_at__lt=filters["until"])
    rows = (
        qs.order_by("-started_at", "id")
        .annotate(
            # the reply's beginning only: a long reply is never read whole for a list
            preview=Substr("raw_text", 1, PREVIEW_CHARS)
        )
        .values(
            "id",
            "status",
            "preview",
            *_CALL_INDEX_FIELDS,
            "parse_error",
            "validation_errors",
            "error",
            "invocation_id",
            "invocation__attempt_id",
            "invocation__world__slug",
            "invocation__attempted_turn",
            "invocation__subject_id",
            "invocation__node_id",
            "invocation__generation_attempt",
        )[offset : offset + limit]
    )
    results = []
    for row in rows:
        results.append(
            {
                "id": row["id"],
                "outcome": call_outcome(
                    row["status"], row["parse_error"], row["validation_errors"]
                ),
                "status": row["status"],
                "problem": _problem(row),
                "world": row["invocation__world__slug"] or "",
                "attempt_id": row["invocation__attempt_id"],
                "invocation_id": row["invocation_id"],
                "attempted_turn": row["invocation__attempted_turn"],
                "subject_id": row["invocation__subject_id"],
                "node_id": row["invocation__node_id"],
                "generation_attempt": row["invocation__generation_attempt"],
                "preview": " ".join(row["preview"].split()),
                "latency_ms": (
                    round((row["ended_at"] - row["started_at"]).total_seconds() * 1000)
                    if row["ended_at"] is not None
                    else None
                ),
                **{k: row[k] for k in _CALL_INDEX_FIELDS},
            }
        )
    return {"count": qs.count(), "limit": limit, "offset": offset, "results": results}


class InvocationFilters(TypedDict, total=False):
    """What the surfaces' filter serializer validated; every key is optional."""

    kind: str  # an InvocationKind
    source: str  # the source's label, or the tool's name for a tool call
    subject: str
    status: str  # an InvocationStatus
    world: str
    experiment: str  # an experiment's slug: its worlds' calls only
    arm: str  # an arm's label: the calls of that arm's worlds only
    since: datetime  # started at or after
    until: datetime  # started before


def source_invocation_list(
    *, filters: InvocationFilters, limit: int, offset: int
) -> dict[str, Any]:
    """Every source call of every world (generations, ambient sources, tools, conformance
    checks), newest first: two queries whatever the page size."""
    qs = SourceInvocation.objects.all()
    if "kind" in filters:
        qs = qs.filter(kind=filters["kind"])
    if "source" in filters:
        qs = qs.filter(Q(source_label=filters["source"]) | Q(tool_name=filters["source"]))
    if "subject" in filters:
        qs = qs.filter(subject_id=filters["subject"])
    if "status" in filters:
        qs = qs.filter(status=filters["status"])
    if "world" in filters:
        # a lookup through the foreign key (a schema link), not an import of the worlds app
        qs = qs.filter(world__slug=filters["world"])
    if "experiment" in filters:
        qs = qs.filter(world__experiment__slug=filters["experiment"])
    if "arm" in filters:
        qs = qs.filter(world__arm=filters["arm"])
    if "since" in filters:
        qs = qs.filter(started_at__gte=filters["since"])
    if "until" in filters:
        qs = qs.filter(started_at__lt=filters["until"])
    rows = qs.order_by("-started_at", "id").values(
        "id",
        "kind",
        "source_label",
        "source_hash",
        "tool_name",
        "ambient_source_id",
        "status",
        "failure_class",
        "failure_message",
        "attempt_id",
        "world__slug",
        "attempted_turn",
        "subject_id",
        "node_id",
        "started_at",
        "duration_ms",
        "http_status",
        "request",
        "llm_call__id",
    )[offset : offset + limit]
    results = [
        {
            "id": row["id"],
            "kind": row["kind"],
            # what a reader calls it: the tool's name for a tool call, else the source's label
            "source": row["tool_name"] or row["source_label"] or row["source_hash"][:12],
            "source_hash": row["source_hash"],
            "status": row["status"],
            "failure_class": row["failure_class"],
            "problem": row["failure_message"][:300],
            "world": row["world__slug"] or "",
            "attempt_id": row["attempt_id"],
            "attempted_turn": row["attempted_turn"],
            "subject_id": row["subject_id"],
            "node_id": row["node_id"],
            "started_at": row["started_at"],
            "duration_ms": row["duration_ms"],
            "http_status": row["http_status"],
            "arguments": _arguments(row),
            "llm_call_id": row["llm_call__id"],
        }
        for row in rows
    ]
    return {"count": qs.count(), "limit": limit, "offset": offset, "results": results}


def tool_calls_of_attempt(*, attempt_id: UUID) -> list[dict[str, Any]]:
    """An attempt's tool calls (model-elected and rule-planned) in the order they were made:
    who called what, with which arguments, and what came back."""
    rows = (
        SourceInvocation.objects.filter(
            attempt_id=attempt_id, kind=InvocationKind.MODEL_ELECTED_TOOL
        )
        .order_by("seq")
        .values(
            "id",
            "kind",
            "seq",
            "subject_id",
            "node_id",
            "tool_name",
            "source_label",
            "status",
            "failure_class",
            "failure_message",
            "request",
            "response_json",
            "duration_ms",
        )
    )
    return [
        {
            "id": row["id"],
            "seq": row["seq"],
            "subject_id": row["subject_id"],
            "node_id": row["node_id"],
            "tool": row["tool_name"] or row["source_label"],
            "status": row["status"],
            "failure": row["failure_message"][:300] if row["failure_class"] else "",
            "arguments": _arguments(row),
            "result": row["response_json"],
            "duration_ms": row["duration_ms"],
        }
        for row in rows
    ]


def _arguments(row: Mapping[str, Any]) -> Any:
    """A tool call's arguments as it was sent (``request.arguments`` or ``request.body``);
    null for other kinds."""
    if row["kind"] != InvocationKind.MODEL_ELECTED_TOOL:
        return None
    request = row["request"] if isinstance(row["request"], dict) else {}
    return request.get("arguments", request.get("body"))


# --- cost totals --------------------------------------------------------------------


class TokenTotals(TypedDict):
    prompt: int
    completion: int
    cached: int
    total: int


class CostTotals(TypedDict):
    total: Decimal | None  # the sum of the known costs; null when no call has one
    unknown_calls: int  # calls without a cost (no price matched, or no usage): not in total
    estimated_calls: int  # calls whose cost comes from estimated usage
    calls: int
    tokens: TokenTotals
    calls_reused: int  # calls answered from a recorded call (reuse): nothing sent, cost 0
    tokens_reused: int  # their tokens: not spent, not in tokens
    cost_saved: Decimal | None  # what they cost when sent; null when one of those had no price


_TOTALS = {
    "calls": Count("pk"),
    "priced": Count("pk", filter=Q(cost__isnull=False)),
    "unknown_calls": Count("pk", filter=Q(cost__isnull=True)),
    "estimated_calls": Count("pk", filter=Q(cost_estimated=True)),
    "cost": Sum("cost"),
    "prompt": Sum("prompt_tokens"),
    "completion": Sum("completion_tokens"),
    "cached": Sum("cached_tokens"),
    "reused": Count("pk", filter=Q(invocation__reused_from__isnull=False)),
    "unsaved": Count(
        "pk", filter=Q(invocation__reused_from__isnull=False, cost_saved__isnull=True)
    ),
    "reused_tokens": Sum("tokens_reused"),
    "saved": Sum("cost_saved"),
}


# The aggregate behind CostTotals over the LLM calls (alias ``c``) of the invocations (alias
# ``inv``) a WHERE clause appended by the caller picks; one row even when no call matches. Plain
# SQL: world, turn and attempt reads embed it (as a LATERAL subquery) on every request.
COST_TOTALS_SELECT = (
    "SELECT count(c.id) AS calls, "
    "count(c.id) FILTER (WHERE c.cost IS NOT NULL) AS priced, "
    "count(c.id) FILTER (WHERE c.cost IS NULL) AS unknown_calls, "
    "count(c.id) FILTER (WHERE c.cost_estimated) AS estimated_calls, "
    "sum(c.cost) AS cost, sum(c.prompt_tokens) AS prompt, "
    "sum(c.completion_tokens) AS completion, sum(c.cached_tokens) AS cached, "
    "count(c.id) FILTER (WHERE inv.reused_from IS NOT NULL) AS reused, "
    "count(c.id) FILTER (WHERE inv.reused_from IS NOT NULL AND c.cost_saved IS NULL) "
    "AS unsaved, sum(c.tokens_reused) AS reused_tokens, sum(c.cost_saved) AS saved "
    "FROM cognition_app_llmcall c "
    "JOIN cognition_app_sourceinvocation inv ON inv.id = c.invocation_id"
)
# The column names of COST_TOTALS_SELECT's row, for a caller prefixing them in its own select.
COST_TOTALS_COLUMNS = (
    "calls",
    "priced",
    "unknown_calls",
    "estimated_calls",
    "cost",
    "prompt",
    "completion",
    "cached",
    "reused",
    "unsaved",
    "reused_tokens",
    "saved",
)


def cost_totals_from_row(row: Mapping[str, Any], prefix: str = "") -> CostTotals:
    """CostTotals from COST_TOTALS_SELECT's columns (named ``prefix + column`` in ``row``)."""
    return _totals({name: row[prefix + name] for name in COST_TOTALS_COLUMNS})


def _totals(row: Mapping[str, Any]) -> CostTotals:
    prompt, completion = row["prompt"] or 0, row["completion"] or 0
    return {
        "total": row["cost"] if row["priced"] else None,
        "unknown_calls": row["unknown_calls"],
        "estimated_calls": row["estimated_calls"],
        "calls": row["calls"],
        "tokens": {
            "prompt": prompt,
            "completion": completion,
            "cached": row["cached"] or 0,
            "total": prompt + completion,
        },
        "calls_reused": row["reused"],
        "tokens_reused": row["reused_tokens"] or 0,
        "cost_saved": None if row["unsaved"] else (row["saved"] or Decimal(0)),
    }


def _calls(
    *, world_id: int, attempt_id: UUID | None = None, attempted_turn: int | None = None
) -> QuerySet[LlmCall]:
    calls = LlmCall.objects.filter(invocation__world_id=world_id)
    if attempt_id is not None:
        calls = calls.filter(invocation__attempt_id=attempt_id)
    if attempted_turn is not None:
        calls = calls.filter(invocation__attempted_turn=attempted_turn)
    return calls


def cost_totals(
    *, world_id: int, attempt_id: UUID | None = None, attempted_turn: int | None = None
) -> CostTotals:
    """Cost and tokens of a world's LLM calls — all, one attempt's, or those of every attempt
    at one turn (the failed ones too: they were spent on it). One query."""
    where: list[str] = ["inv.world_id = %s"]
    params: list[Any] = [world_id]
    if attempt_id is not None:
        where.append("inv.attempt_id = %s")
        params.append(attempt_id)
    if attempted_turn is not None:
        where.append("inv.attempted_turn = %s")
        params.append(attempted_turn)
    row = fetch_dict(f"{COST_TOTALS_SELECT} WHERE {' AND '.join(where)}", params)
    assert row is not None  # an aggregate without GROUP BY always has its one row
    return _totals(row)


def cost_totals_by_attempt(*, attempt_ids: Iterable[UUID]) -> dict[str, CostTotals]:
    """Totals of several attempts in one query, keyed by attempt id (as text); an attempt
    without LLM calls is absent."""
    rows = (
        LlmCall.objects.filter(invocation__attempt_id__in=list(attempt_ids))
        .values("invocation__attempt_id")
        .annotate(**_TOTALS)
        .order_by()
    )
    return {str(row["invocation__attempt_id"]): _totals(row) for row in rows}


def cost_totals_by_turn(
    *, world_id: int, turns: Iterable[int] | None = None
) -> dict[int, CostTotals]:
    """Totals per attempted turn of a world (every turn, or only ``turns``) in one query."""
    calls = _calls(world_id=world_id)
    if turns is not None:
        calls = calls.filter(invocation__attempted_turn__in=list(turns))
    rows = calls.values("invocation__attempted_turn").annotate(**_TOTALS).order_by()
    return {row["invocation__attempted_turn"]: _totals(row) for row in rows}


# --- prices ----------------------------------------------------------------------------------


PRICE_FIELDS = (
    "id",
    "url_env",
    "model",
    "input_per_million",
    "output_per_million",
    "cached_input_per_million",
    "batch_input_per_million",
    "batch_output_per_million",
    "batch_cached_input_per_million",
    "valid_from",
    "created_at",
    "created_by",
)


def model_price_list(
    *, url_env: str | None = None, model: str | None = None
) -> list[dict[str, Any]]:
    """Every price row (the history included), by pair, newest first within a pair."""
    rows = ModelPrice.objects.all()
    if url_env:
        if not is_url_env_name(url_env):
            shown = repr(url_env) if len(url_env) <= 64 else f"{url_env[:64]!r}…"
            raise invalid("invalid_query", "url_env", f"{shown} is not a URL variable name")
        rows = rows.filter(url_env=url_env)
    if model:
        # a query parameter PostgreSQL text cannot hold names no row: a 400, not a 500
        reject_nul(model, "model")
        rows = rows.filter(model=model)
    return list(rows.order_by("url_env", "model", "-valid_from").values(*PRICE_FIELDS))


# --- what the invocation and LLM call pages read besides the rows themselves ------------------


def llm_call_parse_error(*, call_id: UUID | None) -> str:
    if call_id is None:
        return ""
    found = LlmCall.objects.filter(pk=call_id).values_list("parse_error", flat=True).first()
    return found or ""


def invocation_children(*, invocation_id: UUID) -> list[dict[str, Any]]:
    """The calls an invocation made (a generation's tool calls), in order."""
    return [
        dict(row)
        for row in SourceInvocation.objects.filter(parent_id=invocation_id)
        .order_by("seq")
        .values(
            "id",
            "seq",
            "kind",
            "tool_name",
            "status",
            "duration_ms",
            "failure_class",
            "failure_message",
        )
    ]


def llm_call_last_message(*, call_id: UUID) -> Any:
    """A call's last request message, read inside PostgreSQL (a long conversation is never
    loaded for it)."""
    return (
        LlmCall.objects.filter(pk=call_id)
        .annotate(last=KeyTransform("-1", "messages"))
        .values_list("last", flat=True)
        .first()
    )


def invocation_row(*, invocation_id: UUID) -> dict[str, Any]:
    return dict(SourceInvocation.objects.values().get(pk=invocation_id))


def invocation_place(*, invocation_id: UUID) -> dict[str, Any] | None:
    """Where an invocation sits, for the crumbs: its world, attempt and number in it."""
    found = (
        SourceInvocation.objects.filter(pk=invocation_id)
        .values("world__slug", "attempt__seq", "seq")
        .first()
    )
    return dict(found) if found is not None else None
