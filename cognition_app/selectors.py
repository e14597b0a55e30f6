"""Reads for traces: source invocations, LLM calls and their streamed chunks."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from chukwa_core.errors import NotFoundError, invalid
from cognition_app.models import LlmCall, LlmChunk, SourceInvocation

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
)


def _uuid(value: str, field: str) -> UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise invalid("invalid_id", field, f"{value!r} is not a UUID") from None


def invocation_summaries(*, attempt_id: UUID) -> list[dict[str, Any]]:
    rows = list(
        SourceInvocation.objects.filter(attempt_id=attempt_id)
        .order_by("seq")
        .values(
            *SUMMARY_FIELDS,
            "llm_call__id",
            "llm_call__prompt_tokens",
            "llm_call__completion_tokens",
            "llm_call__ttft_ms",
        )
    )
    for row in rows:
        row["llm_call_id"] = row.pop("llm_call__id")
        row["prompt_tokens"] = row.pop("llm_call__prompt_tokens")
        row["completion_tokens"] = row.pop("llm_call__completion_tokens")
        row["ttft_ms"] = row.pop("llm_call__ttft_ms")
    return rows


def invocation_get(*, invocation_id: str) -> dict[str, Any]:
    pk = _uuid(invocation_id, "invocation_id")
    inv = SourceInvocation.objects.select_related("attempt__world").filter(pk=pk).first()
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
        "world": inv.attempt.world.slug,
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
        "parse_error": call.parse_error,
        "validation_errors": call.validation_errors,
        "artifacts": call.artifacts,
        "error": call.error,
        "chunks": chunks,
    }
