"""Calling an ``llm_chat_completions`` source: one streamed generation, its chunks and its verdict
traced durably."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import httpx
from django.utils import timezone

from chukwa_core.hashing import canonical_json_bytes
from chukwa_core.json_values import storable_text
from chukwa_core.seeds import seeded_params
from cognition_app.budgets import BudgetLedger, Reservation, completion_cap, prompt_estimate
from cognition_app.costs import price_at
from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationKind, InvocationStatus, ModelPrice
from cognition_app.recording import GenerationRecord
from cognition_app.redaction import redact_headers, scrub
from cognition_app.sources.admission import CallRequest, admitted
from cognition_app.sources.admission.cluster import note_rate_headers
from cognition_app.sources.cancel import CANCELLED, CancelScope
from cognition_app.sources.components import source_content
from cognition_app.sources.conformance import ensure_schema_enforced
from cognition_app.sources.context import CallContext
from cognition_app.sources.deadline import bounded
from cognition_app.sources.generation import Generation, Judge, verdict_fields
from cognition_app.sources.llm_batch import BatchedCall
from cognition_app.sources.llm_replay import replayed_generation
from cognition_app.sources.replay import fail_miss, request_key_of
from cognition_app.sources.retry import with_retries
from cognition_app.sources.reuse import Flight, reuse_key_of, reused_or_claimed
from cognition_app.sources.schema_delivery import deliver_schema
from cognition_app.sources.stream_events import chunk_events, usage_counts
from cognition_app.sources.transport import body_pieces, error_text, post
from cognition_app.sources.variables import key_from_env, url_from_env

# A reply longer than this fails the call (an endpoint that never stops would otherwise fill
# the worker's memory and the chunk table until timeout_ms); max_tokens keeps honest ones far
# below it.
MAX_REPLY_CHARS = 1_000_000


def invoke_llm(
    *,
    source_hash: str,
    messages: list[dict[str, str]],
    ctx: CallContext,
    response_schema: dict[str, Any] | None,
    schema_name: str = "output",
    output_schema_hash: str = "",
    judge: Judge | None = None,
    kind: str = InvocationKind.LLM_GENERATION,
) -> Generation:
    """One streamed generation (``kind``: a node's generation, or a metric's ``judge``). Transport errors and HTTP failures raise SourceFailure (they are
    not model-content failures); ``judge`` (pure, no I/O) says what the text is, and its verdict
    is written with the finished rows."""
    source = source_content(source_hash)
    iface = source["interface"]
    if iface["name"] != "llm_chat_completions":
        raise SourceFailure("not_executable", f"source {source_hash[:12]} is not an LLM source")
    what = f"generation of {ctx.subject_id or 'no subject'}, node {ctx.node_id!r}"
    ctx.check_cancelled(what)
    # a seeded world's own seed, unless the source fixes one (the world's pages warn then)
    params = seeded_params(dict(iface.get("params", {})), ctx)
    payload: dict[str, Any] = {
        **params,
        # after the params, so that nothing authored can replace what Chukwa sets
        "model": iface["model"],
        "messages": list(messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response_format = None
    if response_schema is not None:
        response_format = deliver_schema(
            payload,
            messages,
            response_schema,
            schema_name=schema_name,
            delivery=iface["schema_delivery"],
        )
    # The messages and the response format live on the LLM call row (not stored twice).
    request = {
        **{k: v for k, v in payload.items() if k not in ("messages", "response_format")},
        "messages": f"{len(payload['messages'])} messages, on the LLM call",
        "response_format": (
            {"type": "json_schema", "name": schema_name} if response_format else None
        ),
    }
    # The payload is the whole request as sent: no credential (those are headers) and no
    # per-call id is in it. Its canonical bytes are both the body sent and what is hashed.
    body = canonical_json_bytes(payload)
    req_key = request_key_of(source_hash, body)
    if ctx.replay is not None:
        # Before the conformance check: a generation served from a recording reaches no backend,
        # so there is nothing to check; the first one that goes live is checked as usual.
        record = ctx.replay.take(req_key)
        if record is not None:
            rows = GenerationRecord.new_generation(
                ctx,
                source_hash=source_hash,
                source=source,
                request=request,
                request_key=req_key,
                output_schema_hash=output_schema_hash,
                base_url=record.llm_call.base_url,
                model=payload["model"],
                messages=payload["messages"],
                params=params,
                response_format=response_format,
                replayed_from=record.pk,
                kind=kind,
            )
            return replayed_generation(rows, record, judge)
        if ctx.replay.strict:
            fail_miss(
                ctx,
                kind=kind,
                source_hash=source_hash,
                source=source,
                request=request,
                key=req_key,
                what=what,
            )
    try:
        base_url = url_from_env(iface["base_url_env"], "base_url_env")
        headers = {"Content-Type": "application/json"}
        if "api_key_env" in iface:
            api_key = key_from_env(iface["api_key_env"], "api_key_env", iface["base_url_env"])
            headers["Authorization"] = "Bearer " + api_key
        config_failure = None
    except SourceFailure as exc:
        config_failure = exc
        base_url = ""
    flight = None
    reuse_key = ""
    if config_failure is None:
        reuse_key = reuse_key_of(f"{base_url}/chat/completions", body)
        if ctx.reuse:
            # Before the conformance check and admission: a reused call sends nothing, so it
            # takes no slot and reserves no budget; nor does waiting for one in flight.
            original, flight = reused_or_claimed(reuse_key, ctx=ctx, what=what)
            if original is not None:
                rows = GenerationRecord.new_generation(
                    ctx,
                    source_hash=source_hash,
                    source=source,
                    request=request,
                    request_key=req_key,
                    output_schema_hash=output_schema_hash,
                    base_url=base_url,
                    model=payload["model"],
                    messages=payload["messages"],
                    params=params,
                    response_format=response_format,
                    base_url_env=iface["base_url_env"],
                    reused_from=original.pk,
                    kind=kind,
                )
                return replayed_generation(rows, original, judge, reused=True)
        if ctx.batch_owner and iface.get("batch"):
            # Nobody waits for it: through the provider's Batch API, holding no slot and no
            # budget while it waits (cognition_app.sources.llm_batch).
            try:
                return BatchedCall(
                    ctx=ctx,
                    source_hash=source_hash,
                    source=source,
                    payload=payload,
                    request=request,
                    request_key=req_key,
                    reuse_key=reuse_key,
                    base_url=base_url,
                    params=params,
                    response_format=response_format,
                    output_schema_hash=output_schema_hash,
                    judge=judge,
                    kind=kind,
                    what=what,
                ).run()
            finally:
                if flight is not None:
                    flight.done()
    send = _Send(
        ctx=ctx,
        source_hash=source_hash,
        source=source,
        base_url=base_url,
        headers=headers if config_failure is None else {},
        payload=payload,
        body=body,
        params=params,
        request=request,
        request_key=req_key,
        reuse_key=reuse_key,
        flight=flight,
        response_format=response_format,
        output_schema_hash=output_schema_hash,
        judge=judge,
        kind=kind,
        what=what,
    )
    # Each try is admitted on its own (cognition_app.sources.admission): it opens its rows,
    # waits for every limit and reserves its budget (under its call's id); between tries it
    # holds nothing.
    try:
        return with_retries(
            interface=iface,
            ctx=ctx,
            what=what,
            call=lambda try_ctx: dataclasses.replace(send, ctx=try_ctx).run(config_failure),
        )
    except BaseException:
        if flight is not None:  # the waiters send their own
            flight.done()
        raise


@dataclass
class _Send:
    """One live generation (one try): its admission (the limits, the budget's reservation), the
    conformance check, the rows, the stream."""

    ctx: CallContext
    source_hash: str
    source: dict[str, Any]
    base_url: str
    headers: dict[str, str]
    payload: dict[str, Any]
    body: bytes  # the payload's canonical JSON, sent as it is
    params: dict[str, Any]
    request: dict[str, Any]
    request_key: str
    reuse_key: str
    flight: Flight | None  # the single-flight claim on reuse_key, given back once written
    response_format: dict[str, Any] | None
    output_schema_hash: str
    judge: Judge | None
    kind: str
    what: str

    def run(self, config_failure: SourceFailure | None) -> Generation:
        """One try: its rows opened, then admitted (every limit, the budget's reservation last)
        and its stream. A misconfigured source is refused without waiting for anything."""
        if config_failure is not None:  # its rows written once, failed, nothing sent
            iface = self.source["interface"]
            price = price_at(url_env=iface["base_url_env"], model=iface["model"], at=timezone.now())
            raise self._new_rows(price, check_schema=False).refused(config_failure)
        return self._opened_then_admitted()

    def _opened_then_admitted(self) -> Generation:
        """The rows are opened first and the limits passed after: the opening's round trip is
        then not spent holding a slot of the model's, which an experiment's calls wait for
        (about 4 ms of each call's ~105 with two cores busy). Still opened before any byte is
        sent; finished, they read as rows opened after the wait (``GenerationRecord.waited``).
        A budget's reservation, taken last, takes the id of the call's row (the settle and the
        reaper find the call by it)."""
        ctx, iface = self.ctx, self.source["interface"]
        rows = self._new_rows(None)
        # One round trip with the attempt's pending events and the price in force (a budget's
        # reservation is made at it; the cost is computed from it at the end).
        rows.open_reading_price(url_env=iface["base_url_env"], model=iface["model"])
        request = CallRequest(
            source_hash=self.source_hash,
            interface=iface,
            ctx=ctx,
            what=self.what,
            prompt_tokens=prompt_estimate(self.payload["messages"], self.response_format),
            max_completion=completion_cap(self.params),
            price=rows.call.price,
            call_id=rows.call.pk,
        )
        with rows.guard():
            try:
                with admitted(request) as admission:
                    rows.waited(admission.waits.waited_ms, admission.waits.limit)
                    if admission.refusal is not None:
                        raise rows.not_sent(admission.refusal, InvocationStatus.FAILED)
                    release = _Release(
                        ctx.budget,
                        admission.reservation,
                        flight=self.flight,
                        slots=admission.give_back,
                    )
                    release.rows = rows
                    try:
                        # its attempt interrupted while it waited: not sent (the reaper
                        # finished the rows; the reservation is given back at what they say,
                        # nothing); asked of the database only if that could have happened
                        rows.recorder.still_open()
                        return self._stream(rows, release)
                    finally:
                        if not release.handed_over:
                            release()
            except SourceFailure as exc:
                if exc.invocation_id is not None:  # the rows are finished
                    raise
                # stopped while it waited for a limit: nothing was sent
                status = InvocationStatus.CANCELLED if exc.failure_class == CANCELLED else None
                raise rows.not_sent(exc, status or InvocationStatus.FAILED) from None

    def _new_rows(self, price: ModelPrice | None, check_schema: bool = True) -> GenerationRecord:
        """The try's rows, not written yet; a request that will be sent has its schema's
        enforcement checked first (once per source and process)."""
        ctx, iface = self.ctx, self.source["interface"]
        if self.response_format is not None and check_schema:
            ensure_schema_enforced(
                ctx=ctx,
                source_hash=self.source_hash,
                source=self.source,
                base_url=self.base_url,
                model=iface["model"],
                headers=self.headers,
                timeout=iface["timeout_ms"] / 1000,
            )
        rows = GenerationRecord.new_generation(
            ctx,
            source_hash=self.source_hash,
            source=self.source,
            request=self.request,
            request_key=self.request_key,
            reuse_key=self.reuse_key,
            output_schema_hash=self.output_schema_hash,
            base_url=self.base_url,
            model=iface["model"],
            messages=self.payload["messages"],
            params=self.params,
            response_format=self.response_format,
            base_url_env=iface["base_url_env"],
            price=price,
            kind=self.kind,
        )
        rows.limited = bool(iface.get("limits"))
        return rows

    def _stream(self, rows: GenerationRecord, release: _Release) -> Generation:
        return _stream(
            rows,
            self.base_url,
            self.headers,
            self.payload,
            self.body,
            self.source["interface"]["timeout_ms"] / 1000,
            self.judge,
            self.ctx.cancel,
            release,
        )


def _nothing() -> None:
    return None


@dataclass
class _Release:
    """Gives the budget's reservation back, once the call's finished rows are written: its real
    usage counts from then on."""

    ledger: BudgetLedger | None
    reservation: Reservation
    handed_over: bool = False  # to whoever writes the finished rows
    rows: GenerationRecord | None = None  # once opened: the call's real usage, when it ends
    flight: Flight | None = None  # given back once a succeeded call's rows are written
    # the capacity the try holds at its limits, given back as soon as the reply is read
    slots: Callable[[], None] = _nothing

    def __call__(self) -> None:
        if self.handed_over and self.flight is not None:
            self.flight.done()
        if self.ledger is None:
            return
        call = self.rows.call if self.rows is not None else None
        tokens = (call.prompt_tokens or 0) + (call.completion_tokens or 0) if call else 0
        self.ledger.release(
            self.reservation, tokens=tokens, cost=call.cost if call is not None else None
        )


def _stream(
    rows: GenerationRecord,
    base_url: str,
    headers: dict[str, str],
    payload: dict[str, Any],
    request_body: bytes,
    timeout: float,
    judge: Judge | None,
    cancel: CancelScope | None,
    release: _Release,
) -> Generation:
    """The exchange, its chunks handed to ``rows`` as they come; ``timeout`` (``timeout_ms``)
    bounds the whole of it, the stream's last chunk included. A failure finishes the rows now;
    a success hands them to the recorder with the verdict (and the budget's reservation, given
    back once they are written)."""
    started = time.monotonic()
    deadline = started + timeout
    too_slow = (
        f"the LLM endpoint did not finish its reply within timeout_ms ({round(timeout * 1000)} ms)"
    )
    parts: list[str] = []
    reply_chars = 0
    usage: dict[str, int] = {}
    finish_reason = ""
    response_model = ""
    http_meta: dict[str, Any] = {}  # status and redacted headers, once the response starts
    rows.streaming()

    def fail(
        failure_class: str, message: str, http_status: int | None = None, body: str = ""
    ) -> SourceFailure:
        # Stopped because another subject failed: whatever the cut stream raised.
        status = InvocationStatus.FAILED
        if cancel is not None and cancel.cancelled:
            status, failure_class = InvocationStatus.CANCELLED, CANCELLED
            message = f"stopped mid-stream: {cancel.reason}"
        stored = rows.stream_failed(
            status,
            failure_class,
            message,
            reply="".join(parts),
            http_status=http_status or http_meta.get("http_status"),
            response_headers=http_meta.get("response_headers", {}),
            response_text=body,
        )
        return SourceFailure(
            failure_class,
            stored,
            invocation_id=rows.pk,
            http_status=http_status,
            retry_after=http_meta.get("response_headers", {}).get("retry-after"),
        )

    try:
        with (
            post(
                f"{base_url}/chat/completions",
                content=request_body,
                headers=headers,
                timeout=timeout,
            ) as response,
            _watched(cancel, response),
            bounded(response, deadline),
        ):
            http_meta["http_status"] = response.status_code
            http_meta["response_headers"] = redact_headers(response.headers)
            if rows.limited:  # the source has cluster-wide limits: the endpoint's word counts
                note_rate_headers(
                    rows.invocation.source_hash, response.status_code, response.headers
                )
            if response.status_code != 200:
                body = storable_text(scrub(error_text(response)[:20_000]))
                status = response.status_code
                if status >= 500 or status == 429:
                    raise fail(
                        "transport",
                        f"HTTP {status} from the LLM endpoint: {body[:500]}",
                        status,
                        body,
                    )
                if "response_format" in payload:
                    raise fail(
                        "response_format_rejected",
                        f"the LLM endpoint rejected the request with response_format json_schema "
                        f"(HTTP {status}); Chukwa does not retry without it: {body[:500]}",
                        status,
                        body,
                    )
                raise fail(
                    "http_status",
                    f"HTTP {status} from the LLM endpoint: {body[:500]}",
                    status,
                    body,
                )
            for chunk in chunk_events(
                response.headers.get("content-type", ""), body_pieces(response)
            ):
                if cancel is not None and cancel.cancelled:
                    raise fail(CANCELLED, "stopped")
                if time.monotonic() > deadline:
                    raise fail("transport", too_slow)
                if chunk.model:
                    response_model = chunk.model
                if chunk.usage:
                    usage = usage_counts(chunk.usage)
                for delta in chunk.deltas:
                    reply_chars += len(delta)
                    if reply_chars > MAX_REPLY_CHARS:
                        raise fail(
                            "transport",
                            f"the reply is longer than {MAX_REPLY_CHARS:,} characters (its "
                            f"chunks so far are kept)",
                        )
                    parts.append(delta)
                    rows.chunk(int((time.monotonic() - started) * 1000), delta)
                if chunk.finish_reason:
                    finish_reason = storable_text(chunk.finish_reason)[:40]
    except SourceFailure as exc:
        if exc.invocation_id is None:  # from chunk_events: finish the rows like any failure
            raise fail(exc.failure_class, exc.message) from None
        raise
    except httpx.TimeoutException as exc:
        raise fail(
            "transport",
            f"the LLM endpoint did not answer within timeout_ms ({round(timeout * 1000)} ms): "
            f"{exc}",
        ) from None
    except httpx.HTTPError as exc:
        if time.monotonic() >= deadline:  # the stream was cut at its deadline
            raise fail("transport", too_slow) from None
        raise fail("transport", f"{type(exc).__name__}: {exc}") from None
    # The reply is read: the request is no longer in flight at the endpoint, and judging it and
    # writing its rows need none of the source's slots.
    release.slots()
    original = "".join(parts)
    if not finish_reason:
        raise fail("transport", "the stream ended without a finish_reason (connection dropped?)")
    # What is stored, shown and sent back to the model on a retry: storable, no key in it.
    text = rows.kept_text(original)
    if usage.get("completion_tokens") is not None:
        usage_source = "provider"
    else:
        prompt_chars = sum(len(m.get("content", "")) for m in payload["messages"])
        usage = {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, len(text) // 4),
        }
        usage_source = "estimated"
    gen = Generation(
        text=text,
        invocation=rows.invocation,
        call=rows.call,
        finish_reason=finish_reason,
        usage=usage,
    )
    judged = False
    try:
        # The judge reads the reply without any key in it (an echoed key must not reach a
        # parsed artifact or the world), but with everything else as the model sent it: NUL
        # or a lone surrogate in the reply is a model-content failure for the retry lane, not
        # a database error.
        gen.judgement = judge(rows.scrubbed(original)) if judge is not None else None
        judged = True
    finally:
        # A judge that raised (a bug) propagates to ``rows.guard()``: the rows written now,
        # first; else the recorder writes them and gives the reservation back after.
        release.handed_over = judged
        rows.stream_succeeded(
            reply=original,
            finish_reason=finish_reason,
            response_model=storable_text(response_model)[:200],
            usage=usage,
            usage_source=usage_source,
            http_meta=http_meta,
            verdict=verdict_fields(gen.judgement),
            after=release if judged else None,
            through_recorder=judged,
        )
    return gen


def _watched(cancel: CancelScope | None, response: httpx.Response) -> AbstractContextManager[None]:
    return cancel.watching(response) if cancel is not None else nullcontext()
