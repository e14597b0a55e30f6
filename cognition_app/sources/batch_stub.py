"""STUB of ha's core (CallContext.batch_owner in invoke_llm), only so that batch mode can be
tested before it lands; replaced by ha's code on merge."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from cognition_app import batches
from cognition_app.failures import SourceFailure
from cognition_app.models import BatchRequest
from cognition_app.recording import GenerationRecord
from cognition_app.sources.generation import Generation, Judge, verdict_fields


def batched_or_pending(
    rows_of: Any,
    *,
    source_hash: str,
    reuse_key: str,
    payload: dict[str, Any],
    owner: str,
    judge: Judge | None,
) -> Generation:
    request = (
        BatchRequest.objects.filter(reuse_key=reuse_key)
        .exclude(status=batches.CANCELLED)
        .order_by("-created_at")
        .first()
    )
    if request is None or (request.status == batches.FAILED and request.owner != owner):
        request = batches.enqueue(
            source_hash=source_hash, reuse_key=reuse_key, body=payload, owner=owner
        )
    if request.status == batches.FAILED:
        raise SourceFailure(request.failure_class or "batch_failed", "the batch failed")
    if request.status != batches.COMPLETED:
        raise batches.BatchPending(request.pk, f"waiting for batch request {request.pk}")
    body = request.response_body or {}
    text = body["choices"][0]["message"]["content"]
    usage = body.get("usage") or {}
    rows: GenerationRecord = rows_of()
    gen = Generation(
        text=text,
        invocation=rows.invocation,
        call=rows.call,
        finish_reason=body["choices"][0].get("finish_reason"),
        usage=usage,
    )
    gen.judgement = judge(text) if judge is not None else None
    call_verdict, inv_verdict = verdict_fields(gen.judgement)
    rows.write_replayed(
        call_fields={
            **call_verdict,
            "raw_text": text,
            "normalized_text": text,
            "finish_reason": gen.finish_reason,
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "cost": Decimal(0),
        },
        invocation_fields={**inv_verdict, "response_text": text, "http_status": 200},
        chunks=[(0, 0, text)],
    )
    return gen
