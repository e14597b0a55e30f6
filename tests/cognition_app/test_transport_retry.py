"""A source's ``retry`` policy: transport failures tried again, each try traced as its own
invocation row naming the first; never a 4xx other than 429, never model content (whose lane is
``test_llm_retry``), never past the policy's tries. Real HTTP throughout: the scripted
OpenAI-compatible server, the toy sources, and a flaky server in front of them."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from django.test import Client

from cognition_app.budgets import prompt_estimate
from cognition_app.failures import SourceFailure
from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.sources.cancel import CancelScope
from cognition_app.sources.context import CallContext
from cognition_app.sources.retry import RetryPolicy, is_transient, wait_before, with_retries
from scenarios_app.models import ResponseSource
from scenarios_app.services import scenario_assemble
from tests.cognition_app.test_llm_retry import ANT_OK, BOB_OK, events, invocations
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, fixture_body, run_turn, workflow_of
from worlds_app.models import AttemptStatus
from worlds_app.services import world_create

pytestmark = pytest.mark.django_db


def ant_world(slug: str, retry: dict[str, Any]) -> None:
    body = fixture_body("ant_on_plate")
    (profile,) = body["cognition_profiles"]
    node = workflow_of(body, profile)["nodes"][0]
    node["llm_source_ref"]["inline"]["interface"]["retry"] = retry
    create_world(body, slug)


def generations(attempt: Any) -> list[SourceInvocation]:
    return invocations(attempt, kind="llm_generation")


def test_a_503_then_a_200_commits_with_both_tries_traced(
    scripted_llm: ScriptedLLM, operator_client: Any, client: Client, reader_user: Any
) -> None:
    ant_world("retry-503", {"attempts": 3, "backoff_ms": 10})
    scripted_llm.script(Reply(status=503), ANT_OK)
    attempt = run_turn("retry-503")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    first, second = generations(attempt)
    assert (first.status, first.failure_class, first.http_status) == ("failed", "transport", 503)
    assert second.status == "succeeded"
    # the tries of one call: the same request, the later naming the first, rows of their own
    assert second.retry_of_id == first.pk and first.retry_of_id is None
    assert second.request_key == first.request_key and second.request == first.request
    assert second.seq > first.seq and second.started_at >= first.ended_at
    assert first.generation_attempt == second.generation_attempt == 1
    assert [
        c.status
        for c in LlmCall.objects.filter(
            invocation__attempt=attempt, invocation__kind="llm_generation"
        )
    ] == [
        "failed",
        "succeeded",
    ]
    assert len(scripted_llm.requests) == 2
    assert events(attempt, "generation_rejected") == []
    assert list(first.retries.all()) == [second]
    # a reviewer sees both tries on the timeline, the later naming the first
    client.force_login(reader_user)
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "generation 1 · try 2" in page
    api = operator_client.get(f"/api/source-invocations/{second.pk}/").json()
    assert api["retry_of_id"] == str(first.pk)
    detail = client.get(f"/invocations/{second.pk}/").content.decode()
    assert "A later try of" in detail and f"/invocations/{first.pk}/" in detail


def test_a_400_is_not_tried_again(scripted_llm: ScriptedLLM) -> None:
    ant_world("retry-400", {"attempts": 3})
    scripted_llm.script(Reply(status=400), ANT_OK)
    attempt = run_turn("retry-400")
    assert attempt.status == AttemptStatus.FAILED
    (only,) = generations(attempt)
    assert only.http_status == 400 and only.failure_class != "transport"
    assert len(scripted_llm.requests) == 1 and scripted_llm.pending == 1
    assert "tries" not in attempt.failure_reason


def test_a_rejected_reply_goes_to_the_content_lane_not_a_transport_retry(
    scripted_llm: ScriptedLLM,
) -> None:
    ant_world("retry-content", {"attempts": 3})
    scripted_llm.script("not json at all", ANT_OK)
    attempt = run_turn("retry-content")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    rejected, accepted = generations(attempt)
    assert rejected.status == accepted.status == "succeeded"
    assert (rejected.generation_attempt, accepted.generation_attempt) == (1, 2)
    assert rejected.retry_of_id is None and accepted.retry_of_id is None
    assert len(events(attempt, "generation_rejected")) == 1


def test_exhausted_tries_fail_the_attempt_naming_the_last_failure_and_every_try(
    scripted_llm: ScriptedLLM,
) -> None:
    ant_world("retry-exhausted", {"attempts": 3, "backoff_ms": 20})
    scripted_llm.script(Reply(status=503), Reply(status=502), Reply(status=500), ANT_OK)
    attempt = run_turn("retry-exhausted")
    assert attempt.status == AttemptStatus.FAILED
    tries = generations(attempt)
    assert [t.http_status for t in tries] == [503, 502, 500]
    assert all(t.status == "failed" and t.failure_class == "transport" for t in tries)
    assert [t.retry_of_id for t in tries] == [None, tries[0].pk, tries[0].pk]
    assert scripted_llm.pending == 1  # a fourth try was never made
    reason = attempt.failure_reason
    assert "HTTP 500" in reason.split("after 3 tries")[0]  # the last failure first
    for n, t in enumerate(tries, 1):
        assert f"try {n} ({t.pk})" in reason
    (failed,) = events(attempt, "attempt_failed")
    assert failed.invocation_id == tries[-1].pk


def test_retry_after_is_honoured(scripted_llm: ScriptedLLM) -> None:
    ant_world("retry-after", {"attempts": 2, "backoff_ms": 0})
    scripted_llm.script(Reply(status=429, headers=(("Retry-After", "1"),)), ANT_OK)
    attempt = run_turn("retry-after")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    first, second = generations(attempt)
    assert first.http_status == 429 and first.response_headers["retry-after"] == "1"
    assert (second.started_at - first.ended_at).total_seconds() >= 0.95


def test_without_a_policy_a_503_fails_at_once(scripted_llm: ScriptedLLM) -> None:
    create_world("ant_on_plate", "no-policy")
    scripted_llm.script(Reply(status=503), ANT_OK)
    attempt = run_turn("no-policy")
    assert attempt.status == AttemptStatus.FAILED
    assert len(generations(attempt)) == 1 and scripted_llm.pending == 1


def test_each_try_reserves_and_gives_back_its_own_budget(scripted_llm: ScriptedLLM) -> None:
    """A per-turn budget with room for one call's reservation only: the second try may start
    because the first gave its reservation back when it failed (it spent nothing)."""
    ant_world("estimate", {"attempts": 2})
    scripted_llm.script(ANT_OK)
    run_turn("estimate")
    (request,) = scripted_llm.requests
    one_call = prompt_estimate(request["messages"], request.get("response_format")) + 800
    body = fixture_body("ant_on_plate")
    (profile,) = body["cognition_profiles"]
    iface = workflow_of(body, profile)["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["retry"] = {"attempts": 2}
    scenario = scenario_assemble(data=body)["scenario_hash"]
    budget = {"max_tokens_per_turn": one_call + 100}  # less than two reservations
    world_create(data={"slug": "budgeted", "scenario_ref": {"hash": scenario}, "budget": budget})  # type: ignore[typeddict-item]
    scripted_llm.script(Reply(status=503), ANT_OK)
    attempt = run_turn("budgeted")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    first, second = generations(attempt)
    assert first.status == "failed" and second.retry_of_id == first.pk
    assert LlmCall.objects.get(invocation=second).completion_tokens


# --- http_json: a flaky server in front of the toy weather -----------------------------------


@pytest.fixture
def flaky_weather(toy_sources: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """CHUKWA_TOY_WEATHER_URL answers 503 (Retry-After: 0) to its first request, then passes
    each request on to the toy weather. Yields the statuses it answered."""
    answered: list[int] = []

    class Flaky(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not answered:
                status, data, headers = 503, b'{"error": "busy"}', {"Retry-After": "0"}
            else:
                upstream = httpx.post(f"{toy_sources}{self.path}", content=body, headers={})
                status, data, headers = upstream.status_code, upstream.content, {}
            answered.append(status)
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("CHUKWA_TOY_WEATHER_URL", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield answered
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_json_source_is_tried_again_after_a_503(
    scripted_llm: ScriptedLLM, flaky_weather: list[int]
) -> None:
    body = fixture_body("park")
    weather = workflow_of(body, "walker")["ambient_sources"][0]
    weather["source_ref"]["inline"]["interface"]["retry"] = {"attempts": 2, "backoff_ms": 0}
    create_world(body, "flaky-weather")
    scripted_llm.script(BOB_OK)
    attempt = run_turn("flaky-weather")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    assert flaky_weather == [503, 200]
    first, second = invocations(attempt, ambient_source_id="park_weather")
    assert (first.status, first.http_status, first.failure_class) == ("failed", 503, "transport")
    assert (second.status, second.retry_of_id) == ("succeeded", first.pk)
    assert second.response_json["turn"] == 1


# --- the rule, without a network ----------------------------------------------------------


@pytest.mark.parametrize(
    ("failure_class", "status", "transient"),
    [
        ("transport", None, True),  # a timeout, a refused or dropped connection
        ("transport", 503, True),
        ("transport", 429, True),
        ("http_status", 404, False),
        ("response_format_rejected", 400, False),
        ("budget_exhausted", None, False),
        ("cancelled", None, False),
        ("config", None, False),
        ("schema_invalid", 200, False),
        ("replay_miss", None, False),
    ],
)
def test_only_transport_failures_are_transient(
    failure_class: str, status: int | None, transient: bool
) -> None:
    assert is_transient(SourceFailure(failure_class, "x", http_status=status)) is transient


def test_the_wait_doubles_and_is_capped() -> None:
    policy = RetryPolicy(attempts=5, backoff_ms=500)
    plain = SourceFailure("transport", "x")
    assert [wait_before(policy, n, plain, 60) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert wait_before(RetryPolicy(5, 30_000), 4, plain, 60) == 30.0
    asked = SourceFailure("transport", "x", http_status=429, retry_after="20")
    assert wait_before(policy, 1, asked, 60) == 20.0
    assert wait_before(policy, 1, asked, 5) == 5.0  # never past one timeout_ms


def _bare_ctx(cancel: CancelScope | None = None) -> CallContext:
    return CallContext(
        attempt_id=uuid.uuid4(),
        world_id=0,
        world_slug="w",
        attempted_turn=1,
        next_seq=lambda: 0,
        cancel=cancel,
    )


def _failing(tries: list[CallContext]) -> Any:
    def call(ctx: CallContext) -> None:
        tries.append(ctx)
        raise SourceFailure("transport", "HTTP 503", invocation_id=uuid.uuid4(), http_status=503)

    return call


def test_a_stop_during_the_wait_ends_the_call_without_another_try() -> None:
    cancel = CancelScope()
    threading.Timer(0.2, cancel.cancel, args=("another subject failed",)).start()
    tries: list[CallContext] = []
    iface = {"timeout_ms": 5000, "retry": {"attempts": 3, "backoff_ms": 10_000}}
    started = time.monotonic()
    with pytest.raises(SourceFailure) as excinfo:
        with_retries(interface=iface, ctx=_bare_ctx(cancel), what="a call", call=_failing(tries))
    assert excinfo.value.failure_class == "cancelled"
    assert len(tries) == 1 and time.monotonic() - started < 5


def test_no_try_starts_that_could_outlast_the_attempts_window(settings: Any) -> None:
    settings.CHUKWA_ATTEMPT_SOFT_TIME_LIMIT = 3  # a third: 1 s, less than one timeout_ms
    tries: list[CallContext] = []
    iface = {"timeout_ms": 2000, "retry": {"attempts": 5}}
    with pytest.raises(SourceFailure):
        with_retries(interface=iface, ctx=_bare_ctx(), what="a call", call=_failing(tries))
    assert len(tries) == 1


class _StrictReplay:
    source_world_slug = "recorded"
    strict = True

    def take(self, key: str) -> SourceInvocation | None:
        return None


def test_a_strictly_replaying_world_never_tries_again() -> None:
    tries: list[CallContext] = []
    ctx = dataclasses.replace(_bare_ctx(), replay=_StrictReplay())
    iface = {"timeout_ms": 2000, "retry": {"attempts": 3}}
    with pytest.raises(SourceFailure):
        with_retries(interface=iface, ctx=ctx, what="a call", call=_failing(tries))
    assert len(tries) == 1


def test_later_tries_name_the_first() -> None:
    tries: list[CallContext] = []
    iface = {"timeout_ms": 2000, "retry": {"attempts": 3}}
    with pytest.raises(SourceFailure) as excinfo:
        with_retries(interface=iface, ctx=_bare_ctx(), what="a call", call=_failing(tries))
    assert [t.retry_of is None for t in tries] == [True, False, False]
    assert tries[1].retry_of == tries[2].retry_of
    assert "after 3 tries" in excinfo.value.message


# --- validation at put ------------------------------------------------------------------------

LLM = {
    "version": 1,
    "label": "chat",
    "interface": {
        "name": "llm_chat_completions",
        "model": "gpt-4o-mini",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "schema_delivery": "response_format",
        "timeout_ms": 60000,
    },
}
HTTP = {
    "version": 1,
    "label": "toy",
    "interface": {
        "name": "http_json",
        "method": "POST",
        "url_env": "CHUKWA_TOY_WEATHER_URL",
        "timeout_ms": 5000,
    },
}
MCP = {
    "version": 1,
    "label": "lamp",
    "interface": {
        "name": "mcp_tool",
        "url_env": "CHUKWA_MCP_LAMP_URL",
        "tool": "switch_lamp",
        "timeout_ms": 5000,
    },
}


@pytest.mark.parametrize("source", [LLM, HTTP, MCP], ids=["llm", "http_json", "mcp_tool"])
@pytest.mark.parametrize(
    ("retry", "field"),
    [
        (3, "retry"),
        ({}, "retry.attempts"),
        ({"attempts": 0}, "retry.attempts"),
        ({"attempts": 6}, "retry.attempts"),
        ({"attempts": True}, "retry.attempts"),
        ({"attempts": 2, "backoff_ms": -1}, "retry.backoff_ms"),
        ({"attempts": 2, "backoff_ms": 30_001}, "retry.backoff_ms"),
        ({"attempts": 2, "backoff_ms": 1.5}, "retry.backoff_ms"),
        ({"attempts": 2, "jitter": True}, "retry.jitter"),
    ],
)
def test_a_bad_retry_is_refused_naming_its_field_and_writes_nothing(
    operator_client: Any, source: dict[str, Any], retry: Any, field: str
) -> None:
    bad = json.loads(json.dumps(source))
    bad["interface"]["retry"] = retry
    response = operator_client.post("/api/response-sources/", {"content": bad}, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == (
        "invalid_response_source",
        f"content.interface.{field}",
    )
    assert not ResponseSource.objects.exists()


@pytest.mark.parametrize("source", [LLM, HTTP, MCP], ids=["llm", "http_json", "mcp_tool"])
def test_a_good_retry_is_stored(operator_client: Any, source: dict[str, Any]) -> None:
    good = json.loads(json.dumps(source))
    good["interface"]["retry"] = {"attempts": 5, "backoff_ms": 30_000}
    response = operator_client.post("/api/response-sources/", {"content": good}, format="json")
    assert response.status_code == 201, response.json()
    assert ResponseSource.objects.get().content["interface"]["retry"] == {
        "attempts": 5,
        "backoff_ms": 30_000,
    }
