"""OpenTelemetry export of finished attempts (SPEC §9): the span tree built from the rows, and
the OTLP/HTTP export to a real local receiver, on only when the endpoint is set."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from cognition_app.models import LlmCall, SourceInvocation
from tests.cognition_app.conftest import create_world, run_turn
from tests.cognition_app.test_park import BUY_CANDY, final, set_state
from tests.support.scripted_llm import Reply, ScriptedLLM
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import (
    dispatch,
    turn_attempt_claim,
    turn_attempt_enqueue,
    turn_attempt_reap,
)
from worlds_app.telemetry import attempt_spans, attempt_trace_export

pytestmark = pytest.mark.django_db


def _candy_attempt(scripted_llm: ScriptedLLM) -> TurnAttempt:
    create_world("park", "candy")
    scripted_llm.script(
        BUY_CANDY, final("Bob buys the last candy bar.", set_state("bob", "holding candy"))
    )
    attempt = run_turn("candy")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    return attempt


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def _parent_name(span: ReadableSpan, spans: list[ReadableSpan]) -> str | None:
    if span.parent is None:
        return None
    return next(s.name for s in spans if s.context.span_id == span.parent.span_id)


def test_a_committed_park_turn_is_one_trace_attempt_subject_node_chat_and_tool(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    attempt = _candy_attempt(scripted_llm)
    memory = InMemorySpanExporter()
    assert attempt_trace_export(attempt_id=str(attempt.pk), exporter=memory) == {
        "exported": len(memory.get_finished_spans())
    }
    spans = list(memory.get_finished_spans())
    named = _by_name(spans)

    # one trace, whose id is the attempt id
    assert {s.context.trace_id for s in spans} == {attempt.pk.int}
    assert f"{spans[0].context.trace_id:032x}" == attempt.pk.hex
    (root,) = named["attempt"]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["chukwa.attempt.id"] == str(attempt.pk)
    assert root.attributes["chukwa.world.slug"] == "candy"
    assert root.attributes["chukwa.attempt.status"] == "committed"
    assert root.attributes["chukwa.attempt.turn"] == 1
    assert root.status.status_code is StatusCode.UNSET
    assert attempt.started_at and attempt.ended_at
    assert root.start_time == int(attempt.started_at.timestamp() * 1e9)
    assert root.end_time == int(attempt.ended_at.timestamp() * 1e9)

    # Bob's LLM node: two generations and the tool he elected between them
    (bob,) = named["subject bob"]
    assert _parent_name(bob, spans) == "attempt"
    (act,) = named["node act"]
    assert act.parent is not None and act.parent.span_id == bob.context.span_id
    generations = SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation")
    calls = {c.invocation_id: c for c in LlmCall.objects.filter(invocation__in=generations)}
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 2 == len(calls)
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id == act.context.span_id
        attrs = chat.attributes
        assert attrs is not None
        inv = SourceInvocation.objects.get(pk=attrs["chukwa.invocation.id"])
        call = calls[inv.pk]
        assert attrs["chukwa.llm_call.id"] == str(call.pk)
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == call.requested_model
        assert attrs["gen_ai.response.model"] == call.response_model
        assert attrs["gen_ai.usage.input_tokens"] == call.prompt_tokens
        assert attrs["gen_ai.usage.output_tokens"] == call.completion_tokens
        assert attrs["gen_ai.response.finish_reasons"] == (call.finish_reason,)
        assert chat.name == f"chat {call.requested_model}"
        assert chat.start_time == int(inv.started_at.timestamp() * 1e9)
        assert inv.ended_at and chat.end_time == int(inv.ended_at.timestamp() * 1e9)
    (tool,) = named["execute_tool buy_candy"]
    assert tool.parent is not None and tool.parent.span_id == act.context.span_id
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "buy_candy"
    tool_row = SourceInvocation.objects.get(attempt=attempt, kind="model_elected_tool")
    assert tool.attributes["chukwa.invocation.id"] == str(tool_row.pk)
    # every source call of the attempt is one span (ambient sources included)
    row_spans = [s for s in spans if s.attributes and "chukwa.invocation.id" in s.attributes]
    assert len(row_spans) == SourceInvocation.objects.filter(attempt=attempt).count()
    assert any(s.name.startswith("ambient ") for s in spans)

    # a re-export (a redelivered task) sends the very same ids
    again = attempt_spans(attempt_id=attempt.pk)
    assert sorted(s.context.span_id for s in again) == sorted(s.context.span_id for s in spans)


def test_a_failed_generation_marks_its_chat_span_and_the_attempt_as_errors(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    create_world("park", "broken")
    scripted_llm.script(Reply(status=400, error_body={"error": {"message": "no such model"}}))
    attempt = run_turn("broken")
    assert attempt.status == AttemptStatus.FAILED
    spans = attempt_spans(attempt_id=attempt.pk)
    (root,) = _by_name(spans)["attempt"]
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes is not None
    assert root.attributes["chukwa.attempt.failure_step"] == attempt.failure_step
    failed_rows = SourceInvocation.objects.filter(attempt=attempt).exclude(status="succeeded")
    failed_ids = {str(pk) for pk in failed_rows.values_list("pk", flat=True)}
    assert failed_ids
    for span in spans:
        if span.attributes and span.attributes.get("chukwa.invocation.id") in failed_ids:
            assert span.status.status_code is StatusCode.ERROR


def test_an_unfinished_attempt_has_no_trace() -> None:
    world = create_world("park", "queued")
    (attempt_id,) = turn_attempt_enqueue(slug=world.slug)["attempt_ids"]
    assert attempt_spans(attempt_id=attempt_id) == []
    attempt = TurnAttempt.objects.get(pk=attempt_id)
    assert attempt_spans(attempt_id=attempt.pk) == []


def test_an_interrupted_attempt_is_exported_when_the_reaper_ends_it(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    sent: list[list[str]] = []

    class _App:
        def send_task(self, name: str, args: list[str], queue: str) -> None:
            if name == dispatch.EXPORT_ATTEMPT_TRACE_TASK:
                sent.append(args)

    monkeypatch.setattr("celery.current_app", _App())
    world = create_world("park", "reaped")
    (attempt_id,) = turn_attempt_enqueue(slug=world.slug)["attempt_ids"]
    assert turn_attempt_claim(attempt_id=attempt_id, owner="dead-worker") is not None
    with (
        override_settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert turn_attempt_reap(now=timezone.now() + timedelta(hours=1)) == [attempt_id]
    assert sent == [[attempt_id]]
    (root,) = attempt_spans(attempt_id=attempt_id)
    assert root.attributes is not None
    assert root.attributes["chukwa.attempt.status"] == "interrupted"
    assert root.attributes["chukwa.attempt.failure_step"] == "lease"
    assert root.status.status_code is StatusCode.ERROR
    assert root.resource.attributes["service.name"] == "chukwa"


class _Receiver(ThreadingHTTPServer):
    posts: list[tuple[str, dict[str, str], bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.posts.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[_Receiver]:
    server = _Receiver(("127.0.0.1", 0), _Handler)
    server.posts = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_spans_go_over_otlp_http_only_when_the_endpoint_is_set(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    otlp_receiver: _Receiver,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    sent: list[tuple[str, list[str], str]] = []

    class _App:
        def send_task(self, name: str, args: list[str], queue: str) -> None:
            sent.append((name, args, queue))

    monkeypatch.setattr("celery.current_app", _App())
    endpoint = f"http://127.0.0.1:{otlp_receiver.server_address[1]}"

    # unset: nothing enqueued, nothing sent
    with (
        override_settings(OTEL_EXPORTER_OTLP_ENDPOINT=""),
        django_capture_on_commit_callbacks(execute=True),
    ):
        attempt = _candy_attempt(scripted_llm)
        assert attempt_trace_export(attempt_id=str(attempt.pk)) == {
            "exported": 0,
            "skipped": "export off",
        }
    assert sent == []
    assert otlp_receiver.posts == []

    # set: the finished attempt enqueues its export on the control queue, and the task's
    # service posts the trace to <endpoint>/v1/traces with the configured headers
    with override_settings(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_HEADERS="x-test-auth=secret"
    ):
        scripted_llm.script(final("Bob waits.", set_state("bob", "waiting")))
        with django_capture_on_commit_callbacks(execute=True):
            second = run_turn("candy")
        assert sent == [(dispatch.EXPORT_ATTEMPT_TRACE_TASK, [str(second.pk)], "chukwa-control")]
        result = attempt_trace_export(attempt_id=str(second.pk))
    (post,) = otlp_receiver.posts
    path, headers, body = post
    assert path == "/v1/traces"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["x-test-auth"] == "secret"
    request = ExportTraceServiceRequest.FromString(body)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert result == {"exported": len(spans)}
    assert {s.trace_id.hex() for s in spans} == {second.pk.hex}
    names = {s.name for s in spans}
    assert "attempt" in names and "subject bob" in names and "node act" in names
    (chat,) = [s for s in spans if s.name.startswith("chat ")]
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    assert attrs["gen_ai.usage.input_tokens"].int_value > 0
