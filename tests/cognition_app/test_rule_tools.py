"""A rule policy's planned tool call: made through the source layer, traced like a
model-elected call, its result available to the rule's effect templates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chukwa_core.errors import ChukwaError
from cognition_app.models import SourceInvocation
from devservices import toys
from scenarios_app.services import scenario_assemble
from worlds_app import selectors
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

pytestmark = pytest.mark.django_db

SCHEMAS = json.loads(
    (
        Path(__file__).resolve().parents[2]
        / "scenarios_app/scenario_fixtures/schemas/park_schemas.json"
    ).read_text()
)


@pytest.fixture
def toy_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = toys.serve("127.0.0.1", 0, tmp_path)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    for key, value in toys.toy_env(base).items():
        monkeypatch.setenv(key, value)
    yield base
    server.shutdown()
    server.server_close()


def _vending_tool() -> dict[str, Any]:
    return {
        "name": "buy_candy",
        "description": "Buy a candy bar.",
        "source_ref": {
            "inline": {
                "version": 1,
                "label": "toy_vending_machine",
                "interface": {
                    "name": "http_json",
                    "method": "POST",
                    "url_env": "CHUKWA_TOY_VENDING_URL",
                    "path": "/buy_candy",
                    "timeout_ms": 5000,
                },
            }
        },
        "arguments_schema_ref": {"inline": SCHEMAS["buy_candy_arguments"]},
        "result_schema_ref": {"inline": SCHEMAS["buy_candy_result"]},
    }


def _scenario(
    arguments: dict[str, Any], state: str = "tried the machine: {{tool.result.result}}"
) -> dict[str, Any]:
    rules = [
        {
            "id": "buy",
            "when": [{"kind": "subject_state_contains", "text": "hungry"}],
            "tool_call": {"tool": "buy_candy", "arguments": arguments},
            "intent": "buy a candy bar",
            "plan": [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": state}],
            "memory": "Turn {{world.attempted_turn}}: the machine said {{tool.result.result}}.",
            "narration": "{{subject.name}} presses the button: {{tool.result.result}}.",
        },
        {
            "id": "wait",
            "when": [],
            "intent": "wait",
            "plan": [],
            "memory": "I waited.",
            "narration": "{{subject.name}} waits.",
        },
    ]
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "decide",
                "type": "rule_policy",
                "available_tools": [_vending_tool()],
                "rules": rules,
            }
        ],
        "apply": {"from": "decide.final"},
    }
    agent = {"goal": "eat", "memory": "", "cognition_profile": "buyer"}
    return {
        "scenario_slug": "rule_buyers",
        "description": "Two rule-policy agents and one candy bar.",
        "chronon_seconds": 60,
        "cognition_profiles": {"buyer": {"inline": {"workflow": {"inline": workflow}}}},
        "environments": {"park": {"inline": "A park with a vending machine."}},
        "entities": [
            {
                "inline": {
                    "id": "ann",
                    "name": "Ann",
                    "state": "hungry",
                    "environment": "park",
                    "kind": {"agent": agent},
                }
            },
            {
                "inline": {
                    "id": "ben",
                    "name": "Ben",
                    "state": "hungry",
                    "environment": "park",
                    "kind": {"agent": agent},
                }
            },
        ],
    }


def test_rule_tool_call_is_traced_and_its_result_reaches_the_patch(toy_server: str) -> None:
    scenario = scenario_assemble(data=_scenario({"item": "candy_bar"}))["scenario_hash"]
    world_create(data={"slug": "rule-tools", "scenario_ref": {"hash": scenario}})
    attempt_id = turn_attempt_enqueue(slug="rule-tools")["attempt_ids"][0]
    assert turn_attempt_run(attempt_id=attempt_id, owner="test") == "committed"

    states = {
        e["id"]: e["state"]
        for e in selectors.turn_get(slug="rule-tools", number=1)["state"]["entities"]
    }
    # one candy bar: the first subject (ann, id order) gets it, the second finds the machine empty
    assert states == {"ann": "tried the machine: dispensed", "ben": "tried the machine: empty"}
    calls = list(
        SourceInvocation.objects.filter(attempt_id=attempt_id, kind="model_elected_tool").order_by(
            "seq"
        )
    )
    assert [(c.subject_id, c.tool_name, c.status, c.response_json["result"]) for c in calls] == [
        ("ann", "buy_candy", "succeeded", "dispensed"),
        ("ben", "buy_candy", "succeeded", "empty"),
    ]
    assert calls[0].request["body"] == {"item": "candy_bar"}
    events = selectors.attempt_get(attempt_id=attempt_id)["events"]
    monologues = [e for e in events if e["kind"] == "inner_monologue"]
    assert monologues[0]["payload"]["tool_call"]["result"]["result"] == "dispensed"
    tool_events = [e for e in events if e["kind"] == "tool_invoked"]
    assert [str(e["invocation_id"]) for e in tool_events] == [str(c.pk) for c in calls]


def test_rule_tool_arguments_must_match_the_tool_schema(toy_server: str) -> None:
    scenario = scenario_assemble(data=_scenario({"item": "{{subject.name}}"}))["scenario_hash"]
    world_create(data={"slug": "rule-tools-bad", "scenario_ref": {"hash": scenario}})
    attempt_id = turn_attempt_enqueue(slug="rule-tools-bad")["attempt_ids"][0]
    assert turn_attempt_run(attempt_id=attempt_id, owner="test") == "failed"
    failure = selectors.attempt_get(attempt_id=attempt_id)["failure"]
    assert failure["step"] == "rule_policy"
    assert "do not match its schema" in failure["reason"]
    assert not SourceInvocation.objects.filter(attempt_id=attempt_id).exists()


def test_tool_result_templates_only_in_rules_that_call_a_tool() -> None:
    data = _scenario({"item": "candy_bar"})
    rules = data["cognition_profiles"]["buyer"]["inline"]["workflow"]["inline"]["nodes"][0]["rules"]
    rules[1]["narration"] = "{{tool.result.result}}"
    with pytest.raises(ChukwaError) as info:
        scenario_assemble(data=data)
    assert info.value.code == "invalid_template"
    assert "only in a rule with a tool_call" in info.value.message


def test_rule_tool_call_must_name_an_available_tool() -> None:
    data = _scenario({"item": "candy_bar"})
    node = data["cognition_profiles"]["buyer"]["inline"]["workflow"]["inline"]["nodes"][0]
    node["rules"][0]["tool_call"]["tool"] = "teleport"
    with pytest.raises(ChukwaError) as info:
        scenario_assemble(data=data)
    assert info.value.code == "invalid_tool_call"
    assert "buy_candy" in info.value.message
