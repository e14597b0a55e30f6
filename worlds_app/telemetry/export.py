"""Sending one finished attempt's trace over OTLP/HTTP, when the settings ask for it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from worlds_app.telemetry.spans import attempt_spans

logger = logging.getLogger(__name__)


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
