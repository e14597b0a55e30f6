"""The rows of one LLM generation: its invocation, its ``LlmCall`` and its streamed chunks,
written ``running`` before any byte is sent, chunks appended as they arrive (flushed by time, so
a generation's round trips do not grow with the length of its reply), and both rows finished
with the verdict and the cost in one round trip."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Self
from uuid import UUID

from django.utils import timezone

from chukwa_core.json_values import storable_text
from cognition_app.costs import price_from_rows, price_statement, usage_cost
from cognition_app.failures import SourceFailure
from cognition_app.models import (
    InvocationKind,
    InvocationStatus,
    LlmCall,
    LlmChunk,
    ModelPrice,
    SourceInvocation,
)
from cognition_app.recording.calls import CallOwner, CallRecord, log_finished
from cognition_app.recording.port import Recorder, trace_batch
from cognition_app.redaction import scrub, secret_values
from cognition_app.rows import (
    RowTable,
    Statement,
    delete_statement,
    insert_statement,
    update_statement,
)

# A generation's streamed chunks, as tuples: one multi-row INSERT per flush.
CHUNK_ROWS = RowTable.of(LlmChunk, ("call", "seq", "offset_ms", "text"))
# Chunks are flushed by time; CHUNK_BATCH only bounds the rows held in memory between flushes.
CHUNK_BATCH = 512
CHUNK_FLUSH_SECONDS = 0.25

# A judgement as row fields: (the LLM call's, the invocation's).
Verdict = tuple[dict[str, Any], dict[str, Any]]


class GenerationRecord(CallRecord):
    """A generation's rows: the invocation, its LLM call and its chunks."""

    checked = ("request",)  # parts of the payload, canonicalized by the caller
    _call_checked = ("messages", "params", "response_format")

    # the source has cluster-wide ``limits``: its endpoint's rate-limit headers are noted
    limited = False

    def __init__(self, invocation: SourceInvocation, recorder: Recorder, call: LlmCall) -> None:
        super().__init__(invocation, recorder)
        self.call = call
        self._pending: list[tuple[Any, ...]] = []  # chunk rows: (call_id, seq, offset_ms, text)
        self._seq = 0
        self._last_flush = time.monotonic()
        self._secrets: list[str] = []
        self.ttft_ms: int | None = None  # the first chunk's offset

    @classmethod
    def new_generation(
        cls,
        owner: CallOwner,
        *,
        source_hash: str,
        source: Mapping[str, Any],
        request: Any,
        request_key: str,
        output_schema_hash: str,
        base_url: str,
        model: str,
        messages: list[dict[str, str]],
        params: dict[str, Any],
        response_format: dict[str, Any] | None,
        base_url_env: str = "",
        price: ModelPrice | None = None,
        replayed_from: UUID | None = None,
        kind: str = InvocationKind.LLM_GENERATION,
        reuse_key: str = "",
        reused_from: UUID | None = None,
    ) -> Self:
        base = CallRecord.new(
            owner,
            kind=kind,
            source_hash=source_hash,
            source=source,
            request=request,
            request_key=request_key,
            output_schema_hash=output_schema_hash,
            replayed_from=replayed_from,
            reuse_key=reuse_key,
            reused_from=reused_from,
        )
        inv = base.invocation
        call = LlmCall(
            invocation=inv,
            base_url=base_url,
            requested_model=model,
            messages=messages,
            params=params,
            response_format=response_format,
            started_at=inv.started_at,
            base_url_env=base_url_env,
            price=price,
        )
        return cls(inv, owner.recorder, call)

    # --- opening -----------------------------------------------------------------------

    def _opening(self) -> list[Statement]:
        return [
            insert_statement(self.invocation, checked=self.checked),
            insert_statement(self.call, checked=self._call_checked),
        ]

    def open_reading_price(self, *, url_env: str, model: str) -> None:
        """:meth:`open`, reading the price in force in the same round trip (stored on the call
        when it finishes)."""
        at = self.invocation.started_at
        results = self.recorder.open(
            [*self._opening(), price_statement(url_env=url_env, model=model, at=at)]
        )
        self.call.price = price_from_rows(results[-1])

    def waited(self, waited_ms: int | None, limit: str) -> None:
        super().waited(waited_ms, limit)
        self.call.started_at = self.invocation.started_at

    def not_sent(self, failure: SourceFailure, status: str) -> SourceFailure:
        """The rows were opened before the call's limits were passed, and it was never sent (a
        limit refused it, or its attempt stopped while it waited): both finished ``status``
        now, spending nothing (a known zero); returns ``failure`` naming them."""
        inv = self.invocation
        message = storable_text(scrub(failure.message))
        trace_batch(
            [
                self._call_ended(
                    status,
                    message,
                    prompt_tokens=0,
                    completion_tokens=0,
                    cost=Decimal(0),
                    usage_source="not_sent",
                ),
                self.finish_statement(
                    status, failure_class=failure.failure_class, failure_message=message
                ),
            ]
        )
        log_finished(inv)
        failure.invocation_id = self.pk
        return failure

    def _call_ended(self, status: str, message: str, **fields: Any) -> Statement:
        """The UPDATE ending the LLM call row ``status`` with ``message`` and ``fields``, if it
        is still running (its start as the invocation's: :meth:`waited` may have moved it)."""
        values = {
            "status": status,
            "started_at": self.call.started_at,
            "ended_at": timezone.now(),
            "error": message,
            **fields,
        }
        return update_statement(LlmCall, self.call.pk, values, while_running=True)

    def refused(self, failure: SourceFailure) -> SourceFailure:
        """Nothing was sent: both rows written once, failed; the call spent nothing, a known
        zero (not an unknown cost)."""
        inv, call = self.invocation, self.call
        call.prompt_tokens = call.completion_tokens = 0
        call.cost, call.usage_source = Decimal(0), "not_sent"
        call.status = InvocationStatus.FAILED
        call.ended_at = inv.started_at
        call.error = failure.message
        return super().refused(failure)

    def write_replayed(
        self,
        *,
        call_fields: Mapping[str, Any],
        invocation_fields: Mapping[str, Any],
        chunks: list[tuple[int, int, str]],
    ) -> None:
        """A generation served from a recording: both rows once, already finished, with the
        recording's chunks (seq, offset_ms, text) copied as this call's."""
        inv, call = self.invocation, self.call
        now = timezone.now()
        for name, value in {**call_fields, "status": InvocationStatus.SUCCEEDED}.items():
            setattr(call, name, value)
        call.ended_at = now
        for name, value in {**invocation_fields, "status": InvocationStatus.SUCCEEDED}.items():
            setattr(inv, name, value)
        inv.ended_at = now
        inv.duration_ms = int((now - inv.started_at).total_seconds() * 1000)
        rows = [(call.pk, seq, offset_ms, text) for seq, offset_ms, text in chunks]
        self.recorder.open(
            [
                insert_statement(inv),
                insert_statement(call),
                *CHUNK_ROWS.statements(rows),
            ]
        )

    # --- the stream ------------------------------------------------------------------------

    def streaming(self) -> None:
        """The stream starts: the key values to keep out of its chunks are read once."""
        self._secrets = secret_values()
        self._last_flush = time.monotonic()

    def chunk(self, offset_ms: int, text: str) -> None:
        """A streamed piece of the reply (``offset_ms`` since the request), kept without any
        key in it; written with the others every ``CHUNK_FLUSH_SECONDS``."""
        if self.ttft_ms is None:
            self.ttft_ms = offset_ms
        self._pending.append(
            (str(self.call.pk), self._seq, offset_ms, storable_text(scrub(text, self._secrets)))
        )
        self._seq += 1
        now = time.monotonic()
        if len(self._pending) >= CHUNK_BATCH or now - self._last_flush >= CHUNK_FLUSH_SECONDS:
            trace_batch(self._chunk_statements())
            self._last_flush = now

    def _chunk_statements(self) -> list[Statement]:
        statements = list(CHUNK_ROWS.statements(self._pending))
        self._pending.clear()
        return statements

    def stream_failed(
        self,
        status: str,
        failure_class: str,
        message: str,
        *,
        reply: str,
        http_status: int | None,
        response_headers: Mapping[str, str],
        response_text: str = "",
    ) -> str:
        """Both rows finished ``status`` (failed or cancelled) with the chunks not yet written,
        in one round trip; ``reply`` is what arrived (kept without any key). Returns the stored
        message."""
        inv, call = self.invocation, self.call
        text = storable_text(scrub(reply, self._secrets))
        message = storable_text(scrub(message, self._secrets))
        trace_batch(
            [
                *self._chunk_statements(),
                self._call_ended(
                    status, message, raw_text=text, ttft_ms=self.ttft_ms, price=call.price
                ),
                self.finish_statement(
                    status,
                    failure_class=failure_class,
                    failure_message=message,
                    http_status=http_status,
                    response_headers=dict(response_headers),
                    response_text=storable_text(scrub(response_text, self._secrets)) or text,
                ),
            ]
        )
        log_finished(inv)
        return message

    def kept_text(self, reply: str) -> str:
        """The reply as it is stored, shown and sent back to the model on a retry: without any
        key in it (the judge reads :meth:`scrubbed`), storable."""
        return storable_text(self.scrubbed(reply))

    def scrubbed(self, reply: str) -> str:
        return scrub(reply, self._secrets)

    def stream_succeeded(
        self,
        *,
        reply: str,
        finish_reason: str,
        response_model: str,
        usage: Mapping[str, int],
        usage_source: str,
        http_meta: Mapping[str, Any],
        verdict: Verdict,
        after: Callable[[], None] | None,
        through_recorder: bool = True,
    ) -> None:
        """The last chunks, both rows finished ``succeeded`` with the verdict and the cost, in
        one transaction and one round trip: through the recorder (then ``after``), or — when the
        judge raised, which then propagates to :meth:`guard` — sent now."""
        inv, call = self.invocation, self.call
        scrubbed = self.scrubbed(reply)
        text = storable_text(scrubbed)
        statements = self._chunk_statements()
        if scrubbed != reply:
            # A key was echoed into the reply, possibly split across chunks: keep the chunk
            # record but never the key.
            statements += [
                delete_statement(LlmChunk, "call", call.pk),
                *CHUNK_ROWS.statements([(call.pk, 0, self.ttft_ms or 0, text)]),
            ]
        call_verdict, inv_verdict = verdict
        price = call.price
        call_fields = {
            **call_verdict,
            "status": InvocationStatus.SUCCEEDED,
            "started_at": call.started_at,
            "ended_at": timezone.now(),
            "ttft_ms": self.ttft_ms,
            "raw_text": text,
            "normalized_text": text.strip(),
            "finish_reason": finish_reason,
            "response_model": response_model,
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "cached_tokens": usage.get("cached_tokens"),
            "usage_source": usage_source,
            # No price row, no cost: null, shown "unknown", never 0.
            "cost": (
                usage_cost(
                    price,
                    prompt_tokens=usage.get("prompt_tokens", 0),
                    completion_tokens=usage.get("completion_tokens", 0),
                    cached_tokens=usage.get("cached_tokens", 0),
                )
                if price is not None
                else None
            ),
            "cost_estimated": usage_source == "estimated",
            "price": price,
        }
        statements += [
            update_statement(LlmCall, call.pk, call_fields, while_running=True),
            self.finish_statement(
                InvocationStatus.SUCCEEDED, response_text=text, **http_meta, **inv_verdict
            ),
        ]
        # what the call spent, read by whoever settles its budget reservation (``after``)
        call.prompt_tokens, call.completion_tokens = (
            call_fields["prompt_tokens"],
            call_fields["completion_tokens"],
        )
        call.cost = call_fields["cost"]
        if through_recorder:
            self.recorder.finish(statements, after)
        else:
            trace_batch(statements)
        log_finished(inv)
        call.raw_text, call.finish_reason = text, finish_reason

    def _failed_internally(self, message: str, call: LlmCall | None = None) -> None:
        super()._failed_internally(message, self.call)


class CheckRecord(GenerationRecord):
    """A conformance check's rows: its invocation and an LLM call (not streamed, no chunks), so
    that what the probe spent counts in the attempt's, turn's, world's and experiment's totals
    and budgets as a generation's does (they all sum LLM calls)."""

    usage: Mapping[str, int] | None = None  # what the probe spent, once it answered
    usage_source = ""
    response_model = ""
    reply = ""
    finish_reason = ""

    def answered(
        self,
        *,
        usage: Mapping[str, int],
        usage_source: str,
        response_model: str,
        reply: str,
        finish_reason: str,
    ) -> None:
        """What the backend answered, written with the rows when they finish."""
        self.usage, self.usage_source = usage, usage_source
        self.response_model, self.reply, self.finish_reason = response_model, reply, finish_reason

    def finishing_rows(self, status: str, error: str = "") -> list[Statement]:
        call, usage = self.call, self.usage
        # Without an answer's usage (no answer, or a broken one) what it spent is unknown:
        # null, as a generation's failed stream leaves it, never 0.
        fields: dict[str, Any] = {
            "status": status,
            "ended_at": timezone.now(),
            "error": error,
            "price": call.price,
        }
        if usage is not None:
            prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
            fields.update(
                usage_source=self.usage_source,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cost=(
                    usage_cost(call.price, prompt_tokens=prompt, completion_tokens=completion)
                    if call.price is not None
                    else None
                ),
                cost_estimated=self.usage_source == "estimated",
                response_model=self.response_model,
                raw_text=storable_text(scrub(self.reply)),
                normalized_text=storable_text(scrub(self.reply)).strip(),
                finish_reason=self.finish_reason,
            )
        # what the check spent, read by whoever settles its budget reservation
        call.prompt_tokens = fields.get("prompt_tokens")
        call.completion_tokens = fields.get("completion_tokens")
        call.cost = fields.get("cost")
        return [update_statement(LlmCall, call.pk, fields, while_running=True)]
