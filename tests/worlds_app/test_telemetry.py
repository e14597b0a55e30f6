"""OpenTelemetry export of finished attempts: the span tree built from the rows (GenAI and
OpenInference attributes, statuses, content capture), and the OTLP/HTTP export to a real local
receiver, on only when the endpoint is set."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from chukwa_core.errors import ChukwaError
from cognition_app.models import LlmCall, SourceInvocation
from scenarios_app.services import scenario_assemble
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.cognition_app.test_park import BUY_CANDY, final, set_state
from tests.support.fixtures import TEST_API_KEY
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, fixture_body, run_turn
from worlds_app.models import AttemptEvent, AttemptStatus, Turn, TurnAttempt
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


def _generations(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [
        s for s in spans if (s.attributes or {}).get("chukwa.invocation.kind") == "llm_generation"
    ]


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
    (root,) = named["candy turn 1"]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["chukwa.attempt.id"] == str(attempt.pk)
    assert root.attributes["chukwa.world.slug"] == "candy"
    assert root.attributes["chukwa.attempt.status"] == "committed"
    assert root.attributes["chukwa.attempt.turn"] == 1
    assert root.status.status_code is StatusCode.OK
    # the root reads as the turn: its page in, what it told out
    # its absolute page (CHUKWA_SITE_URL); a world outside any experiment names none
    assert root.attributes["input.value"] == f"{settings.CHUKWA_SITE_URL}/attempts/{attempt.pk}/"
    assert "chukwa.experiment" not in root.attributes and "chukwa.arm" not in root.attributes
    assert "bob: Bob buys the last candy bar." in str(root.attributes["output.value"])
    assert attempt.started_at and attempt.ended_at
    assert root.start_time == int(attempt.started_at.timestamp() * 1e9)
    assert root.end_time == int(attempt.ended_at.timestamp() * 1e9)

    # Bob's LLM node: two generations and the tool he elected between them
    (bob,) = named["invoke_agent bob"]
    assert _parent_name(bob, spans) == "candy turn 1"
    (act,) = named["node act"]
    assert act.parent is not None and act.parent.span_id == bob.context.span_id
    generations = SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation")
    calls = {c.invocation_id: c for c in LlmCall.objects.filter(invocation__in=generations)}
    chats = _generations(spans)
    assert len(chats) == 2 == len(calls)
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id == act.context.span_id
        attrs = chat.attributes
        assert attrs is not None
        inv = SourceInvocation.objects.get(pk=attrs["chukwa.invocation.id"])
        call = calls[inv.pk]
        assert attrs["chukwa.llm_call.id"] == str(call.pk)
        assert attrs["gen_ai.operation.name"] == "chat"
        # the park's source names no provider: none is guessed
        assert "gen_ai.provider.name" not in attrs and "llm.provider" not in attrs
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
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "broken turn 1"
    assert root.status.status_code is StatusCode.ERROR
    assert attempt.failure_step in str(root.attributes and root.attributes["output.value"])
    assert root.attributes is not None
    assert root.attributes["chukwa.attempt.failure_step"] == attempt.failure_step
    failed_rows = SourceInvocation.objects.filter(attempt=attempt).exclude(status="succeeded")
    failed_ids = {str(pk) for pk in failed_rows.values_list("pk", flat=True)}
    assert failed_ids
    for span in spans:
        if span.attributes and span.attributes.get("chukwa.invocation.id") in failed_ids:
            assert span.status.status_code is StatusCode.ERROR
    # every span has a status; the chain from the failed call up to the root is red throughout
    assert all(span.status.status_code is not StatusCode.UNSET for span in spans)
    by_id = {span.context.span_id: span for span in spans}
    (failed,) = [
        s for s in spans if s.attributes and s.attributes.get("chukwa.invocation.id") in failed_ids
    ][-1:]
    chain = []
    current = failed
    while current.parent is not None:
        current = by_id[current.parent.span_id]
        chain.append(current)
    assert [s.name for s in chain] == [
        "node act",
        f"invoke_agent {attempt.failure_subject}",
        root.name,
    ]
    assert all(s.status.status_code is StatusCode.ERROR for s in chain)
    # a subject that did not fail is green
    others = [s for s in spans if s.name.startswith("invoke_agent ") and s not in chain]
    assert all(s.status.status_code is StatusCode.OK for s in others)


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
    assert "candy turn 2" in names and "invoke_agent bob" in names and "node act" in names
    (chat,) = [
        s
        for s in spans
        if any(
            a.key == "chukwa.invocation.kind" and a.value.string_value == "llm_generation"
            for a in s.attributes
        )
    ]
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    assert attrs["gen_ai.usage.input_tokens"].int_value > 0


# --- what trace viewers read: kinds, sessions, statuses, content -----------------------------


def _kind(span: ReadableSpan) -> str:
    assert span.attributes is not None
    return str(span.attributes["openinference.span.kind"])


def test_every_span_says_what_it_is_belongs_to_the_world_session_and_is_ok(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    attempt = _candy_attempt(scripted_llm)
    spans = attempt_spans(attempt_id=attempt.pk)
    for span in spans:
        assert span.attributes is not None
        assert span.attributes["session.id"] == "candy", span.name
        assert span.attributes["gen_ai.conversation.id"] == "candy", span.name
        assert span.status.status_code is StatusCode.OK, span.name
    kinds = {span.name: _kind(span) for span in spans}
    assert kinds["candy turn 1"] == "CHAIN"
    assert kinds["node act"] == "CHAIN"
    assert kinds["execute_tool buy_candy"] == "TOOL"
    assert {kinds[n] for n in kinds if n.startswith("chat ")} == {"LLM"}
    assert {kinds[n] for n in kinds if n.startswith("ambient ")} == {"TOOL"}
    agents = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert {_kind(s) for s in agents} == {"AGENT"}
    for agent in agents:
        assert agent.attributes is not None
        assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert agent.name == f"invoke_agent {agent.attributes['gen_ai.agent.name']}"
    # Every subject of the turn is there, those a rule policy runs (no source call) included,
    # each with the patch it applied as an event.
    applied = AttemptEvent.objects.filter(attempt=attempt, kind="world_patch_applied")
    subjects = set(applied.values_list("subject_id", flat=True))
    assert len(subjects) > 1
    assert {s.name.removeprefix("invoke_agent ") for s in agents} >= subjects
    called = set(
        SourceInvocation.objects.filter(attempt=attempt).values_list("subject_id", flat=True)
    )
    assert subjects - called, "the park turn should have a subject that calls no source"
    events = [(s.name, e) for s in agents for e in s.events if e.name == "world_patch_applied"]
    assert len(events) == applied.count()
    bob_events = [e for name, e in events if name == "invoke_agent bob"]
    (bob_patch,) = bob_events
    assert bob_patch.attributes is not None
    assert bob_patch.attributes["chukwa.patch.narration"] == "Bob buys the last candy bar."
    assert "set_entity_state bob" in tuple(bob_patch.attributes["chukwa.patch.changes"])


def test_without_content_capture_inputs_and_outputs_are_page_paths(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    attempt = _candy_attempt(scripted_llm)
    with override_settings(CHUKWA_OTEL_CAPTURE_CONTENT=False):
        spans = attempt_spans(attempt_id=attempt.pk)
    for span in spans:
        assert span.attributes is not None
        assert not any(
            key.startswith(("gen_ai.input.", "gen_ai.output.messages", "llm.input_messages"))
            or key in ("gen_ai.system_instructions", "gen_ai.tool.call.arguments")
            or key == "gen_ai.tool.call.result"
            for key in span.attributes
        ), span.name
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 3  # the backend's conformance check and two generations
    for chat in _generations(spans):
        assert chat.attributes is not None
        page = f"/llm-calls/{chat.attributes['chukwa.llm_call.id']}/"
        assert chat.attributes["input.value"] == page == chat.attributes["output.value"]
    (tool,) = [s for s in spans if s.name == "execute_tool buy_candy"]
    assert tool.attributes is not None
    assert (
        tool.attributes["input.value"] == f"/invocations/{tool.attributes['chukwa.invocation.id']}/"
    )
    # neither the arguments the model chose nor anything the prompts say leaves
    assert "candy_bar" not in json.dumps([dict(s.attributes or {}) for s in spans])
    assert "Acting subject" not in json.dumps([dict(s.attributes or {}) for s in spans])


def test_with_content_capture_spans_carry_the_genai_messages_and_tool_call(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    attempt = _candy_attempt(scripted_llm)
    with override_settings(CHUKWA_OTEL_CAPTURE_CONTENT=True):
        spans = attempt_spans(attempt_id=attempt.pk)
    first, second = sorted(_generations(spans), key=lambda s: s.start_time or 0)
    call = LlmCall.objects.get(pk=(first.attributes or {})["chukwa.llm_call.id"])
    attrs = dict(first.attributes or {})
    system = [m for m in call.messages if m["role"] == "system"]
    assert system, "the node prompt has a system message"
    assert json.loads(str(attrs["gen_ai.system_instructions"])) == [
        {"type": "text", "content": m["content"]} for m in system
    ]
    inputs = json.loads(str(attrs["gen_ai.input.messages"]))
    assert [m["role"] for m in inputs] == [
        m["role"] for m in call.messages if m["role"] != "system"
    ]
    assert inputs[-1]["parts"] == [{"type": "text", "content": call.messages[-1]["content"]}]
    (output,) = json.loads(str(attrs["gen_ai.output.messages"]))
    assert output["role"] == "assistant"
    assert json.loads(output["parts"][0]["content"]) == BUY_CANDY
    # the root's input: the page, then the world as the subjects found it (turn 0)
    (root,) = [s for s in spans if s.parent is None]
    opening = str((root.attributes or {})["input.value"])
    assert opening.startswith(f"{settings.CHUKWA_SITE_URL}/attempts/{attempt.pk}/\n")
    assert "The world at turn 0:" in opening
    turn0 = Turn.objects.get(world=attempt.world, number=0).state
    for entity in turn0["entities"]:
        assert f"- {entity['id']} ({entity['environment']}): " in opening
    assert attrs["output.value"] == call.raw_text
    assert attrs["llm.input_messages.0.message.role"] == call.messages[0]["role"]
    # the tool the model elected: its call id, arguments and result
    (tool,) = [s for s in spans if s.name == "execute_tool buy_candy"]
    tool_attrs = dict(tool.attributes or {})
    row = SourceInvocation.objects.get(pk=tool_attrs["chukwa.invocation.id"])
    assert tool_attrs["gen_ai.tool.call.id"] == str(row.pk)
    assert (
        json.loads(str(tool_attrs["gen_ai.tool.call.arguments"]))
        == BUY_CANDY["tool_call"]["arguments"]
    )
    assert json.loads(str(tool_attrs["gen_ai.tool.call.result"])) == row.response_json
    # the second generation saw the tool's result, and says so
    second_inputs = json.loads(str((second.attributes or {})["gen_ai.input.messages"]))
    assert "Result of buy_candy" in second_inputs[-1]["parts"][0]["content"]


def _with_provider(body: dict[str, Any], provider: str) -> dict[str, Any]:
    """The assembly input with ``provider`` on every LLM source's interface."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("name") == "llm_chat_completions":
                node["provider"] = provider
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(body)
    return body


def test_the_provider_is_the_one_the_source_names(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    create_world(_with_provider(fixture_body("park"), "ollama"), "local")
    scripted_llm.script(
        BUY_CANDY, final("Bob buys the last candy bar.", set_state("bob", "holding candy"))
    )
    attempt = run_turn("local")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    chats = [s for s in attempt_spans(attempt_id=attempt.pk) if s.name.startswith("chat ")]
    assert chats
    for chat in chats:
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.provider.name"] == "ollama"
        assert chat.attributes["llm.provider"] == "ollama"


@pytest.mark.parametrize("provider", ["OpenAI", "", "open ai", 7, "a" * 65])
def test_a_provider_that_is_not_a_name_is_refused_naming_the_field(provider: Any) -> None:
    body = _with_provider(fixture_body("park"), "x")
    _with_provider(body, provider)
    with pytest.raises(ChukwaError) as refused:
        scenario_assemble(data=body)
    assert refused.value.status_code == 400
    assert str(refused.value.details.get("field", "")).endswith("interface.provider")


def test_a_conformance_check_is_a_chat_span(scripted_llm: ScriptedLLM) -> None:
    create_world("ant_on_plate", "probed")
    scripted_llm.script(ANT_OK)
    attempt = run_turn("probed")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    check = SourceInvocation.objects.get(attempt=attempt, kind="conformance_check")
    with override_settings(CHUKWA_OTEL_CAPTURE_CONTENT=True):
        spans = attempt_spans(attempt_id=attempt.pk)
    (span,) = [
        s for s in spans if (s.attributes or {}).get("chukwa.invocation.id") == str(check.pk)
    ]
    attrs = dict(span.attributes or {})
    assert span.name == f"chat {check.request['model']}"
    assert attrs["openinference.span.kind"] == "LLM"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == check.request["model"]
    assert attrs["gen_ai.output.type"] == "json"
    assert json.loads(str(attrs["gen_ai.input.messages"]))
    assert "chukwa-conformance-ok" in str(attrs["gen_ai.output.messages"])
    assert span.status.status_code is StatusCode.OK


def test_the_exported_bytes_hold_content_but_never_a_key(
    scripted_llm: ScriptedLLM, toy_sources: str, otlp_receiver: _Receiver
) -> None:
    """Over the real OTLP/HTTP exporter, content on: the model echoed the API key into its
    narration; what leaves is the scrubbed text, as the pages show it."""
    create_world("park", "leaky")
    scripted_llm.script(
        BUY_CANDY, final(f"Bob reads {TEST_API_KEY} aloud.", set_state("bob", "holding candy"))
    )
    attempt = run_turn("leaky")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    endpoint = f"http://127.0.0.1:{otlp_receiver.server_address[1]}"
    with override_settings(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20collector-key",
        CHUKWA_OTEL_CAPTURE_CONTENT=True,
    ):
        result = attempt_trace_export(attempt_id=str(attempt.pk))
    (post,) = otlp_receiver.posts
    _, headers, body = post
    assert headers["authorization"] == "Bearer collector-key"
    assert result["exported"] > 0
    assert TEST_API_KEY.encode() not in body
    assert b"collector-key" not in body
    assert b"Bob reads [redacted] aloud." in body
    assert b"gen_ai.input.messages" in body
    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "chukwa"
    assert resource["openinference.project.name"] == "chukwa"
    spans = [s for ss in resource_spans.scope_spans for s in ss.spans]
    # STATUS_CODE_OK is 1 in the protocol: no span left unset
    assert {s.status.code for s in spans} == {1}


def test_the_project_is_the_one_otel_resource_attributes_names(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempt = _candy_attempt(scripted_llm)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "openinference.project.name=park-runs")
    (root, *_) = attempt_spans(attempt_id=attempt.pk)
    assert root.resource.attributes["openinference.project.name"] == "park-runs"
    assert root.resource.attributes["service.name"] == "chukwa"


def test_an_operators_intervention_is_on_the_root_span_and_in_its_output() -> None:
    from tests.worlds_app.test_counterfactuals import RULE_SCENARIO
    from worlds_app.services import world_create
    from worlds_app.services.interventions import intervention_create

    world_create(data={"slug": "coin-otel", "scenario_ref": {"data": RULE_SCENARIO}})
    intervention_create(
        slug="coin-otel",
        data={
            "patch": {
                "narration": "Rain drums on the window.",
                "effects": [
                    {
                        "op": "set_environment_content",
                        "environment_label": "room",
                        "content": "A bare room; rain drums on the window.",
                    }
                ],
            },
            "note": "rain starts",
        },
        created_by="alice",
    )
    attempt = run_turn("coin-otel")
    assert attempt.status == AttemptStatus.COMMITTED
    (root,) = [s for s in attempt_spans(attempt_id=attempt.pk) if s.parent is None]
    assert root.attributes is not None
    assert str(root.attributes["output.value"]).startswith(
        "operator alice: Rain drums on the window."
    )
    names = [e.name for e in root.events]
    assert names == ["world_patch_applied", "intervention"]
    patch, intervention = root.events
    assert patch.attributes is not None and intervention.attributes is not None
    assert patch.attributes["chukwa.patch.seq"] == 1
    assert "set_environment_content room" in tuple(patch.attributes["chukwa.patch.changes"])
    assert intervention.attributes["chukwa.intervention.operator"] == "alice"
    assert intervention.attributes["chukwa.intervention.note"] == "rain starts"
    assert not [s for s in attempt_spans(attempt_id=attempt.pk) if s.name == "invoke_agent "]


def test_an_experiment_worlds_root_span_names_its_experiment_arm_and_replicate() -> None:
    from scenarios_app.services import metric_put
    from worlds_app.services import turn_attempt_run
    from worlds_app.services.experiments import experiment_create

    scenario = scenario_assemble(data=fixture_body("picnic_rules"))["scenario_hash"]
    metric = metric_put(
        content={
            "version": 1,
            "label": "t",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    experiment_create(
        data={
            "slug": "traced",
            "arms": [
                {"label": "calm", "scenario_ref": {"hash": scenario}},
                {"label": "windy", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 2,
            "turns": 1,
            "metrics": [{"hash": metric}],
        }
    )
    attempt = TurnAttempt.objects.get(world__slug="traced--windy--2")
    assert turn_attempt_run(attempt_id=str(attempt.pk), owner="test") == "committed"
    (root,) = [s for s in attempt_spans(attempt_id=attempt.pk) if s.parent is None]
    attributes = dict(root.attributes or {})
    assert (attributes["chukwa.experiment"], attributes["chukwa.arm"]) == ("traced", "windy")
    assert attributes["chukwa.replicate"] == 2
