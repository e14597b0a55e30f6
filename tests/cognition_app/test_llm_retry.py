"""The model-content retry lane and the failures that are not model content (
seed 003 Part B: retry with corrective feedback).

Rejected generations (non-JSON, schema-invalid, unknown tool, bad arguments, a patch the kernel
rejects, empty text) go back to the model as its own text plus a corrective user message, each as
a new traced generation, within ``max_generation_attempts``. Transport, HTTP, configuration and
backend-conformance failures fail the attempt at once, burning no budget.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.db import connection

from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA, world_patch_schema_hash
from cognition_app.llm_nodes import CORRECTIVE, TEXT_CORRECTIVE
from cognition_app.models import LlmCall, LlmChunk, SourceInvocation, SourceProbe
from devservices.toys import NOT_JSON_BODY
from scenarios_app.models import JsonSchema
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, fixture_body, run_turn, workflow_of
from worlds_app.models import AttemptEvent, AttemptStatus, PatchTransition, Turn, TurnAttempt, World
from worlds_app.services import attempts, turn_attempt_reap

pytestmark = pytest.mark.django_db

ANT_OK: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "The ant walks east to the crumb.",
        "effects": [
            {"op": "set_entity_state", "entity_id": "ant", "state": "beside the crumb, hungry"},
            {"op": "append_entity_memory", "entity_id": "ant", "content": "I walked to the crumb."},
        ],
    },
}
BOB_OK: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "Bob stretches by the vending machine.",
        "effects": [{"op": "set_entity_state", "entity_id": "bob", "state": "stretching"}],
    },
}
BUY_CANDY: dict[str, Any] = {
    "kind": "tool_call",
    "tool_call": {"name": "buy_candy", "arguments": {"item": "candy_bar"}},
    "patch": None,
}
THE_CRUMB: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "The ant eats the crumb.",
        "effects": [{"op": "set_entity_state", "entity_id": "THE CRUMB", "state": "eaten"}],
    },
}
RESPONSE_FORMAT_REJECTION = {
    "error": {
        "message": "response_format json_schema not supported",
        "type": "invalid_request_error",
    }
}


def dumps(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def invocations(attempt: TurnAttempt, **filters: Any) -> list[SourceInvocation]:
    return list(SourceInvocation.objects.filter(attempt=attempt, **filters).order_by("seq"))


def events(attempt: TurnAttempt, kind: str) -> list[AttemptEvent]:
    return list(AttemptEvent.objects.filter(attempt=attempt, kind=kind).order_by("seq"))


def assert_world_unchanged(slug: str) -> None:
    world = World.objects.get(slug=slug)
    assert world.current_turn == 0
    assert list(Turn.objects.filter(world=world).values_list("number", flat=True)) == [0]
    assert not PatchTransition.objects.filter(world=world).exists()


def failed_attempt_event(attempt: TurnAttempt) -> AttemptEvent:
    (event,) = events(attempt, "attempt_failed")
    assert event.payload["step"] == attempt.failure_step
    assert event.payload["reason"] == attempt.failure_reason
    return event


# --- one rejection, a corrective message, then success --------------------------------------

REJECTIONS = [
    pytest.param(
        "ant_on_plate",
        "The ant walks to the crumb and eats it.",
        ["not valid JSON"],
        id="non_json",
    ),
    pytest.param(
        "ant_on_plate",
        {"kind": "maybe", "tool_call": None, "patch": None},
        ["/kind", "'maybe'"],
        id="schema_invalid_kind",
    ),
    pytest.param(
        "ant_on_plate",
        {"kind": "final_patch", "tool_call": None},
        ["/patch", "WorldPatch"],
        id="schema_invalid_missing_patch",
    ),
    pytest.param(
        "park",
        {"kind": "tool_call", "tool_call": {"name": "teleport", "arguments": {}}, "patch": None},
        ["unknown tool 'teleport'", "Available tools: buy_candy, send_text, use_drinking_fountain"],
        id="unknown_tool",
    ),
    pytest.param(
        "park",
        {
            "kind": "tool_call",
            "tool_call": {"name": "buy_candy", "arguments": {"item": "lollipop"}},
            "patch": None,
        },
        ["/tool_call/arguments/item", "'lollipop'", "buy_candy"],
        id="tool_arguments_fail_schema",
    ),
    pytest.param(
        "ant_on_plate",
        THE_CRUMB,
        [
            "effects[0].entity_id 'THE CRUMB' does not match any entity",
            "Valid entity ids:",
            "ant (Ant)",
            "crumb (Crumb)",
            "sesame_seed (Sesame seed)",
            "sugar_grain (Sugar grain)",
        ],
        id="unknown_entity_id",
    ),
]


@pytest.mark.parametrize(("scenario", "bad", "complaint_parts"), REJECTIONS)
def test_rejected_generation_is_corrected_and_retried(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    scenario: str,
    bad: str | dict[str, Any],
    complaint_parts: list[str],
) -> None:
    subject = "bob" if scenario == "park" else "ant"
    create_world(scenario, "retry")
    bad_text = dumps(bad)
    scripted_llm.script(bad_text, BOB_OK if scenario == "park" else ANT_OK)
    attempt = run_turn("retry")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    scripted_llm.assert_exhausted()

    rejected, accepted = invocations(attempt, kind="llm_generation")
    (event,) = events(attempt, "generation_rejected")
    assert event.subject_id == subject
    assert event.node_id == "act"
    assert event.invocation_id == rejected.pk
    assert event.llm_call_id == LlmCall.objects.get(invocation=rejected).pk
    assert event.payload["generation_attempt"] == 1
    assert event.payload["raw_response"] == bad_text
    complaint = event.payload["rejection"]
    for part in complaint_parts:
        assert part in complaint
    # The rejected generation is traced as invalid, with what was wrong.
    assert rejected.status == "succeeded"  # the call itself worked; its content did not
    assert rejected.generation_attempt == 1
    assert rejected.validation_status == "invalid"
    call = LlmCall.objects.get(invocation=rejected)
    assert call.raw_text == bad_text
    assert call.parse_error or call.validation_errors
    # No tool ran for a rejected call.
    assert invocations(attempt, kind="model_elected_tool") == []
    assert accepted.generation_attempt == 2
    assert accepted.model_output_kind == "final_patch"
    assert accepted.validation_status == "valid"

    # Same node, same source, same contract: the second request is the first plus the model's
    # rejected text and one corrective user message naming the problem.
    first, second = scripted_llm.requests
    assert second["model"] == first["model"]
    assert second["response_format"] == first["response_format"]
    assert second["messages"][:-2] == first["messages"]
    assert second["messages"][-2] == {"role": "assistant", "content": bad_text}
    corrective = second["messages"][-1]
    assert corrective == {"role": "user", "content": CORRECTIVE.format(complaint=complaint)}
    assert corrective["content"].startswith("Your previous response was rejected.")
    for part in complaint_parts:
        assert part in corrective["content"]

    # The accepted generation's patch is what changed the world.
    (applied,) = [e for e in events(attempt, "world_patch_applied") if e.subject_id == subject]
    assert applied.invocation_id == accepted.pk


@pytest.mark.parametrize(("scenario", "bad", "complaint_parts"), REJECTIONS)
def test_rejected_generation_is_marked_invalid(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    scenario: str,
    bad: str | dict[str, Any],
    complaint_parts: list[str],
) -> None:
    """Every rejected generation's judgement is ``invalid`` (model output kind is
    tool_call | final_patch | text | invalid), whatever shape the rejected text had."""
    create_world(scenario, "invalid-kind")
    scripted_llm.script(dumps(bad), BOB_OK if scenario == "park" else ANT_OK)
    attempt = run_turn("invalid-kind")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    rejected, _accepted = invocations(attempt, kind="llm_generation")
    assert rejected.model_output_kind == "invalid"
    assert rejected.validation_status == "invalid"


# --- the budget -----------------------------------------------------------------------------


def test_budget_exhausted_fails_the_attempt_with_every_rejection_traced(
    scripted_llm: ScriptedLLM,
) -> None:
    create_world("ant_on_plate", "exhausted")
    bad = ["not json at all", dumps({"kind": "maybe"}), dumps(THE_CRUMB)]
    scripted_llm.script(*bad)
    attempt = run_turn("exhausted")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "model_output"
    assert attempt.failure_subject == "ant"
    assert "3 generation(s) rejected" in attempt.failure_reason
    assert "THE CRUMB" in attempt.failure_reason  # the last rejection
    assert_world_unchanged("exhausted")
    scripted_llm.assert_exhausted()
    assert len(scripted_llm.requests) == 3  # the budget, and not one more

    generations = invocations(attempt, kind="llm_generation")
    assert [g.generation_attempt for g in generations] == [1, 2, 3]
    rejected = events(attempt, "generation_rejected")
    assert [e.payload["generation_attempt"] for e in rejected] == [1, 2, 3]
    assert [e.payload["raw_response"] for e in rejected] == bad
    for inv, event, text in zip(generations, rejected, bad, strict=True):
        call = LlmCall.objects.get(invocation=inv)
        assert inv.status == call.status == "succeeded"
        assert inv.validation_status == "invalid"
        assert call.raw_text == text
        assert event.invocation_id == inv.pk
        assert event.llm_call_id == call.pk
    # Each retry carries the whole corrective conversation so far.
    r1, r2, r3 = scripted_llm.requests
    assert r2["messages"][:-2] == r1["messages"]
    assert r3["messages"][:-2] == r2["messages"]
    assert r3["messages"][-4]["content"] == bad[0]
    assert r3["messages"][-2]["content"] == bad[1]
    event = failed_attempt_event(attempt)
    assert event.subject_id == "ant"
    assert event.node_id == "act"
    assert not events(attempt, "world_patch_applied")


# --- the backend must take response_format and enforce it -----------------------------------


def test_backend_rejecting_response_format_fails_loudly_without_fallback(
    scripted_llm: ScriptedLLM,
) -> None:
    create_world("ant_on_plate", "no-rf")
    scripted_llm.script(Reply(status=400, error_body=RESPONSE_FORMAT_REJECTION))
    attempt = run_turn("no-rf")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    assert "response_format_rejected" in attempt.failure_reason
    assert_world_unchanged("no-rf")
    (request,) = scripted_llm.requests  # no second try without response_format
    assert request["response_format"]["type"] == "json_schema"
    (inv,) = invocations(attempt, kind="llm_generation")
    assert inv.status == "failed"
    assert inv.failure_class == "response_format_rejected"
    assert inv.http_status == 400
    assert "response_format json_schema not supported" in inv.response_text
    call = LlmCall.objects.get(invocation=inv)
    assert call.status == "failed"
    assert "response_format" in call.error
    assert events(attempt, "generation_rejected") == []


def test_backend_not_enforcing_the_schema_fails_before_any_generation(
    lax_llm: ScriptedLLM,
) -> None:
    create_world("ant_on_plate", "lax")
    lax_llm.script(ANT_OK)  # would be accepted, if it were ever asked
    attempt = run_turn("lax")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    assert "backend_not_enforcing" in attempt.failure_reason
    assert "CHUKWA_LLM_BASE_URL" in attempt.failure_reason  # the variable, not its value
    assert "does not enforce" in attempt.failure_reason
    assert_world_unchanged("lax")
    assert len(lax_llm.probes) == 1
    assert lax_llm.requests == []
    assert lax_llm.pending == 1
    probe = SourceProbe.objects.get(base_url=lax_llm.base_url)
    assert probe.enforces_schema is False
    assert "does not follow the schema" in probe.detail
    assert events(attempt, "generation_rejected") == []


# --- transport failures burn no budget ------------------------------------------------------


def test_llm_http_500_fails_the_attempt_as_transport_without_retry(
    scripted_llm: ScriptedLLM,
) -> None:
    create_world("ant_on_plate", "llm-500")
    scripted_llm.script(Reply(status=500), ANT_OK)
    attempt = run_turn("llm-500")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    assert "transport" in attempt.failure_reason
    assert len(scripted_llm.requests) == 1
    assert scripted_llm.pending == 1
    (inv,) = invocations(attempt, kind="llm_generation")
    assert inv.status == "failed"
    assert inv.failure_class == "transport"
    assert inv.http_status == 500
    assert "scripted HTTP 500" in inv.response_text
    assert events(attempt, "generation_rejected") == []
    assert_world_unchanged("llm-500")


def test_transport_failure_after_a_rejection_is_not_retried(scripted_llm: ScriptedLLM) -> None:
    """One rejection used one of three tries; the 500 that follows ends the attempt at once."""
    create_world("ant_on_plate", "reject-then-500")
    scripted_llm.script("not json", Reply(status=503), ANT_OK)
    attempt = run_turn("reject-then-500")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    assert len(scripted_llm.requests) == 2
    assert len(events(attempt, "generation_rejected")) == 1
    failures = [i.failure_class for i in invocations(attempt, kind="llm_generation")]
    assert failures == ["", "transport"]


def test_stream_dropped_mid_way_fails_and_keeps_the_partial_text(
    scripted_llm: ScriptedLLM,
) -> None:
    create_world("ant_on_plate", "dropped")
    full = dumps(ANT_OK)
    scripted_llm.script(Reply(text=full, chunk_size=10, close_mid_stream=True), ANT_OK)
    attempt = run_turn("dropped")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    assert len(scripted_llm.requests) == 1
    (inv,) = invocations(attempt, kind="llm_generation")
    assert inv.status == "failed"
    assert inv.failure_class == "transport"
    call = LlmCall.objects.get(invocation=inv)
    assert call.status == "failed"
    assert call.error
    assert call.raw_text
    assert full.startswith(call.raw_text)
    assert len(call.raw_text) < len(full)
    chunks = LlmChunk.objects.filter(call=call).order_by("seq")
    assert "".join(c.text for c in chunks) == call.raw_text
    assert call.ttft_ms is not None
    assert events(attempt, "generation_rejected") == []
    assert_world_unchanged("dropped")


def test_malformed_stream_event_finishes_the_invocation_as_failed(
    scripted_llm: ScriptedLLM,
) -> None:
    """A ``data:`` line that is not JSON is a transport failure; like every other failure it
    must finish the invocation and its LLM call (not leave them ``running`` forever)."""
    create_world("ant_on_plate", "bad-sse")
    scripted_llm.script(Reply(raw_body=b'data: {"choices": [\n\n'))
    attempt = run_turn("bad-sse")
    assert attempt.status == AttemptStatus.FAILED
    assert "malformed stream event" in attempt.failure_reason
    (inv,) = invocations(attempt, kind="llm_generation")
    call = LlmCall.objects.get(invocation=inv)
    assert inv.status == "failed"
    assert inv.failure_class == "transport"
    assert "malformed stream event" in inv.failure_message
    assert inv.ended_at is not None
    assert call.status == "failed"


# --- failing HTTP sources -------------------------------------------------------------------

HTTP_FAILURES = [
    pytest.param("/fail/500", "transport", 500, "deliberate HTTP 500", id="http_500"),
    pytest.param("/fail/not_json", "non_json", 200, NOT_JSON_BODY, id="not_json"),
    pytest.param("/fail/schema", "schema_invalid", 200, '"unexpected"', id="schema_invalid"),
    pytest.param("/no_such_toy", "http_status", 404, "no toy at /no_such_toy", id="http_404"),
]


@pytest.mark.parametrize(("path", "failure_class", "http_status", "body_part"), HTTP_FAILURES)
def test_failing_ambient_source_fails_the_attempt_before_any_subject(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    path: str,
    failure_class: str,
    http_status: int,
    body_part: str,
) -> None:
    body = fixture_body("park")
    weather = workflow_of(body, "walker")["ambient_sources"][0]
    assert weather["id"] == "park_weather"
    weather["source_ref"]["inline"]["interface"]["path"] = path
    create_world(body, "bad-ambient")
    attempt = run_turn("bad-ambient")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "ambient"
    assert "park_weather" in attempt.failure_reason
    assert failure_class in attempt.failure_reason
    (inv,) = invocations(attempt)  # nothing ran after it
    assert inv.kind == "ambient_context"
    assert inv.ambient_source_id == "park_weather"
    assert inv.status == "failed"
    assert inv.failure_class == failure_class
    assert inv.http_status == http_status
    assert body_part in inv.response_text
    assert inv.request["url"] == toy_sources + path
    assert inv.ended_at is not None
    if failure_class == "schema_invalid":
        assert inv.response_json == {"unexpected": True}
        assert inv.validation_status == "invalid"
        assert inv.validation_errors
    assert scripted_llm.requests == []
    assert events(attempt, "ambient_source_invoked") == []
    assert_world_unchanged("bad-ambient")


@pytest.mark.parametrize(("path", "failure_class", "http_status", "body_part"), HTTP_FAILURES[:3])
def test_failing_tool_source_fails_the_attempt_after_staged_patches(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    path: str,
    failure_class: str,
    http_status: int,
    body_part: str,
) -> None:
    """The ant's patch was applied to the working world before Bob's tool failed: nothing of
    the turn is committed, and the model is not asked again (a source failure is not content)."""
    body = fixture_body("park")
    (tool,) = [
        t
        for t in workflow_of(body, "walker")["nodes"][0]["available_tools"]
        if t["name"] == "buy_candy"
    ]
    tool["source_ref"]["inline"]["interface"]["path"] = path
    create_world(body, "bad-tool")
    scripted_llm.script(BUY_CANDY, BOB_OK)
    attempt = run_turn("bad-tool")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    assert attempt.failure_subject == "bob"
    assert failure_class in attempt.failure_reason
    assert len(scripted_llm.requests) == 1
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert inv.tool_name == "buy_candy"
    assert inv.status == "failed"
    assert inv.failure_class == failure_class
    assert inv.http_status == http_status
    assert body_part in inv.response_text
    assert inv.parent_id == invocations(attempt, kind="llm_generation")[0].pk
    # The ant's staged patch is in the failed attempt's timeline but not in any turn.
    assert [e.subject_id for e in events(attempt, "world_patch_applied")] == ["ant"]
    assert_world_unchanged("bad-tool")


def test_attempt_failed_event_links_the_failing_invocation(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    """Events are linked to their source invocation where applicable; the failure of
    an attempt caused by one source call should land a reviewer on that call."""
    body = fixture_body("park")
    workflow_of(body, "walker")["ambient_sources"][0]["source_ref"]["inline"]["interface"][
        "path"
    ] = "/fail/500"
    create_world(body, "linked-failure")
    attempt = run_turn("linked-failure")
    assert attempt.status == AttemptStatus.FAILED
    (inv,) = invocations(attempt)
    assert failed_attempt_event(attempt).invocation_id == inv.pk


# --- configuration --------------------------------------------------------------------------


def test_missing_toy_url_variable_fails_naming_it(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHUKWA_TOY_WEATHER_URL")
    create_world("park", "no-weather-url")
    attempt = run_turn("no-weather-url")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "ambient"
    assert "CHUKWA_TOY_WEATHER_URL" in attempt.failure_reason
    (inv,) = invocations(attempt)
    assert inv.status == "failed"
    assert inv.failure_class == "config"
    assert "CHUKWA_TOY_WEATHER_URL" in inv.failure_message
    assert inv.http_status is None
    assert scripted_llm.requests == []
    assert_world_unchanged("no-weather-url")


def test_missing_llm_key_variable_fails_naming_it(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHUKWA_LLM_API_KEY")
    create_world("ant_on_plate", "no-key")
    attempt = run_turn("no-key")
    assert attempt.status == AttemptStatus.FAILED
    assert "CHUKWA_LLM_API_KEY" in attempt.failure_reason
    (inv,) = invocations(attempt)
    assert inv.kind == "llm_generation"
    assert inv.status == "failed"
    assert inv.failure_class == "config"
    assert "CHUKWA_LLM_API_KEY" in inv.failure_message
    assert LlmCall.objects.get(invocation=inv).status == "failed"
    assert scripted_llm.requests == []
    assert scripted_llm.probes == []
    assert_world_unchanged("no-key")


# --- llm_text nodes -------------------------------------------------------------------------

PERCEPTION = "A humming vending machine stands against the far wall; the steel door is shut."
INTENTION = "I walk to the vending machine and look at what it sells."
ROOM_OK: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "The subject walks to the vending machine and studies the rows of cans.",
        "effects": [
            {
                "op": "set_entity_state",
                "entity_id": "subject",
                "state": "standing at the vending machine, reading the labels",
            }
        ],
    },
}


def test_text_nodes_feed_each_other_in_order(scripted_llm: ScriptedLLM) -> None:
    create_world("locked_vending_room", "room")
    scripted_llm.script(PERCEPTION, INTENTION, ROOM_OK)
    attempt = run_turn("room")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    perceive, intend, act = scripted_llm.requests
    # Text nodes ask for plain text: no schema is sent for them.
    assert "response_format" not in perceive
    assert "response_format" not in intend
    assert act["response_format"]["type"] == "json_schema"
    assert PERCEPTION not in json.dumps(perceive["messages"])
    assert PERCEPTION in intend["messages"][-1]["content"]
    assert INTENTION not in json.dumps(intend["messages"])
    assert INTENTION in act["messages"][-1]["content"]
    generations = invocations(attempt, kind="llm_generation")
    assert [(g.node_id, g.model_output_kind) for g in generations] == [
        ("perceive", "text"),
        ("intend", "text"),
        ("act", "final_patch"),
    ]
    outputs = [(e.node_id, e.payload["output"]) for e in events(attempt, "node_output")]
    assert outputs == [("perceive", PERCEPTION), ("intend", INTENTION)]


def test_empty_text_output_is_rejected_and_retried(scripted_llm: ScriptedLLM) -> None:
    create_world("locked_vending_room", "empty-text")
    scripted_llm.script("", PERCEPTION, INTENTION, ROOM_OK)
    attempt = run_turn("empty-text")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    scripted_llm.assert_exhausted()
    first, second, intend, _act = scripted_llm.requests
    assert second["messages"][:-2] == first["messages"]
    assert second["messages"][-2] == {"role": "assistant", "content": ""}
    corrective = second["messages"][-1]
    assert corrective["role"] == "user"
    assert "empty" in corrective["content"]
    (event,) = events(attempt, "generation_rejected")
    assert event.node_id == "perceive"
    assert corrective["content"] == TEXT_CORRECTIVE.format(complaint=event.payload["rejection"])
    rejected, accepted = invocations(attempt, node_id="perceive")
    assert event.invocation_id == rejected.pk
    assert rejected.validation_status == "invalid"
    assert (rejected.generation_attempt, accepted.generation_attempt) == (1, 2)
    assert accepted.model_output_kind == "text"
    assert PERCEPTION in intend["messages"][-1]["content"]


def test_empty_text_output_exhausts_the_text_node_budget(scripted_llm: ScriptedLLM) -> None:
    create_world("locked_vending_room", "empty-twice")
    scripted_llm.script("", "   \n ")
    attempt = run_turn("empty-twice")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "model_output"
    assert "'perceive'" in attempt.failure_reason
    assert len(scripted_llm.requests) == 2  # perceive's budget is 2
    assert len(events(attempt, "generation_rejected")) == 2
    assert_world_unchanged("empty-twice")


# --- a slow generation is not a dead worker -------------------------------------------------


# Real commits (the lease is renewed and reaped from other connections). available_apps keeps
# the teardown flush to these apps without re-running post_migrate, so later serialized_rollback
# tests still find the content types they serialized.
@pytest.mark.django_db(
    transaction=True, available_apps=["scenarios_app", "worlds_app", "cognition_app"]
)
def test_slow_generation_keeps_its_lease_and_is_not_reaped(
    scripted_llm: ScriptedLLM, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt renews its lease while it waits on the model (settings: "A running attempt
    renews its lease while it works"); the reaper, running meanwhile, must leave it alone."""
    # An earlier transactional test may have flushed the migration-stored WorldPatch schema.
    JsonSchema.objects.get_or_create(
        hash=world_patch_schema_hash(), defaults={"content": WORLD_PATCH_SCHEMA}
    )
    settings.CHUKWA_ATTEMPT_LEASE_SECONDS = 2
    monkeypatch.setattr(attempts, "kick_on_commit", lambda world_id: None)  # no Celery here
    reaped: list[str] = []

    def slow_reply(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(4.5)  # well past the 2 s lease
        try:
            reaped.extend(turn_attempt_reap())  # what the beat task would do meanwhile
        finally:
            connection.close()  # this server thread's own connection
        return ANT_OK

    create_world("ant_on_plate", "slow")
    scripted_llm.script(slow_reply)
    attempt = run_turn("slow")
    assert reaped == []
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
