"""One finished attempt as one OpenTelemetry trace, built from its stored rows (SPEC §9).

The trace is rebuilt after the fact from the rows the attempt left (attempt, source invocations,
LLM calls), never recorded live: exporting costs the turn nothing and a trace says exactly what a
reviewer reads in the attempt page. Tree: ``attempt`` → subject → node → ``chat`` (one per LLM
generation) and ``execute_tool`` (model-elected tools) spans, with ambient and conformance calls
under their subject, or under the attempt when they belong to no subject. LLM attributes follow
the OpenTelemetry GenAI semantic conventions.

Ids are derived, not random: the trace id is the attempt UUID's 128 bits, a row's span id the low
64 bits of its UUID and a subject's or node's a hash of its path, so a re-delivered export task
sends the same spans again and a backend that upserts by id keeps one copy.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from django.conf import settings
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.re import parse_env_headers

from cognition_app.models import InvocationKind, InvocationStatus, LlmCall, SourceInvocation
from worlds_app.models import AttemptStatus, TurnAttempt

logger = logging.getLogger(__name__)

# Chukwa speaks the OpenAI chat-completions protocol to every LLM backend.
GEN_AI_PROVIDER = "openai"
SCOPE = "chukwa.worlds"
FINISHED = (AttemptStatus.COMMITTED, AttemptStatus.FAILED, AttemptStatus.INTERRUPTED)


class _DerivedIds(IdGenerator):
    """Hands out the ids chosen by the builder just before it starts each span."""

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id
        self.next_span_id: int | None = None

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        span_id, self.next_span_id = self.next_span_id, None
        # 0 is the invalid span id; the fallback is never reached by the builder
        return span_id or random.getrandbits(64) or 1


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _uuid_span_id(value: UUID) -> int:
    return (value.int & 0xFFFF_FFFF_FFFF_FFFF) or 1


def _path_span_id(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _without_none(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None and v != ""}


def _llm_attributes(call: LlmCall) -> dict[str, Any]:
    server = urlsplit(call.base_url)
    params = call.params or {}
    return _without_none(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": GEN_AI_PROVIDER,
            "gen_ai.request.model": call.requested_model,
            "gen_ai.response.model": call.response_model,
            "gen_ai.usage.input_tokens": call.prompt_tokens,
            "gen_ai.usage.output_tokens": call.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": call.cached_tokens,
            "gen_ai.response.finish_reasons": [call.finish_reason] if call.finish_reason else None,
            "gen_ai.request.temperature": params.get("temperature"),
            "gen_ai.request.max_tokens": params.get("max_tokens"),
            "gen_ai.request.seed": params.get("seed"),
            "gen_ai.output.type": "json" if call.response_format else "text",
            "server.address": server.hostname,
            "server.port": server.port,
            "chukwa.llm_call.id": str(call.pk),
            "chukwa.llm_call.usage_source": call.usage_source,
            "chukwa.llm_call.cost": float(call.cost) if call.cost is not None else None,
        }
    )


def _invocation_span(inv: SourceInvocation) -> tuple[str, SpanKind, dict[str, Any]]:
    common = {
        "chukwa.invocation.id": str(inv.pk),
        "chukwa.invocation.kind": inv.kind,
        "chukwa.invocation.status": inv.status,
        "chukwa.source.hash": inv.source_hash,
        "chukwa.source.label": inv.source_label,
        "chukwa.subject.id": inv.subject_id,
        "chukwa.node.id": inv.node_id,
        "http.response.status_code": inv.http_status,
    }
    if inv.kind == InvocationKind.LLM_GENERATION:
        call: LlmCall | None = getattr(inv, "llm_call", None)
        attributes = {**common, **(_llm_attributes(call) if call is not None else {})}
        attributes["gen_ai.operation.name"] = "chat"
        attributes.setdefault("gen_ai.provider.name", GEN_AI_PROVIDER)
        model = call.requested_model if call is not None else ""
        return f"chat {model}".strip(), SpanKind.CLIENT, _without_none(attributes)
    if inv.kind == InvocationKind.MODEL_ELECTED_TOOL:
        attributes = {
            **common,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": inv.tool_name,
            "gen_ai.tool.type": "function",
        }
        return f"execute_tool {inv.tool_name}", SpanKind.INTERNAL, _without_none(attributes)
    if inv.kind == InvocationKind.AMBIENT_CONTEXT:
        attributes = {**common, "chukwa.ambient_source.id": inv.ambient_source_id}
        return f"ambient {inv.ambient_source_id}", SpanKind.CLIENT, _without_none(attributes)
    return str(inv.kind), SpanKind.CLIENT, _without_none(common)


def _resource() -> Resource:
    """OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES as the SDK reads them; the service is
    ``chukwa`` unless they name it."""
    detected = Resource.create()
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        return detected.merge(Resource({"service.name": "chukwa"}))
    return detected


def attempt_spans(*, attempt_id: str | UUID) -> list[ReadableSpan]:
    """The finished spans of one finished attempt's trace (empty if it is not finished)."""
    attempt = (
        TurnAttempt.objects.select_related("world")
        .filter(pk=attempt_id, status__in=FINISHED)
        .first()
    )
    if attempt is None:
        return []
    invocations = list(
        SourceInvocation.objects.filter(attempt=attempt).select_related("llm_call").order_by("seq")
    )
    ids = _DerivedIds(attempt.pk.int)
    collected = _Collect()
    provider = TracerProvider(resource=_resource(), id_generator=ids)
    provider.add_span_processor(collected)
    tracer = provider.get_tracer(SCOPE)

    attempt_start = attempt.started_at or attempt.queued_at
    attempt_end = attempt.ended_at or max(
        [i.ended_at for i in invocations if i.ended_at] + [attempt_start]
    )

    def end_of(inv: SourceInvocation) -> datetime:
        return inv.ended_at or attempt_end

    ids.next_span_id = _uuid_span_id(attempt.pk)
    root = tracer.start_span(
        "attempt",
        start_time=_ns(attempt_start),
        attributes=_without_none(
            {
                "chukwa.world.slug": attempt.world.slug,
                "chukwa.attempt.id": str(attempt.pk),
                "chukwa.attempt.status": attempt.status,
                "chukwa.attempt.turn": attempt.attempted_turn,
                "chukwa.attempt.produced_turn": attempt.produced_turn,
                "chukwa.attempt.failure_step": attempt.failure_step,
                "chukwa.attempt.failure_subject": attempt.failure_subject,
                "chukwa.attempt.failure_reason": attempt.failure_reason,
            }
        ),
    )
    if attempt.status != AttemptStatus.COMMITTED:
        root.set_status(
            Status(StatusCode.ERROR, f"{attempt.failure_step}: {attempt.failure_reason}")
        )
        root.set_attribute("error.type", attempt.failure_step or str(attempt.status))
    root_context = trace.set_span_in_context(root)

    # Subject and node spans cover the calls made under them, in the order they were made.
    groups: dict[str, dict[str, list[SourceInvocation]]] = {}
    loose: list[SourceInvocation] = []
    for inv in invocations:
        if inv.subject_id:
            groups.setdefault(inv.subject_id, {}).setdefault(inv.node_id, []).append(inv)
        else:
            loose.append(inv)

    def emit(inv: SourceInvocation, context: Context) -> None:
        name, kind, attributes = _invocation_span(inv)
        ids.next_span_id = _uuid_span_id(inv.pk)
        span = tracer.start_span(
            name, context=context, kind=kind, start_time=_ns(inv.started_at), attributes=attributes
        )
        if inv.status != InvocationStatus.SUCCEEDED:
            span.set_status(
                Status(StatusCode.ERROR, f"{inv.failure_class}: {inv.failure_message}"[:1000])
            )
            span.set_attribute("error.type", inv.failure_class or str(inv.status))
        span.end(end_time=_ns(end_of(inv)))

    for subject_id, nodes in groups.items():
        subject_rows = [inv for rows in nodes.values() for inv in rows]
        ids.next_span_id = _path_span_id(str(attempt.pk), subject_id)
        subject_span = tracer.start_span(
            f"subject {subject_id}",
            context=root_context,
            start_time=_ns(min(inv.started_at for inv in subject_rows)),
            attributes={"chukwa.subject.id": subject_id},
        )
        if attempt.failure_subject == subject_id:
            subject_span.set_status(Status(StatusCode.ERROR, attempt.failure_reason[:1000]))
        subject_context = trace.set_span_in_context(subject_span)
        for node_id, rows in nodes.items():
            if not node_id:  # a subject's ambient context, read before its workflow runs
                for inv in rows:
                    emit(inv, subject_context)
                continue
            ids.next_span_id = _path_span_id(str(attempt.pk), subject_id, node_id)
            node_span = tracer.start_span(
                f"node {node_id}",
                context=subject_context,
                start_time=_ns(min(inv.started_at for inv in rows)),
                attributes=_without_none(
                    {
                        "chukwa.subject.id": subject_id,
                        "chukwa.node.id": node_id,
                        "chukwa.workflow.hash": rows[0].workflow_hash,
                    }
                ),
            )
            node_context = trace.set_span_in_context(node_span)
            for inv in rows:
                emit(inv, node_context)
            node_span.end(end_time=_ns(max(end_of(inv) for inv in rows)))
        subject_span.end(end_time=_ns(max(end_of(inv) for inv in subject_rows)))
    for inv in loose:
        emit(inv, root_context)
    root.end(end_time=_ns(attempt_end))
    provider.shutdown()
    return collected.spans


def otlp_exporter() -> OTLPSpanExporter | None:
    """The OTLP/HTTP exporter the settings ask for, or None when export is off."""
    endpoint: str = settings.OTEL_EXPORTER_OTLP_ENDPOINT
    if not endpoint:
        return None
    # As the OpenTelemetry spec says of the generic variable: the signal path is appended.
    return OTLPSpanExporter(
        endpoint=f"{endpoint.rstrip('/')}/v1/traces",
        headers=parse_env_headers(settings.OTEL_EXPORTER_OTLP_HEADERS, liberal=True),
        timeout=settings.OTEL_EXPORTER_OTLP_TIMEOUT,
    )


def attempt_trace_export(
    *, attempt_id: str, exporter: SpanExporter | None = None
) -> dict[str, Any]:
    """Send one finished attempt's trace; a no-op when export is off."""
    exporter = exporter or otlp_exporter()
    if exporter is None:
        return {"exported": 0, "skipped": "export off"}
    spans: Sequence[ReadableSpan] = attempt_spans(attempt_id=attempt_id)
    if not spans:
        return {"exported": 0, "skipped": "attempt not finished"}
    try:
        result = exporter.export(spans)
    finally:
        exporter.shutdown()
    if result is not SpanExportResult.SUCCESS:
        # The exporter already retried transient answers within its timeout; a trace is
        # observability, not a record, so it is dropped with a warning rather than redelivered.
        logger.warning("attempt %s: trace export failed (%d spans)", attempt_id, len(spans))
        return {"exported": 0, "failed": len(spans)}
    return {"exported": len(spans)}
