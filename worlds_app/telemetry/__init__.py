"""One finished attempt as one OpenTelemetry trace, built from its stored rows.

Modules: ``attributes`` (what one row says as span attributes), ``spans`` (the tree of one
attempt), ``export`` (OTLP/HTTP).

The trace is rebuilt after the fact from the rows the attempt left (attempt, events, source
invocations, LLM calls), never recorded live: exporting costs the turn nothing and a trace says
exactly what a reviewer reads in the attempt page. Tree: the root (``<world> turn <n>``) →
subject (``invoke_agent <subject>``) → node → ``chat`` (one per LLM generation or conformance
check) and ``execute_tool`` (tools) spans, ambient calls under their subject; applied patches
are events of their subject's span. Subjects a rule policy runs appear like any other, from the
events they left.

Two vocabularies are written side by side, so that both kinds of trace viewer read the run:
the OpenTelemetry GenAI semantic conventions (``gen_ai.*``) and OpenInference's
(``openinference.span.kind``, ``input.value``/``output.value``, ``session.id``) that Phoenix
reads. Content (messages, tool arguments and results) travels only with
``CHUKWA_OTEL_CAPTURE_CONTENT`` on, scrubbed of key values as the pages are; without it a
span's input and output are the path of its page in Chukwa.

Ids are derived, not random: the trace id is the attempt UUID's 128 bits, a row's span id the low
64 bits of its UUID and a subject's or node's a hash of its path, so a re-delivered export task
sends the same spans again and a backend that upserts by id keeps one copy.
"""

from worlds_app.telemetry.attributes import capture_content
from worlds_app.telemetry.export import attempt_trace_export, otlp_exporter
from worlds_app.telemetry.spans import attempt_spans

__all__ = ["attempt_spans", "attempt_trace_export", "capture_content", "otlp_exporter"]
