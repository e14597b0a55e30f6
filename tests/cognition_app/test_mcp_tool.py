"""``mcp_tool`` sources end to end: the park_mcp fixture, whose Bob may flip the
park lamp through the toy MCP server (devservices.toy_mcp), run in-process against the scripted
LLM server over real HTTP; the call is traced, validated, fed back and replayed like an
``http_json`` tool, and fails like one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devservices.toy_mcp import BROKEN_SWITCH_MESSAGE, NOT_JSON_TEXT, RunningMcp
from scenarios_app.services import scenario_assemble
from tests.cognition_app.test_llm_retry import (
    BUY_CANDY,
    assert_world_unchanged,
    events,
    failed_attempt_event,
    invocations,
)
from tests.cognition_app.test_park import assert_committed, entity_state, final, remember, set_state
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import (
    TOY_MCP_KEY,
    create_world,
    fixture_body,
    run_turn,
    workflow_of,
)
from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt
from worlds_app.services import world_create

pytestmark = pytest.mark.django_db

TOGGLE: dict[str, Any] = {
    "kind": "tool_call",
    "tool_call": {"name": "toggle_lamp", "arguments": {}},
    "patch": None,
}


def lamp_patch(turn: int, lamp: str) -> dict[str, Any]:
    return final(
        f"Bob flips the lamp switch; the lamp is {lamp}.",
        set_state("park_lamp", f"{lamp}; a lamp on a post beside the bench"),
        remember("bob", f"Turn {turn}: I switched the lamp {lamp}."),
    )


def lamp_tool(body: dict[str, Any]) -> dict[str, Any]:
    (tool,) = [
        t
        for t in workflow_of(body, "walker")["nodes"][0]["available_tools"]
        if t["name"] == "toggle_lamp"
    ]
    return tool


def lamp_interface(body: dict[str, Any]) -> dict[str, Any]:
    interface: dict[str, Any] = lamp_tool(body)["source_ref"]["inline"]["interface"]
    return interface


def event_kinds(attempt: TurnAttempt) -> list[str]:
    return list(
        AttemptEvent.objects.filter(attempt=attempt).order_by("seq").values_list("kind", flat=True)
    )


# --- a committed turn -----------------------------------------------------------------------


def test_bobs_lamp_call_is_traced_fed_back_and_kept_per_world(
    scripted_llm: ScriptedLLM, toy_sources: str, toy_mcp_server: RunningMcp
) -> None:
    world = create_world("park_mcp", "lamp")
    scripted_llm.script(TOGGLE, lamp_patch(1, "on"))
    attempt = run_turn("lamp")
    assert_committed(attempt)
    first_generation, second_generation = invocations(attempt, kind="llm_generation")
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert (inv.tool_name, inv.source_label, inv.status) == (
        "toggle_lamp",
        "toy_mcp_lamp",
        "succeeded",
    )
    # request, result, duration
    assert inv.request == {
        "url_env": "CHUKWA_MCP_LAMP_URL",
        "tool": "toggle_lamp",
        "arguments": {},
        "url": toy_mcp_server.url,
    }
    assert inv.response_json == {"lamp": "on"}
    assert json.loads(inv.response_text)["structuredContent"] == {"lamp": "on"}
    assert inv.validation_status == "valid"
    assert inv.http_status == 200
    assert inv.ended_at is not None and inv.ended_at >= inv.started_at
    assert inv.duration_ms is not None and inv.duration_ms >= 0
    assert inv.parent_id == first_generation.pk
    assert inv.input_schema_hash and inv.output_schema_hash
    # The toy answers only with the bearer key, which no trace holds.
    assert TOY_MCP_KEY not in json.dumps([inv.request, inv.response_headers, inv.response_text])
    # The result is in the next generation's messages, and in the attempt's timeline.
    last_user = scripted_llm.requests[1]["messages"][-1]
    assert last_user["role"] == "user"
    assert last_user["content"].startswith('Result of toggle_lamp:\n{"lamp": "on"}')
    assert second_generation.parent_id is None
    (event,) = events(attempt, "tool_invoked")
    assert event.payload["result"] == {"lamp": "on"}
    assert event.invocation_id == inv.pk
    assert entity_state(world.pk, 1, "park_lamp").startswith("on;")

    # The server keeps each world's lamp: the next toggle turns it off.
    scripted_llm.script(TOGGLE, lamp_patch(2, "off"))
    second = run_turn("lamp")
    assert_committed(second)
    (inv2,) = invocations(second, kind="model_elected_tool")
    assert inv2.response_json == {"lamp": "off"}
    assert inv2.request_key == inv.request_key  # same tool, same arguments
    # Another world has a lamp of its own.
    create_world("park_mcp", "other-lamp")
    scripted_llm.script(TOGGLE, lamp_patch(1, "on"))
    (inv3,) = invocations(run_turn("other-lamp"), kind="model_elected_tool")
    assert inv3.response_json == {"lamp": "on"}
    scripted_llm.assert_exhausted()


# --- failures -------------------------------------------------------------------------------


def test_an_mcp_tool_error_fails_the_attempt_like_an_http_tool_error(
    scripted_llm: ScriptedLLM, toy_sources: str, toy_mcp_server: RunningMcp
) -> None:
    http_body = fixture_body("park_mcp")
    (candy,) = [
        t
        for t in workflow_of(http_body, "walker")["nodes"][0]["available_tools"]
        if t["name"] == "buy_candy"
    ]
    candy["source_ref"]["inline"]["interface"]["path"] = "/no_such_toy"  # the toy answers 404
    create_world(http_body, "http-error")
    mcp_body = fixture_body("park_mcp")
    lamp_interface(mcp_body)["tool"] = "fail_broken_switch"  # the tool answers isError: true
    create_world(mcp_body, "mcp-error")
    scripted_llm.script(BUY_CANDY, TOGGLE)
    http_attempt = run_turn("http-error")
    mcp_attempt = run_turn("mcp-error")

    (http_inv,) = invocations(http_attempt, kind="model_elected_tool")
    (mcp_inv,) = invocations(mcp_attempt, kind="model_elected_tool")
    assert (http_inv.failure_class, mcp_inv.failure_class) == ("http_status", "tool_error")
    assert BROKEN_SWITCH_MESSAGE in mcp_inv.failure_message
    assert json.loads(mcp_inv.response_text)["isError"] is True
    assert mcp_inv.response_json is None
    for attempt, inv in ((http_attempt, http_inv), (mcp_attempt, mcp_inv)):
        assert attempt.status == AttemptStatus.FAILED
        assert (attempt.failure_step, attempt.failure_subject) == ("source", "bob")
        assert attempt.failure_reason == f"node 'act': {inv.failure_class}: {inv.failure_message}"
        assert inv.status == "failed"
        assert inv.ended_at is not None
        # a source failure is not model content: the model was asked once, never again
        assert len(invocations(attempt, kind="llm_generation")) == 1
        assert failed_attempt_event(attempt).invocation_id == inv.pk
        assert_world_unchanged(attempt.world.slug)
    assert event_kinds(mcp_attempt) == event_kinds(http_attempt)
    assert BROKEN_SWITCH_MESSAGE in mcp_attempt.failure_reason
    scripted_llm.assert_exhausted()


def test_an_unreachable_mcp_server_is_a_transport_failure(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    toy_mcp_server: RunningMcp,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHUKWA_MCP_LAMP_URL", "http://127.0.0.1:9/mcp")  # nothing listens
    create_world("park_mcp", "no-lamp-server")
    scripted_llm.script(TOGGLE, lamp_patch(1, "on"))
    attempt = run_turn("no-lamp-server")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert (inv.status, inv.failure_class, inv.http_status) == ("failed", "transport", None)
    assert "ConnectError" in inv.failure_message
    assert inv.request["url"] == "http://127.0.0.1:9/mcp"
    assert "transport" in attempt.failure_reason
    assert len(invocations(attempt, kind="llm_generation")) == 1  # no retry
    assert_world_unchanged("no-lamp-server")


def test_a_tool_slower_than_timeout_ms_is_a_transport_failure(
    scripted_llm: ScriptedLLM, toy_sources: str, toy_mcp_server: RunningMcp
) -> None:
    body = fixture_body("park_mcp")
    tool = lamp_tool(body)
    tool["source_ref"]["inline"]["interface"].update(tool="fail_slow", timeout_ms=300)
    tool["arguments_schema_ref"]["inline"] = {
        "type": "object",
        "properties": {"seconds": {"type": "number"}},
        "required": ["seconds"],
        "additionalProperties": False,
    }
    create_world(body, "slow-lamp")
    scripted_llm.script(
        {
            "kind": "tool_call",
            "tool_call": {"name": "toggle_lamp", "arguments": {"seconds": 3}},
            "patch": None,
        }
    )
    attempt = run_turn("slow-lamp")
    assert attempt.status == AttemptStatus.FAILED
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert (inv.failure_class, inv.failure_message) == ("transport", "timed out after 300 ms")
    assert inv.request["arguments"] == {"seconds": 3}


@pytest.mark.parametrize(
    ("change", "failure_class", "message_part"),
    [
        pytest.param({"tool": "fail_not_json"}, "non_json", NOT_JSON_TEXT, id="text_not_json"),
        pytest.param({"tool": "no_such_tool"}, "tool_error", "Unknown tool", id="unknown_tool"),
        pytest.param({"env": "wrong-key"}, "http_status", "HTTP 401", id="wrong_key"),
        pytest.param({"env": None}, "config", "CHUKWA_MCP_LAMP_API_KEY", id="key_variable_missing"),
        pytest.param(
            {"url": "not a url"}, "config", "CHUKWA_MCP_LAMP_URL", id="url_variable_not_a_url"
        ),
    ],
)
def test_failures_name_their_class_and_cause(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    toy_mcp_server: RunningMcp,
    monkeypatch: pytest.MonkeyPatch,
    change: dict[str, Any],
    failure_class: str,
    message_part: str,
) -> None:
    body = fixture_body("park_mcp")
    if "tool" in change:
        lamp_interface(body)["tool"] = change["tool"]
    if "env" in change:
        if change["env"] is None:
            monkeypatch.delenv("CHUKWA_MCP_LAMP_API_KEY")
        else:
            monkeypatch.setenv("CHUKWA_MCP_LAMP_API_KEY", change["env"])
    if "url" in change:
        monkeypatch.setenv("CHUKWA_MCP_LAMP_URL", change["url"])
    create_world(body, "lamp-failure")
    scripted_llm.script(TOGGLE)
    attempt = run_turn("lamp-failure")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "source"
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert inv.status == "failed"
    assert inv.failure_class == failure_class
    assert message_part in inv.failure_message
    if failure_class == "config":  # refused before any byte was sent, naming the variable only
        assert inv.duration_ms == 0
        assert "not a url" not in inv.failure_message
        assert "url" not in inv.request


def test_a_json_text_content_is_the_result_when_there_is_no_structured_content(
    scripted_llm: ScriptedLLM, toy_sources: str, toy_mcp_server: RunningMcp
) -> None:
    body = fixture_body("park_mcp")
    lamp_interface(body)["tool"] = "lamp_status_text"
    create_world(body, "lamp-text")
    scripted_llm.script(TOGGLE, lamp_patch(1, "off"))
    attempt = run_turn("lamp-text")
    assert_committed(attempt)
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert inv.response_json == {"lamp": "off"}
    assert "structuredContent" not in json.loads(inv.response_text)
    assert inv.validation_status == "valid"


def test_a_result_failing_its_schema_fails_the_attempt(
    scripted_llm: ScriptedLLM, toy_sources: str, toy_mcp_server: RunningMcp
) -> None:
    body = fixture_body("park_mcp")
    lamp_tool(body)["result_schema_ref"]["inline"]["properties"]["lamp"]["enum"] = ["dim"]
    create_world(body, "lamp-schema")
    scripted_llm.script(TOGGLE)
    attempt = run_turn("lamp-schema")
    assert attempt.status == AttemptStatus.FAILED
    (inv,) = invocations(attempt, kind="model_elected_tool")
    assert inv.failure_class == "schema_invalid"
    assert inv.validation_status == "invalid"
    assert inv.response_json == {"lamp": "on"}
    assert inv.validation_errors[0]["pointer"] == "/lamp"


# --- replay ---------------------------------------------------------------------------------


def test_a_strict_replay_serves_the_mcp_call_from_the_record(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    toy_mcp_server: RunningMcp,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario_hash = scenario_assemble(data=fixture_body("park_mcp"))["scenario_hash"]
    start = "2031-05-01T09:00:00+00:00"
    world_create(
        data={"slug": "lamp-recorded", "scenario_ref": {"hash": scenario_hash}, "start_time": start}
    )
    scripted_llm.script(TOGGLE, lamp_patch(1, "on"))
    assert_committed(run_turn("lamp-recorded"))
    (original,) = invocations(
        TurnAttempt.objects.get(world__slug="lamp-recorded"), kind="model_elected_tool"
    )
    monkeypatch.setenv("CHUKWA_MCP_LAMP_URL", "http://127.0.0.1:9/mcp")  # a live call would fail
    world_create(
        data={
            "slug": "lamp-replayed",
            "scenario_ref": {"hash": scenario_hash},
            "start_time": start,
            "replay_from": {"world": "lamp-recorded", "mode": "replay_strict"},
        }
    )
    sent = len(scripted_llm.requests)
    attempt = run_turn("lamp-replayed")
    assert_committed(attempt)
    assert len(scripted_llm.requests) == sent
    (copy,) = invocations(attempt, kind="model_elected_tool")
    assert copy.replayed_from == original.pk
    assert (copy.request_key, copy.response_json, copy.status) == (
        original.request_key,
        {"lamp": "on"},
        "succeeded",
    )
    assert copy.request["url"] == toy_mcp_server.url  # where the recorded call went


# --- a rule plan's tool step, through a real Celery worker ----------------------------------


def _lamplighter_scenario() -> dict[str, Any]:
    tool = lamp_tool(fixture_body("park_mcp"))
    rules = [
        {
            "id": "light",
            "when": [],
            "tool_call": {"tool": "toggle_lamp", "arguments": {}},
            "intent": "flip the lamp switch",
            "plan": [
                {
                    "op": "set_entity_state",
                    "entity_id": "lamp",
                    "state": "{{tool.result.lamp}}, switched by the lamplighter",
                }
            ],
            "memory": "Turn {{world.attempted_turn}}: the lamp went {{tool.result.lamp}}.",
            "narration": "{{subject.name}} flips the switch: the lamp is {{tool.result.lamp}}.",
        }
    ]
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {"id": "decide", "type": "rule_policy", "available_tools": [tool], "rules": rules}
        ],
        "apply": {"from": "decide.final"},
    }
    agent = {"goal": "keep the park lit", "memory": "", "cognition_profile": "lamplighter"}
    return {
        "scenario_slug": "lamplighter",
        "description": "A rule-policy lamplighter and a lamp behind an MCP server.",
        "chronon_seconds": 60,
        "cognition_profiles": {"lamplighter": {"inline": {"workflow": {"inline": workflow}}}},
        "environments": {"park": {"inline": "A park at dusk."}},
        "entities": [
            {
                "inline": {
                    "id": "lighter",
                    "name": "Lamplighter",
                    "state": "standing by the lamp",
                    "environment": "park",
                    "kind": {"agent": agent},
                }
            },
            {
                "inline": {
                    "id": "lamp",
                    "name": "Lamp",
                    "state": "off",
                    "environment": "park",
                    "kind": "prop",
                }
            },
        ],
    }


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_rule_plan_calls_the_mcp_tool_in_a_real_worker(toy_mcp_server: RunningMcp) -> None:
    import os
    import time

    from django.db import connection

    from tests.support.worker import routed_to, worker_process
    from worlds_app.services import turn_attempt_enqueue

    scenario_hash = scenario_assemble(data=_lamplighter_scenario())["scenario_hash"]
    world_create(data={"slug": "lamplighter", "scenario_ref": {"hash": scenario_hash}})
    queue = f"test-mcp-{os.getpid()}"
    env = {"CHUKWA_DB_NAME": connection.settings_dict["NAME"]}  # the lamp variables are inherited
    with (
        worker_process(f"mcp-{os.getpid()}", env=env, queue=queue, pool="prefork"),
        routed_to(queue),
    ):
        attempt_ids = turn_attempt_enqueue(slug="lamplighter", count=2)["attempt_ids"]
        deadline = time.monotonic() + 60
        while TurnAttempt.objects.filter(
            pk__in=attempt_ids, status__in=("queued", "running")
        ).exists():
            assert time.monotonic() < deadline, "the worker did not finish the attempts"
            time.sleep(0.1)
    first, second = (TurnAttempt.objects.get(pk=pk) for pk in attempt_ids)
    for attempt in (first, second):
        assert_committed(attempt)
    results = [invocations(a, kind="model_elected_tool")[0] for a in (first, second)]
    assert [inv.response_json for inv in results] == [{"lamp": "on"}, {"lamp": "off"}]
    assert all(inv.tool_name == "toggle_lamp" and inv.duration_ms is not None for inv in results)
    (event,) = events(first, "tool_invoked")
    assert event.payload["by"] == "rule_policy"
    assert event.invocation_id == results[0].pk
    world_id = first.world_id
    assert entity_state(world_id, 1, "lamp") == "on, switched by the lamplighter"
    assert entity_state(world_id, 2, "lamp") == "off, switched by the lamplighter"
