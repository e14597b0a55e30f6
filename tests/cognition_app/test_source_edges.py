"""Source edges at run time: URL variables that are not URLs, the traced and
expiring conformance check, model output that parses but cannot be stored, hostile bodies and
streams — every trace row finished, every failure naming a variable and never its value."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cognition_app.models import InvocationStatus, LlmCall, LlmChunk, SourceInvocation, SourceProbe
from cognition_app.sources.retry import RATE_LIMITED_TRIES
from devservices.toys import TOY_ENV_VARS
from tests.cognition_app.test_llm_retry import ANT_OK, assert_world_unchanged
from tests.support.fixtures import TEST_API_KEY
from tests.support.hostile import hostile_json_server
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, run_turn
from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt

pytestmark = pytest.mark.django_db


def assert_all_finished() -> None:
    assert not SourceInvocation.objects.filter(status=InvocationStatus.RUNNING).exists()
    assert not LlmCall.objects.filter(status=InvocationStatus.RUNNING).exists()
    assert not TurnAttempt.objects.filter(status=AttemptStatus.RUNNING).exists()


def kinds(attempt: TurnAttempt) -> list[tuple[str, str]]:
    return list(
        SourceInvocation.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("kind", "status")
    )


# --- URL variables ---------------------------------------------------------------------------

NOT_URLS = [
    "sk-live-this-is-a-secret-value",
    "ftp://127.0.0.1/x",
    "http://user:sk-live-this-is-a-secret-value@127.0.0.1:9/v1",
    "http://127.0.0.1:9/v1?key=sk-live-this-is-a-secret-value",
    "javascript:alert(1)",
    "/v1/chat",
    "http://",
    "http://127.0.0.1:9/v1\r\nX: y",
]


@pytest.mark.parametrize("value", NOT_URLS)
def test_a_url_variable_that_is_not_a_url_fails_naming_it_not_its_value(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", value)
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", TEST_API_KEY)
    create_world("ant_on_plate", "badurl")
    attempt = run_turn("badurl")
    assert attempt.status == AttemptStatus.FAILED
    assert "CHUKWA_LLM_BASE_URL" in attempt.failure_reason
    (inv,) = SourceInvocation.objects.filter(attempt=attempt)
    assert inv.status == InvocationStatus.FAILED and inv.failure_class == "config"
    stored = json.dumps(
        [
            attempt.failure_reason,
            inv.failure_message,
            inv.request,
            list(AttemptEvent.objects.filter(attempt=attempt).values_list("payload", flat=True)),
            list(LlmCall.objects.values_list("base_url", "error")),
        ]
    )
    assert "sk-live" not in stored and "127.0.0.1:9" not in stored and "javascript" not in stored
    assert_world_unchanged("badurl")


# --- the conformance check -------------------------------------------------------------------


def test_the_conformance_check_is_a_traced_call_of_the_attempt(scripted_llm: ScriptedLLM) -> None:
    create_world("ant_on_plate", "probe-traced")
    scripted_llm.script(ANT_OK)
    attempt = run_turn("probe-traced")
    assert attempt.status == AttemptStatus.COMMITTED
    assert kinds(attempt) == [
        ("conformance_check", "succeeded"),
        ("llm_generation", "succeeded"),
    ]
    check = SourceInvocation.objects.get(attempt=attempt, kind="conformance_check")
    assert check.http_status == 200 and check.request["url_env"] == "CHUKWA_LLM_BASE_URL"
    assert "chukwa-conformance-ok" in check.response_text
    # the verdict holds: the next attempt sends no second check
    scripted_llm.script(ANT_OK)
    second = run_turn("probe-traced")
    assert [k for k, _ in kinds(second)] == ["llm_generation"]
    assert len(scripted_llm.probes) == 1


def test_a_negative_verdict_is_opened_from_the_attempt_and_expires(
    lax_llm: ScriptedLLM, settings: Any
) -> None:
    create_world("ant_on_plate", "probe-lax")
    first = run_turn("probe-lax")
    assert first.status == AttemptStatus.FAILED
    (check,) = SourceInvocation.objects.filter(attempt=first)
    assert (check.kind, check.status, check.failure_class) == (
        "conformance_check",
        "failed",
        "backend_not_enforcing",
    )
    assert "does not follow the schema" in check.failure_message
    (failed,) = AttemptEvent.objects.filter(attempt=first, kind="attempt_failed")
    assert failed.invocation_id == check.pk  # the timeline opens the check
    # within the retry period: the stored verdict is recorded as this attempt's failed check
    second = run_turn("probe-lax")
    (again,) = SourceInvocation.objects.filter(attempt=second)
    assert again.kind == "conformance_check" and again.failure_class == "backend_not_enforcing"
    assert "checked again after" in again.failure_message
    assert len(lax_llm.probes) == 1
    # the verdict expires: the backend is checked again, and now it enforces
    settings.CHUKWA_PROBE_RETRY_SECONDS = 0
    lax_llm.enforce_schema = True
    lax_llm.script(ANT_OK)
    third = run_turn("probe-lax")
    assert third.status == AttemptStatus.COMMITTED
    assert len(lax_llm.probes) == 2
    assert SourceProbe.objects.get(base_url=lax_llm.base_url).enforces_schema is True
    assert_all_finished()


def test_a_backend_that_was_down_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    llm = ScriptedLLM().start()
    base_url = llm.base_url
    llm.stop()  # the port is closed now: the check cannot connect
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", base_url)
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", TEST_API_KEY)
    create_world("ant_on_plate", "probe-down")
    down = run_turn("probe-down")
    assert down.status == AttemptStatus.FAILED
    (check,) = SourceInvocation.objects.filter(attempt=down)
    assert (check.kind, check.failure_class) == ("conformance_check", "transport")
    assert not SourceProbe.objects.exists()  # no verdict from an outage
    with ScriptedLLM() as up:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", up.base_url)
        up.script(ANT_OK)
        assert run_turn("probe-down").status == AttemptStatus.COMMITTED
    assert_all_finished()


@pytest.mark.parametrize(
    ("status", "failure_class", "named"),
    [
        (401, "authentication", "refused the credentials (check CHUKWA_LLM_API_KEY)"),
        (403, "authentication", "refused the credentials (check CHUKWA_LLM_API_KEY)"),
        (500, "server_error", "HTTP 500"),
        (503, "server_error", "HTTP 503"),
        (429, "transport", "HTTP 429"),
        (404, "http_status", "HTTP 404"),
    ],
)
def test_a_check_refused_for_another_reason_than_schemas_is_no_verdict(
    scripted_llm: ScriptedLLM, status: int, failure_class: str, named: str
) -> None:
    """A wrong key once read "the backend does not enforce JSON schemas", and that verdict was
    kept: the next attempt, after the key was fixed, was refused without asking the backend."""
    scripted_llm.probe_reply = Reply(
        status=status, error_body={"error": {"message": "Incorrect API key provided: sk-..."}}
    )
    create_world("ant_on_plate", f"probe-{status}")
    first = run_turn(f"probe-{status}")
    assert first.status == AttemptStatus.FAILED
    # a 429 is the endpoint asking to slow down: waited out and tried again, up to
    # RATE_LIMITED_TRIES tries, each a failed check of its own; any other refusal is one try
    tries = RATE_LIMITED_TRIES if status == 429 else 1
    checks = list(SourceInvocation.objects.filter(attempt=first).order_by("seq"))
    assert len(checks) == tries
    assert all(c.retry_of_id == checks[0].pk for c in checks[1:])
    check = checks[-1]
    assert (check.kind, check.status, check.failure_class) == (
        "conformance_check",
        "failed",
        failure_class,
    )
    assert check.http_status == status
    assert named in check.failure_message
    assert "nothing was concluded about JSON schemas" in check.failure_message
    assert "does not enforce" not in check.failure_message
    assert failure_class in first.failure_reason
    assert "does not enforce" not in first.failure_reason
    assert not SourceProbe.objects.exists()  # nothing kept
    assert_world_unchanged(f"probe-{status}")

    # The key is fixed (the backend answers): the next attempt asks again, and commits.
    scripted_llm.probe_reply = None
    scripted_llm.script(ANT_OK)
    second = run_turn(f"probe-{status}")
    assert second.status == AttemptStatus.COMMITTED
    assert kinds(second) == [("conformance_check", "succeeded"), ("llm_generation", "succeeded")]
    assert len(scripted_llm.probes) == tries + 1
    assert SourceProbe.objects.get(base_url=scripted_llm.base_url).enforces_schema is True
    assert_all_finished()


def test_a_refused_response_format_is_still_a_verdict(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.probe_reply = Reply(
        status=400, error_body={"error": {"message": "response_format is not supported"}}
    )
    create_world("ant_on_plate", "probe-400")
    first = run_turn("probe-400")
    (check,) = SourceInvocation.objects.filter(attempt=first)
    assert check.failure_class == "backend_not_enforcing"
    assert "does not enforce" in check.failure_message
    assert SourceProbe.objects.get(base_url=scripted_llm.base_url).enforces_schema is False


# --- model output that parses but cannot be stored -------------------------------------------


def _patch_with_narration(narration_json: str) -> str:
    """A final patch whose narration is given as raw JSON text (escapes kept as written)."""
    return (
        '{"kind": "final_patch", "tool_call": null, "patch": {"narration": '
        + narration_json
        + ', "effects": []}}'
    )


UNSTORABLE = [
    pytest.param(_patch_with_narration('"nul \\u0000 here"'), "U+0000", id="nul-escape"),
    pytest.param(_patch_with_narration('"lone \\ud800 surrogate"'), "surrogate", id="surrogate"),
    pytest.param(_patch_with_narration("NaN"), "not valid JSON", id="nan"),
    pytest.param(_patch_with_narration("Infinity"), "not valid JSON", id="infinity"),
    pytest.param(
        '{"kind": "final_patch", "tool_call": null, "patch": {"narration": "x", '
        '"effects": [], "n": 1e400}}',
        "not a JSON number",
        id="overflow",
    ),
    pytest.param(_patch_with_narration('"raw nul \x00 byte"'), "not valid JSON", id="raw-nul"),
]


@pytest.mark.parametrize(("reply", "complaint"), UNSTORABLE)
def test_unstorable_model_output_goes_to_the_retry_lane(
    reply: str, complaint: str, scripted_llm: ScriptedLLM
) -> None:
    create_world("ant_on_plate", "unstorable")
    scripted_llm.script(Reply(text=reply), ANT_OK)
    attempt = run_turn("unstorable")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    gens = list(
        SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation").order_by("seq")
    )
    assert [g.validation_status for g in gens] == ["invalid", "valid"]
    (rejected,) = AttemptEvent.objects.filter(attempt=attempt, kind="generation_rejected")
    assert complaint in json.dumps(rejected.payload["rejection"], ensure_ascii=False)
    # what the model is told on the retry names the problem
    corrective = scripted_llm.requests[1]["messages"][-1]["content"]
    assert complaint in corrective
    first_call = LlmCall.objects.get(invocation=gens[0])
    assert "\x00" not in first_call.raw_text
    assert "\x00" not in "".join(
        LlmChunk.objects.filter(call=first_call).values_list("text", flat=True)
    )
    assert_all_finished()


def test_a_stream_event_of_the_wrong_shape_is_a_transport_failure(
    scripted_llm: ScriptedLLM,
) -> None:
    create_world("ant_on_plate", "badshape")
    scripted_llm.script(Reply(raw_body=b'data: {"choices": "nope"}\n\ndata: [DONE]\n\n'))
    attempt = run_turn("badshape")
    assert attempt.status == AttemptStatus.FAILED
    gen = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert (gen.status, gen.failure_class) == ("failed", "transport")
    assert "unexpected shape" in gen.failure_message
    assert_all_finished()


def test_a_model_name_or_usage_the_database_cannot_hold_is_not_an_error(
    scripted_llm: ScriptedLLM,
) -> None:
    body = ANT_OK | {}
    text = json.dumps(body)
    events = [
        {"model": "m\x00" + "x" * 500, "choices": [{"delta": {"content": text}}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 2**70, "completion_tokens": 3}},
    ]
    raw = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    create_world("ant_on_plate", "oddmeta")
    scripted_llm.script(Reply(raw_body=raw.encode()))
    attempt = run_turn("oddmeta")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    call = LlmCall.objects.get(invocation__attempt=attempt, invocation__kind="llm_generation")
    assert "\x00" not in call.response_model and len(call.response_model) <= 200
    assert call.prompt_tokens is None or call.prompt_tokens < 2**31
    assert_all_finished()


def _sse(*events: Any, done: bool = False) -> bytes:
    body = "".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


PARTIAL = {"model": "m", "choices": [{"delta": {"content": '{"kind": "fin'}}]}


@pytest.mark.parametrize(
    ("raw", "provider_message"),
    [
        # OpenAI's shape: the error as a data event, after part of the reply
        (
            _sse(PARTIAL, {"error": {"message": f"overloaded (key {TEST_API_KEY})"}}, done=True),
            "overloaded (key [redacted])",
        ),
        # an SSE ``error`` event, its data not even JSON
        (
            _sse(PARTIAL) + f"event: error\ndata: upstream reset, key {TEST_API_KEY}\n\n".encode(),
            "upstream reset, key [redacted]",
        ),
    ],
    ids=["error-data", "error-event"],
)
def test_an_error_sent_inside_the_stream_fails_the_generation_with_the_providers_message(
    raw: bytes, provider_message: str, scripted_llm: ScriptedLLM
) -> None:
    create_world("ant_on_plate", "streamerr")
    scripted_llm.script(Reply(raw_body=raw))
    attempt = run_turn("streamerr")
    assert attempt.status == AttemptStatus.FAILED
    assert provider_message in attempt.failure_reason
    gen = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert (gen.status, gen.failure_class) == ("failed", "transport")
    assert (
        gen.failure_message == f"the LLM endpoint sent an error in the stream: {provider_message}"
    )
    call = LlmCall.objects.get(invocation=gen)
    assert (call.status, call.error) == ("failed", gen.failure_message)
    assert call.raw_text == '{"kind": "fin'  # what came before the error is kept
    assert TEST_API_KEY not in json.dumps([attempt.failure_reason, gen.response_text])
    assert_all_finished()
    assert_world_unchanged("streamerr")


def test_a_200_reply_that_is_not_an_event_stream_is_a_transport_failure(
    scripted_llm: ScriptedLLM,
) -> None:
    """A server that ignores ``stream`` answers with one JSON completion: named as such, not as
    a stream that ended early."""
    completion = {
        "choices": [{"message": {"content": json.dumps(ANT_OK)}, "finish_reason": "stop"}]
    }
    create_world("ant_on_plate", "notsse")
    scripted_llm.script(
        Reply(raw_body=json.dumps(completion).encode(), content_type="application/json")
    )
    attempt = run_turn("notsse")
    assert attempt.status == AttemptStatus.FAILED
    gen = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert (gen.status, gen.failure_class) == ("failed", "transport")
    assert "not an event stream" in gen.failure_message
    assert "application/json" in gen.failure_message
    assert_all_finished()


def test_the_stream_is_split_into_lines_only_at_cr_and_lf(scripted_llm: ScriptedLLM) -> None:
    """SSE lines end at CR, LF or CRLF only: a reply holding U+2028 or U+0085 unescaped (line
    separators to str.splitlines) is one event, and CRLF-ended events read like LF-ended ones."""
    patch = copy.deepcopy(ANT_OK)
    patch["patch"]["narration"] = "The ant walks\u2028east\u0085to the crumb."
    text = json.dumps(patch, ensure_ascii=False)
    events = [
        {"choices": [{"delta": {"content": text[:40]}}]},
        {"choices": [{"delta": {"content": text[40:]}, "finish_reason": "stop"}]},
    ]
    raw = _sse(*events, done=True).replace(b"\n\n", b"\r\n\r\n", 1)
    create_world("ant_on_plate", "lsep")
    scripted_llm.script(Reply(raw_body=raw))
    attempt = run_turn("lsep")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    call = LlmCall.objects.get(invocation__attempt=attempt, invocation__kind="llm_generation")
    assert call.raw_text == text
    assert_all_finished()


# --- hostile http_json bodies ----------------------------------------------------------------


def _park_turn_against(
    body: bytes,
    scenario: str | dict[str, Any],
    slug: str,
    monkeypatch: pytest.MonkeyPatch,
    trickle: tuple[int, float] | None = None,
) -> TurnAttempt:
    """One turn of a park world whose toy sources all answer ``body`` (hostile_json_server)."""
    with hostile_json_server(body, trickle=trickle) as url:
        for name in TOY_ENV_VARS:
            monkeypatch.setenv(name, url)
        create_world(scenario, slug)
        return run_turn(slug)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"temperature_c": NaN, "condition": "x"}', "not JSON"),
        (b'{"temperature_c": 3, "condition": "a\\u0000b"}', "cannot be stored"),
        (b'{"temperature_c": 1e400, "condition": "x"}', "cannot be stored"),
    ],
)
def test_an_http_json_body_that_cannot_be_stored_fails_the_invocation(
    body: bytes, expected: str, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempt = _park_turn_against(body, "park", "hostile-body", monkeypatch)
    assert attempt.status == AttemptStatus.FAILED
    failed = SourceInvocation.objects.get(attempt=attempt, status="failed")
    assert failed.failure_class == "non_json"
    assert expected in failed.failure_message
    assert all(
        "\x00" not in t for t in SourceInvocation.objects.values_list("response_text", flat=True)
    )
    assert_all_finished()


# --- argument schemas with local references, embedded in the schema sent to the model -------


def test_an_argument_schema_with_local_references_keeps_its_meaning_when_embedded() -> None:
    from chukwa_core.component_validation import schema_validator_for
    from cognition_app.llm_nodes import embedded_schema

    arguments = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {"item": {"type": "string", "enum": ["candy_bar"]}},
        "type": "object",
        "additionalProperties": False,
        "required": ["item"],
        "properties": {"item": {"$ref": "#/$defs/item"}},
    }
    defs: dict[str, Any] = {}
    outer = {
        "type": "object",
        "properties": {
            "tool_call": {"anyOf": [{"type": "null"}, embedded_schema(arguments, "tool_0", defs)]}
        },
        "$defs": defs,
    }
    validator = schema_validator_for(outer)
    assert validator.is_valid({"tool_call": {"item": "candy_bar"}})
    assert not validator.is_valid({"tool_call": {"item": "gum"}})
    assert not validator.is_valid({"tool_call": {"other": 1}})
    plain = {"type": "object"}
    assert embedded_schema(plain, "tool_1", defs) is plain


# --- timeout_ms bounds the whole exchange; a reply has a size limit --------------------------


def _with_timeout(fixture: str, timeout_ms: int) -> dict[str, Any]:
    from tests.support.worlds import fixture_body, workflow_of

    body = fixture_body(fixture)
    workflow = workflow_of(body, "ant" if fixture == "ant_on_plate" else "walker")
    if fixture == "ant_on_plate":
        workflow["nodes"][0]["llm_source_ref"]["inline"]["interface"]["timeout_ms"] = timeout_ms
    else:
        workflow["ambient_sources"][0]["source_ref"]["inline"]["interface"]["timeout_ms"] = (
            timeout_ms
        )
    return body


def test_a_stream_that_trickles_past_timeout_ms_is_cut_at_its_deadline(
    scripted_llm: ScriptedLLM,
) -> None:
    """Each chunk comes sooner than the read timeout, so httpx alone would wait for all of them
    (3 chunks 1.5 s apart: 3 s); the call is cut at 2 s, while it waits for the third."""
    create_world(_with_timeout("ant_on_plate", 2000), "trickle")
    text = json.dumps(ANT_OK)
    scripted_llm.script(Reply(text=text, chunk_size=-(-len(text) // 3), chunk_delay_s=1.5))
    attempt = run_turn("trickle")
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert inv.failure_class == "transport"
    assert inv.failure_message == (
        "the LLM endpoint did not finish its reply within timeout_ms (2000 ms)"
    )
    assert 2000 <= inv.duration_ms < 2800, inv.duration_ms  # not at the third chunk (3 s)
    call = LlmCall.objects.get(invocation=inv)
    assert call.status == InvocationStatus.FAILED
    assert LlmChunk.objects.filter(call=call).count() == 2  # what arrived is kept
    assert_all_finished()


def test_a_reply_longer_than_the_limit_fails_keeping_its_chunks(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cognition_app.sources import llm

    monkeypatch.setattr(llm, "MAX_REPLY_CHARS", 100)
    create_world("ant_on_plate", "endless")
    scripted_llm.script(Reply(text="x" * 400, chunk_size=10))
    attempt = run_turn("endless")
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert inv.failure_message == (
        "the reply is longer than 100 characters (its chunks so far are kept)"
    )
    assert LlmChunk.objects.filter(call__invocation=inv).count() == 10
    assert_all_finished()


def test_a_json_body_that_trickles_past_timeout_ms_is_cut_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = json.dumps({"temperature_c": 21, "condition": "sunny"}).encode()
    scenario = _with_timeout("park", 1000)  # the body takes 1.8 s to send
    attempt = _park_turn_against(body, scenario, "trickle-json", monkeypatch, trickle=(4, 0.6))
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.filter(attempt=attempt).order_by("seq").first()
    assert inv is not None and inv.status == InvocationStatus.FAILED
    assert inv.failure_message == ("timed out after 1000 ms: the response did not end in time")
    assert 1000 <= inv.duration_ms < 1600, inv.duration_ms  # not at the body's end (1.8 s)
    assert_all_finished()


def test_a_json_body_larger_than_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from cognition_app.sources import http_json

    monkeypatch.setattr(http_json, "MAX_RESPONSE_BYTES", 1000)
    body = json.dumps({"temperature_c": 21, "condition": "x" * 5000}).encode()
    attempt = _park_turn_against(body, "park", "huge-json", monkeypatch)
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.filter(attempt=attempt).order_by("seq").first()
    assert inv is not None
    assert inv.failure_message == "the response is larger than 1,000 bytes; nothing of it is kept"
    assert inv.http_status == 200 and inv.response_text == ""
    assert_all_finished()


def test_a_conformance_answer_larger_than_the_limit_is_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cognition_app.sources.conformance import PROBE_MAX_BYTES

    huge = Reply(raw_body=b" " * (PROBE_MAX_BYTES + 1), content_type="application/json")
    with ScriptedLLM(probe_reply=huge) as llm:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("CHUKWA_LLM_API_KEY", TEST_API_KEY)
        create_world("ant_on_plate", "probe-huge")
        attempt = run_turn("probe-huge")
    assert attempt.status == AttemptStatus.FAILED
    (check,) = SourceInvocation.objects.filter(attempt=attempt)
    assert (check.kind, check.failure_class) == ("conformance_check", "transport")
    assert check.failure_message == (
        "conformance check could not reach the backend: its answer is larger than "
        f"{PROBE_MAX_BYTES:,} bytes; nothing was concluded about JSON schemas and the check "
        "runs again on the next call"
    )
    assert not SourceProbe.objects.exists()  # no verdict: checked again next time
    assert_all_finished()


def test_an_event_stream_larger_than_the_limit_fails(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One endless line (no event ever ends) is held by the line decoder: the stream's size is
    bounded whatever its events hold."""
    from cognition_app.sources import stream_events

    monkeypatch.setattr(stream_events, "MAX_STREAM_BYTES", 5000)
    create_world("ant_on_plate", "endless-line")
    scripted_llm.script(Reply(raw_body=b"data: " + b"x" * 20_000))
    attempt = run_turn("endless-line")
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert inv.failure_message == "the event stream is larger than 5,000 bytes"
    assert_all_finished()


def test_an_error_reply_is_read_only_up_to_its_limit(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP 500 whose body goes on and on is not read whole into memory: its start is kept
    (20,000 characters at most), the call fails as a transport failure."""
    from cognition_app.sources import transport

    monkeypatch.setattr(transport, "ERROR_BODY_BYTES", 30_000)
    create_world("ant_on_plate", "huge-error")
    scripted_llm.script(Reply(status=500, raw_body=b"overloaded " + b"x" * 5_000_000))
    reads: list[tuple[int, int]] = []  # (the limit, the bytes read)
    read_at_most = transport.read_at_most

    def spy(response: Any, limit: int) -> bytes:
        data = read_at_most(response, limit)
        reads.append((limit, len(data)))
        return data

    monkeypatch.setattr(transport, "read_at_most", spy)
    attempt = run_turn("huge-error")
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert (inv.failure_class, inv.http_status) == ("transport", 500)
    assert inv.failure_message.startswith("HTTP 500 from the LLM endpoint: overloaded xxx")
    assert inv.response_text.startswith("overloaded ") and len(inv.response_text) == 20_000
    assert reads == [(30_000, 30_000)]  # of 5 MB
    assert_all_finished()


def test_a_silent_llm_endpoint_fails_naming_timeout_ms_in_milliseconds(
    scripted_llm: ScriptedLLM,
) -> None:
    """A read that waits past ``timeout_ms`` before the reply's head: the message names the
    limit as it was authored (it said "0 s" for 500 ms)."""
    create_world(_with_timeout("ant_on_plate", 500), "silent")
    scripted_llm.script(Reply(text=json.dumps(ANT_OK), delay_s=1.5))
    attempt = run_turn("silent")
    assert attempt.status == AttemptStatus.FAILED
    inv = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    assert inv.failure_class == "transport"
    assert inv.failure_message.startswith(
        "the LLM endpoint did not answer within timeout_ms (500 ms): Read timed out"
    ), inv.failure_message
    assert "HTTPConnectionPool" not in inv.failure_message
    assert_all_finished()
