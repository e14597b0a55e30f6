"""The `concurrent` execution mode in-process: rule policies, budgets counting
calls in flight, and the concurrent park fixture with its tools. Transactional: the subjects'
threads open their own database connections, which see only committed rows."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from chukwa_core.rule_policy import RuleContext, evaluate_rule_policy
from chukwa_core.world_state import WorldState
from cognition_app.budgets import prompt_estimate
from cognition_app.models import LlmCall, SourceInvocation
from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, fixture_body, run_turn
from tests.worlds_app.test_concurrent import _final, _set, _world, subject_of
from worlds_app.models import AttemptEvent, AttemptStatus, Turn, TurnAttempt, World
from worlds_app.services import events as event_log
from worlds_app.services import world_budget_set, world_create

pytestmark = pytest.mark.django_db(transaction=True)


# --- rule policies ------------------------------------------------------------------------------


def _rule(rule_id: str, when: list[dict[str, Any]], plan: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": rule_id,
        "when": when,
        "intent": f"do {rule_id}",
        "plan": plan,
        "memory": "Turn {{world.attempted_turn}}: " + rule_id + ".",
        "narration": "{{subject.name}} does " + rule_id + ".",
    }


IDLE = _rule(
    "idle", [], [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "idle"}]
)
ALPHA_RULES = [
    _rule(
        "switch_on",
        [{"kind": "entity_state_contains", "entity_id": "lamp", "text": "off"}],
        [{"op": "set_entity_state", "entity_id": "lamp", "state": "on, switched on by Alpha"}],
    ),
    IDLE,
]
BETA_RULES = [
    _rule(
        "break_lamp",
        [{"kind": "entity_state_contains", "entity_id": "lamp", "text": "on"}],
        [{"op": "set_entity_state", "entity_id": "lamp", "state": "broken by Beta"}],
    ),
    IDLE,
]


def _rule_node(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "decide", "type": "rule_policy", "rules": rules}


def _rules_world(slug: str, execution: str) -> World:
    def profile(rules: list[dict[str, Any]]) -> dict[str, Any]:
        workflow = {
            "version": 1,
            "execution": execution,
            "ambient_sources": [],
            "nodes": [_rule_node(rules)],
            "apply": {"from": "decide.final"},
        }
        return {"inline": {"workflow": {"inline": workflow}}}

    def agent(agent_id: str) -> dict[str, Any]:
        return {
            "inline": {
                "id": agent_id,
                "name": agent_id.title(),
                "state": "by the door",
                "environment": "room",
                "kind": {"agent": {"goal": "g", "memory": "", "cognition_profile": agent_id}},
            }
        }

    body = {
        "scenario_slug": "lamp_room",
        "description": "Two agents and a lamp.",
        "chronon_seconds": 10,
        "cognition_profiles": {"alpha": profile(ALPHA_RULES), "beta": profile(BETA_RULES)},
        "environments": {"room": {"inline": "A small room."}},
        "entities": [
            agent("alpha"),
            agent("beta"),
            {
                "inline": {
                    "id": "lamp",
                    "name": "Lamp",
                    "state": "off",
                    "environment": "room",
                    "kind": "prop",
                }
            },
        ],
    }
    scenario = scenario_assemble(data=body)["scenario_hash"]
    return world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})


def _patches(attempt: TurnAttempt) -> dict[str, dict[str, Any]]:
    return {
        subject: payload["patch"]
        for subject, payload in AttemptEvent.objects.filter(
            attempt=attempt, kind="world_patch_applied"
        ).values_list("subject_id", "payload")
    }


def _expected(world: World, subject: str, rules: list[dict[str, Any]], seen: WorldState) -> Any:
    turn = Turn.objects.get(world=world, number=1)
    ctx = RuleContext(
        world_slug=world.slug,
        turn=0,
        attempted_turn=1,
        simulation_time=turn.simulation_time.isoformat(),
        ambient={},
    )
    return evaluate_rule_policy(_rule_node(rules), seen, subject, ctx).patch


def test_rule_policies_give_the_same_patch_in_either_mode_for_the_same_world() -> None:
    concurrent = _rules_world("rules-concurrent", "concurrent")
    ordered = _rules_world("rules-ordered", "per_subject_ordered")
    together = run_turn("rules-concurrent")
    one_by_one = run_turn("rules-ordered")
    assert together.status == one_by_one.status == AttemptStatus.COMMITTED

    start = WorldState.from_snapshot(Turn.objects.get(world=concurrent, number=0).state)
    mid = copy.deepcopy(start)
    mid.entities["lamp"]["state"] = "on, switched on by Alpha"  # ordered: after alpha's patch
    in_concurrent, in_order = _patches(together), _patches(one_by_one)
    # Alpha sees the turn-start world in both modes: the same patch.
    assert in_concurrent["alpha"] == in_order["alpha"]
    assert in_concurrent["alpha"] == _expected(concurrent, "alpha", ALPHA_RULES, start)
    # Beta's patch is the policy's answer to the world it saw: the turn-start world when
    # concurrent (the lamp is still off: it idles), alpha's result when ordered (it breaks it).
    assert in_concurrent["beta"] == _expected(concurrent, "beta", BETA_RULES, start)
    assert in_order["beta"] == _expected(ordered, "beta", BETA_RULES, mid)
    assert in_concurrent["beta"]["effects"][0]["state"] == "idle"
    assert in_order["beta"]["effects"][0]["state"] == "broken by Beta"


@pytest.mark.parametrize("execution", ["concurrent", "per_subject_ordered"])
def test_applying_the_patches_writes_no_events_of_its_own(
    execution: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no batching window (every other event written as it happens), the events of
    applying the subjects' patches still never cause a write: the commit that follows writes
    them in its own round trip (or, ordered, the next subject's). Every patch is still there."""
    monkeypatch.setattr(event_log, "EVENT_FLUSH_SECONDS", 0.0)
    written_after: list[str] = []  # the kind of the event whose append caused each write
    write = event_log.EventLog._write_locked

    def recording(log: event_log.EventLog) -> None:
        if log._pending:
            written_after.append(log._pending[-1].kind)
        write(log)

    monkeypatch.setattr(event_log.EventLog, "_write_locked", recording)
    _rules_world("rules-held", execution)
    attempt = run_turn("rules-held")
    assert attempt.status == AttemptStatus.COMMITTED
    assert written_after  # the subjects' own events were written as they happened
    assert "world_patch_applied" not in written_after
    assert set(_patches(attempt)) == {"alpha", "beta"}


# --- budgets count the calls in flight ----------------------------------------------------------


def test_a_budget_counts_calls_in_flight(scripted_llm: ScriptedLLM) -> None:
    replies = {
        "alpha": _final("Alpha waits.", _set("alpha", "waiting")),
        "beta": _final("Beta waits.", _set("beta", "waiting")),
    }
    # What one call could spend: measured on a world without a budget.
    _world("unbudgeted", ["alpha", "beta"])
    scripted_llm.route(lambda request: replies[subject_of(request)])
    assert run_turn("unbudgeted").status == AttemptStatus.COMMITTED
    could = max(
        prompt_estimate(r["messages"], r.get("response_format")) + 400
        for r in scripted_llm.requests
    )
    scripted_llm.reset()

    # Room for one call, not two; the first call is slow, so it is in flight when the other
    # asks (its spend is not in the database yet: only the reservation counts it).
    _world("budgeted", ["alpha", "beta"])
    world_budget_set(
        slug="budgeted", budget={"max_tokens_per_turn": could + could // 2}, set_by="test"
    )
    slow = {s: Reply(text=json.dumps(r), delay_s=1.0) for s, r in replies.items()}
    scripted_llm.route(lambda request: slow[subject_of(request)])
    attempt = run_turn("budgeted")

    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "budget_exhausted"
    assert "calls in flight could spend" in attempt.failure_reason
    assert len(scripted_llm.requests) == 1  # one call sent, never two
    refused = SourceInvocation.objects.get(attempt=attempt, failure_class="budget_exhausted")
    assert LlmCall.objects.get(invocation=refused).usage_source == "not_sent"
    assert not SourceInvocation.objects.filter(attempt=attempt, status="running").exists()


# --- the concurrent park -------------------------------------------------------------------------


def test_the_concurrent_park_runs_its_tools_and_rules(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    body = fixture_body("park_concurrent")
    assert {
        p["inline"]["workflow"]["inline"]["execution"] for p in body["cognition_profiles"].values()
    } == {"concurrent"}
    world = create_world("park_concurrent", "park-together")
    scripted_llm.script(
        {
            "kind": "tool_call",
            "tool_call": {"name": "buy_candy", "arguments": {"item": "candy_bar"}},
            "patch": None,
        },
        _final("Bob buys a candy bar.", _set("bob", "eating a candy bar")),
    )
    attempt = run_turn("park-together")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    tools = SourceInvocation.objects.filter(attempt=attempt, kind="model_elected_tool")
    assert [(t.tool_name, t.subject_id, t.status) for t in tools] == [
        ("buy_candy", "bob", "succeeded")
    ]
    applied = list(
        AttemptEvent.objects.filter(attempt=attempt, kind="world_patch_applied")
        .order_by("seq")
        .values_list("subject_id", "patch_seq")
    )
    assert applied == [("ant", 1), ("bob", 2)]  # id order, whoever finished first
    state = {e["id"]: e["state"] for e in Turn.objects.get(world=world, number=1).state["entities"]}
    assert state["bob"] == "eating a candy bar"
