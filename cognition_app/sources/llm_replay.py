"""A generation served from a recording: the recorded reply, judged afresh, written
as this call's rows with no byte sent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import connection

from cognition_app.models import LlmCall, LlmChunk, SourceInvocation
from cognition_app.recording import GenerationRecord
from cognition_app.sources.generation import Generation, Judge, verdict_fields
from scenarios_app.sql_rows import fetch_tuples


def replayed_generation(
    rows: GenerationRecord, record: SourceInvocation, judge: Judge | None, *, reused: bool = False
) -> Generation:
    """Serve a generation from ``record``: its text, chunks and usage copied into ``rows`` (this
    call's), judged afresh by this call's judge (pure), no byte sent. Nothing is open while it
    runs, so both rows are written once, already finished, with the chunks. ``reused`` (reuse,
    not replay): its tokens are counted as reused, not spent, and the original's cost as saved."""
    original: LlmCall = record.llm_call
    text = original.raw_text
    usage = {
        name: value
        for name, value in (
            ("prompt_tokens", original.prompt_tokens),
            ("completion_tokens", original.completion_tokens),
            ("cached_tokens", original.cached_tokens),
        )
        if value is not None
    }
    gen = Generation(
        text=text,
        invocation=rows.invocation,
        call=rows.call,
        finish_reason=original.finish_reason,
        usage=usage,
    )
    gen.judgement = judge(text) if judge is not None else None
    call_verdict, inv_verdict = verdict_fields(gen.judgement)
    rows.write_replayed(
        call_fields={
            **call_verdict,
            "ttft_ms": original.ttft_ms,
            "raw_text": text,
            "normalized_text": original.normalized_text,
            "finish_reason": original.finish_reason,
            "response_model": original.response_model,
            **(_reused_usage(original) if reused else _replayed_usage(original)),
            # Served from the record: nothing was sent, nothing spent (a known zero, so
            # replayed calls neither show as "unknown" cost nor count against a budget).
            "cost": Decimal(0),
        },
        invocation_fields={
            **inv_verdict,
            "response_text": text,
            "http_status": record.http_status,
            "response_headers": record.response_headers,
        },
        chunks=_chunks(original.pk),
    )
    return gen


# A recorded call's chunks in order: a statement written once, not a queryset compiled on
# every reused or replayed generation. (Identifiers from the model, quoted.)
_CHUNKS = (
    f"SELECT seq, offset_ms, text FROM {connection.ops.quote_name(LlmChunk._meta.db_table)} "  # noqa: S608
    "WHERE call_id = %s ORDER BY seq"
)


def _chunks(call_id: Any) -> list[tuple[int, int, str]]:
    # bound server-side: prepared on a connection that reads chunks often
    return [(seq, offset_ms, text) for seq, offset_ms, text in fetch_tuples(_CHUNKS, [call_id])]


def _replayed_usage(original: LlmCall) -> dict[str, Any]:
    return {
        "prompt_tokens": original.prompt_tokens,
        "completion_tokens": original.completion_tokens,
        "cached_tokens": original.cached_tokens,
        "usage_source": original.usage_source,
    }


def _reused_usage(original: LlmCall) -> dict[str, Any]:
    """Nothing spent: the original's tokens counted as reused, its cost as saved (unknown when
    the original's was)."""
    return {
        "tokens_reused": (original.prompt_tokens or 0) + (original.completion_tokens or 0),
        "cost_saved": original.cost,
        "usage_source": "reused",
    }
