"""A generation served from a recording: the recorded reply, judged afresh, written
as this call's rows with no byte sent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.utils import timezone

from cognition_app.models import InvocationStatus, LlmCall, LlmChunk, SourceInvocation
from cognition_app.rows import insert_statement
from cognition_app.sources.generation import CHUNK_ROWS, Generation, Judge, verdict_fields
from cognition_app.sources.tracing import CallContext, open_rows


def replayed_generation(
    ctx: CallContext,
    inv: SourceInvocation,
    record: SourceInvocation,
    payload: dict[str, Any],
    params: dict[str, Any],
    response_format: dict[str, Any] | None,
    judge: Judge | None,
) -> Generation:
    """Serve a generation from ``record``: its text, chunks and usage copied into rows of this
    call, judged afresh by this call's judge (pure), no byte sent. Nothing is open while it
    runs, so both rows are written once, already finished, with the chunks."""
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
    call = LlmCall(
        invocation=inv,
        base_url=original.base_url,
        requested_model=payload["model"],
        messages=payload["messages"],
        params=params,
        response_format=response_format,
        started_at=inv.started_at,
    )
    gen = Generation(
        text=text, invocation=inv, call=call, finish_reason=original.finish_reason, usage=usage
    )
    gen.judgement = judge(text) if judge is not None else None
    call_verdict, inv_verdict = verdict_fields(gen.judgement)
    now = timezone.now()
    for name, value in {
        **call_verdict,
        "status": InvocationStatus.SUCCEEDED,
        "ended_at": now,
        "ttft_ms": original.ttft_ms,
        "raw_text": text,
        "normalized_text": original.normalized_text,
        "finish_reason": original.finish_reason,
        "response_model": original.response_model,
        "prompt_tokens": original.prompt_tokens,
        "completion_tokens": original.completion_tokens,
        "cached_tokens": original.cached_tokens,
        "usage_source": original.usage_source,
        # Served from the record: nothing was sent, nothing spent (a known zero, so replayed
        # calls neither show as "unknown" cost nor count against a budget).
        "cost": Decimal(0),
    }.items():
        setattr(call, name, value)
    for name, value in {
        **inv_verdict,
        "status": InvocationStatus.SUCCEEDED,
        "ended_at": now,
        "duration_ms": int((now - inv.started_at).total_seconds() * 1000),
        "response_text": text,
        "http_status": record.http_status,
        "response_headers": record.response_headers,
    }.items():
        setattr(inv, name, value)
    chunks = [
        (call.pk, seq, offset_ms, chunk)
        for seq, offset_ms, chunk in LlmChunk.objects.filter(call_id=original.pk)
        .order_by("seq")
        .values_list("seq", "offset_ms", "text")
    ]
    open_rows(ctx, [insert_statement(inv), insert_statement(call), *CHUNK_ROWS.statements(chunks)])
    return gen
