"""A generation nobody waits for, sent through its source's provider Batch API
(``CallContext.batch_owner`` and ``interface.batch``; docs/costs.md, "Batch").

``invoke_llm`` hands such a call here after the replay and reuse checks (both win over a batch)
and before admission: a call waiting on a batch holds no slot and reserves no budget. The call's
request is looked up in the queue (``cognition_app.batches``) by its reuse key, newest first:

- none yet: it is enqueued, and :class:`~cognition_app.batches.BatchPending` is raised;
- waiting (pending or submitted): ``BatchPending`` again, nothing written;
- answered: the generation is written from the batch line (a non-streamed chat completion),
  judged as a live call's reply is, ``batched`` and priced at the batch prices;
- failed, expired or cancelled: the call fails, traced (``batch_failed``, ``batch_expired``,
  ``batch_cancelled``). A failed or expired one is tried again as the source's ``retry`` policy
  allows a transport failure: the retry is a new request, so it raises ``BatchPending``; the
  failed rows already written for the key count the tries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from chukwa_core.json_values import storable_text
from cognition_app import batch_queue as batches
from cognition_app.costs import call_cost, price_at
from cognition_app.failures import SourceFailure
from cognition_app.models import BatchRequest, InvocationStatus, LlmCall
from cognition_app.recording import GenerationRecord
from cognition_app.sources.context import CallContext
from cognition_app.sources.generation import Generation, Judge, verdict_fields
from cognition_app.sources.llm_replay import replayed_generation
from cognition_app.sources.retry import retry_policy
from cognition_app.sources.stream_events import usage_counts

# A batch request's end as a call's failure class (cognition_app.batches writes the first).
FAILURE_CLASSES = {
    "batch_failed": "batch_failed",
    "batch_expired": "batch_expired",
    "cancelled": "batch_cancelled",
    "batch_cancelled": "batch_cancelled",
    batches.MISSING_LINE: batches.MISSING_LINE,
}
# Tried again under the source's retry policy (a cancel never is).
RETRIED = frozenset({"batch_failed", "batch_expired", batches.MISSING_LINE})


@dataclass
class BatchedCall:
    """What ``invoke_llm`` built for the call, handed over whole."""

    ctx: CallContext
    source_hash: str
    source: Mapping[str, Any]
    payload: dict[str, Any]
    request: dict[str, Any]
    request_key: str
    reuse_key: str
    base_url: str
    params: dict[str, Any]
    response_format: dict[str, Any] | None
    output_schema_hash: str
    judge: Judge | None
    kind: str
    what: str

    def run(self) -> Generation:
        """The call's answer from its batch line; BatchPending while it is not in; a
        SourceFailure when its batch ended without one."""
        latest = (
            BatchRequest.objects.filter(reuse_key=self.reuse_key).order_by("-created_at").first()
        )
        if latest is None:
            return self._enqueue()
        if latest.status in (batches.PENDING, batches.SUBMITTED):
            raise batches.BatchPending(latest.pk, self._waiting(latest))
        # The ended request's row locked while its call's rows are written (through the direct
        # recorder, in this transaction): two judgings reading one line (an identical request,
        # another worker) write one paid call and one failed try, never two.
        with transaction.atomic():
            locked = BatchRequest.objects.select_for_update().get(pk=latest.pk)
            outcome: Generation | SourceFailure | batches.BatchPending
            if locked.status == batches.COMPLETED:
                outcome = self._answered(locked)
            else:
                outcome = self._failed(locked)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    # --- waiting --------------------------------------------------------------------------

    def _enqueue(self) -> Generation:
        raise self._queued()

    def _queued(self) -> batches.BatchPending:
        queued = batches.enqueue(
            source_hash=self.source_hash,
            reuse_key=self.reuse_key,
            body=self.payload,
            owner=self.ctx.batch_owner,
        )
        return batches.BatchPending(queued.pk, self._waiting(queued))

    def _waiting(self, queued: BatchRequest) -> str:
        where = "waiting to be sent" if queued.status == batches.PENDING else "sent"
        return f"the {self.what} waits for its provider batch ({where}; request {queued.pk})"

    # --- answered -------------------------------------------------------------------------

    def _rows(self, queued: BatchRequest, reused_from: UUID | None = None) -> GenerationRecord:
        iface = self.source["interface"]
        rows = GenerationRecord.new_generation(
            self.ctx,
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
            price=price_at(url_env=iface["base_url_env"], model=iface["model"], at=timezone.now()),
            kind=self.kind,
            reused_from=reused_from,
        )
        rows.call.batched = True
        rows.call.batch_request = queued
        return rows

    def _answered(self, queued: BatchRequest) -> Generation | SourceFailure:
        earlier = (
            LlmCall.objects.filter(batch_request=queued, status=InvocationStatus.SUCCEEDED)
            .select_related("invocation")
            .order_by("started_at")
            .first()
        )
        if earlier is not None:
            # the line was paid for once, by the call that first read it (an identical request
            # shared the line, or the same judging asked again): this one is reused from it
            rows = self._rows(queued, reused_from=earlier.invocation_id)
            return replayed_generation(rows, earlier.invocation, self.judge, reused=True)
        rows = self._rows(queued)
        body = queued.response_body if isinstance(queued.response_body, dict) else {}
        status = queued.response_status
        if status != 200:
            detail = storable_text(str(body)[:500])
            failure = SourceFailure(
                "http_status", f"HTTP {status} for the batch line of the {self.what}: {detail}"
            )
            if LlmCall.objects.filter(batch_request=queued).exists():
                return failure  # its failed row is written already
            return self._refused(rows, failure)
        choice = (body.get("choices") or [{}])[0]
        original = (choice.get("message") or {}).get("content") or ""
        finish_reason = storable_text(str(choice.get("finish_reason") or ""))[:40]
        if not finish_reason:
            return self._refused(
                rows,
                SourceFailure("transport", f"the batch line of the {self.what} has no reply"),
            )
        rows.streaming()  # the key values kept out of the stored reply
        text = rows.kept_text(original)
        usage = usage_counts(body.get("usage") or {})
        usage_source = "provider"
        if usage.get("completion_tokens") is None:
            prompt_chars = sum(len(m.get("content", "")) for m in self.payload["messages"])
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
        gen.judgement = self.judge(rows.scrubbed(original)) if self.judge is not None else None
        call_verdict, inv_verdict = verdict_fields(gen.judgement)
        price = rows.call.price
        rows.write_replayed(
            call_fields={
                **call_verdict,
                "raw_text": text,
                "normalized_text": text.strip(),
                "finish_reason": finish_reason,
                "response_model": storable_text(str(body.get("model") or ""))[:200],
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "cached_tokens": usage.get("cached_tokens"),
                "usage_source": usage_source,
                # no price row (or one without batch prices): unknown, never the online price
                "cost": (
                    call_cost(
                        price,
                        batched=True,
                        prompt_tokens=usage.get("prompt_tokens", 0),
                        completion_tokens=usage.get("completion_tokens", 0),
                        cached_tokens=usage.get("cached_tokens", 0),
                    )
                    if price is not None
                    else None
                ),
                "cost_estimated": usage_source == "estimated",
            },
            invocation_fields={
                **inv_verdict,
                "response_text": text,
                "http_status": status,
                "response_headers": {"x-chukwa-provider-batch": self._provider_batch(queued)},
            },
            chunks=[(0, 0, text)] if text else [],
        )
        return gen

    # --- failed ---------------------------------------------------------------------------

    def _failed(self, queued: BatchRequest) -> SourceFailure | batches.BatchPending:
        """A request that ended without an answer. Another owner's (an identical request this
        call shared, which its owner's cancel or failure ended) is not this call's try: it is
        asked again under its own owner. This owner's own tries are its failed rows."""
        if queued.owner != self.ctx.batch_owner:
            return self._queued()
        failure_class = FAILURE_CLASSES.get(queued.failure_class, "batch_failed")
        message = (
            f"the provider batch {self._provider_batch(queued) or '(not sent)'} holding the "
            f"{self.what} ended {queued.failure_class or queued.status}"
        )
        if not LlmCall.objects.filter(batch_request=queued).exists():
            self._refused(self._rows(queued), SourceFailure(failure_class, message))
        tries = LlmCall.objects.filter(
            batch_request__reuse_key=self.reuse_key,
            batch_request__owner=self.ctx.batch_owner,
            batch_request__status__in=[batches.FAILED, batches.CANCELLED],
            status=InvocationStatus.FAILED,
        ).count()
        policy = retry_policy(self.source["interface"])
        if failure_class in RETRIED and tries < policy.attempts:
            return self._queued()  # the next try: a new request
        return SourceFailure(
            failure_class, f"{message} (try {tries} of {policy.attempts})" if tries > 1 else message
        )

    def _refused(self, rows: GenerationRecord, failure: SourceFailure) -> SourceFailure:
        """Both rows written once, failed; nothing was spent live."""
        return rows.refused(failure)

    @staticmethod
    def _provider_batch(queued: BatchRequest) -> str:
        return queued.batch.provider_batch_id if queued.batch is not None else ""
