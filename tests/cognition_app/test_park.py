"""The park scenario end to end, in-process (seed 002 phase I).

Every turn runs through ``turn_attempt_run`` against the real toy HTTP sources and a scripted
OpenAI-compatible server over real HTTP. Agents run in id order: the ant (rule policy, no LLM)
before Bob (LLM tool loop), and in the two-agent variant Alice before both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.forms.models import model_to_dict

from cognition_app.models import LlmCall, LlmChunk, SourceInvocation, SourceProbe
from devservices.toys import PA_ANNOUNCEMENT, PHONE_SPAM_MESSAGE, STOCK_FILE
from tests.support.fixtures import TEST_API_KEY
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import (
    create_world,
    entity_of,
    fixture_body,
    run_turn,
    workflow_of,
)
from worlds_app.models import AttemptEvent, AttemptStatus, PatchTransition, Turn, TurnAttempt

pytestmark = pytest.mark.django_db

BUY_CANDY: dict[str, Any] = {
    "kind": "tool_call",
    "tool_call": {"name": "buy_candy", "arguments": {"item": "candy_bar"}},
    "patch": None,
}
TOOL_NAMES = ("buy_candy", "use_drinking_fountain", "send_text")
PARK_LLM_PARAMS: dict[str, Any] = workflow_of(fixture_body("park"), "walker")["nodes"][0][
    "llm_source_ref"
]["inline"]["interface"]["params"]
ACTING_SUBJECT = re.compile(r"Acting subject:\n- (\w+) \(")


def final(narration: str, *effects: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {"narration": narration, "effects": list(effects)},
    }


def set_state(entity_id: str, state: str) -> dict[str, Any]:
    return {"op": "set_entity_state", "entity_id": entity_id, "state": state}


def remember(entity_id: str, content: str) -> dict[str, Any]:
    return {"op": "append_entity_memory", "entity_id": entity_id, "content": content}


def bob_waits(turn: int) -> dict[str, Any]:
    return final(
        f"Bob waits by the vending machine (turn {turn}).",
        set_state("bob", f"waiting by the vending machine, turn {turn}"),
        remember("bob", f"Turn {turn}: I waited."),
    )


def all_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"])


def ambient_in(request: dict[str, Any]) -> dict[str, Any]:
    """The ambient JSON rendered into the first user message of a request."""
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    block = user.split("Ambient context:\n", 1)[1].split("\n\nAvailable tools:", 1)[0]
    return json.loads(block)


def subject_of(request: dict[str, Any]) -> str:
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    match = ACTING_SUBJECT.search(user)
    assert match, user
    return match.group(1)


def invocations(attempt: TurnAttempt, **filters: Any) -> list[SourceInvocation]:
    return list(SourceInvocation.objects.filter(attempt=attempt, **filters).order_by("seq"))


def events(attempt: TurnAttempt, kind: str | None = None) -> list[AttemptEvent]:
    rows = AttemptEvent.objects.filter(attempt=attempt).order_by("seq")
    return list(rows.filter(kind=kind) if kind else rows)


def turn_state(world_id: int, number: int) -> dict[str, Any]:
    return Turn.objects.get(world_id=world_id, number=number).state


def entity_state(world_id: int, number: int, entity_id: str) -> str:
    entities = turn_state(world_id, number)["entities"]
    return next(e["state"] for e in entities if e["id"] == entity_id)


def assert_committed(attempt: TurnAttempt) -> None:
    assert attempt.status == AttemptStatus.COMMITTED, (
        attempt.failure_step,
        attempt.failure_reason,
    )


def assert_world_changed_only_by_patches(attempt: TurnAttempt) -> None:
    """Between turn N-1 and N, every difference is a transition, and the transitions are exactly
    the effects of the applied patches, in patch order: no ambient result or tool result changed
    anything by itself."""
    number = attempt.produced_turn
    assert number is not None
    before = turn_state(attempt.world_id, number - 1)
    after = turn_state(attempt.world_id, number)
    applied = events(attempt, "world_patch_applied")
    effects = [
        (e.patch_seq, i, eff)
        for e in applied
        for i, eff in enumerate(e.payload["patch"]["effects"])
    ]
    transitions = list(PatchTransition.objects.filter(attempt=attempt))
    assert [(t.patch_seq, t.effect_index) for t in transitions] == [(s, i) for s, i, _ in effects]
    for t, (_, _, effect) in zip(transitions, effects, strict=True):
        assert t.op == effect["op"]
        assert t.target_id == effect.get("entity_id", effect.get("environment_label"))
    touched = {t.target_id for t in transitions}
    for label, text in after["environments"].items():
        if text != before["environments"][label]:
            assert label in touched, f"environment {label} changed without a transition"
    old = {e["id"]: e for e in before["entities"]}
    for entity in after["entities"]:
        if entity != old[entity["id"]]:
            assert entity["id"] in touched, f"entity {entity['id']} changed without a transition"
    # Ambient and tool events never carry a patch, and no transition is attributed to them.
    for event in events(attempt):
        if event.kind in ("ambient_source_invoked", "tool_invoked"):
            assert event.patch_seq is None
    ambient_or_tool = {inv.pk for inv in invocations(attempt) if inv.kind != "llm_generation"}
    assert not {t.invocation_id for t in transitions} & ambient_or_tool


# --- 1. weather over three turns ------------------------------------------------------------


def test_weather_runs_once_per_turn_gets_colder_and_only_reaches_bob_as_context(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = create_world("park", "weather")
    temperatures = []
    for number in (1, 2, 3):
        scripted_llm.script(bob_waits(number))
        attempt = run_turn("weather")
        assert_committed(attempt)
        assert attempt.produced_turn == number
        weather = invocations(attempt, kind="ambient_context", source_label="toy_weather")
        assert len(weather) == 1
        (inv,) = weather
        assert inv.status == "succeeded"
        assert inv.ambient_source_id == "park_weather"
        assert inv.subject_id == ""  # once per turn, not per subject
        assert inv.validation_status == "valid"
        assert inv.request["body"]["turn"] == number
        assert inv.response_json["turn"] == number
        temperatures.append(inv.response_json["temperature_c"])
        # The attempt's timeline shows the same result, linked to the invocation.
        (event,) = [
            e
            for e in events(attempt, "ambient_source_invoked")
            if e.payload["ambient_source_id"] == "park_weather"
        ]
        assert event.invocation_id == inv.pk
        assert event.payload["result"] == inv.response_json
        # Bob's generation saw exactly this weather.
        (request,) = scripted_llm.requests[number - 1 : number]
        assert subject_of(request) == "bob"
        assert ambient_in(request)["environments"]["park"]["weather"] == inv.response_json
        assert_world_changed_only_by_patches(attempt)
    assert temperatures[0] > temperatures[1] > temperatures[2]
    assert len(scripted_llm.requests) == 3
    scripted_llm.assert_exhausted()
    # The park itself never changed: only Bob's patches changed anything.
    world.refresh_from_db()
    assert world.current_turn == 3
    park_texts = {turn_state(world.pk, n)["environments"]["park"] for n in range(4)}
    assert len(park_texts) == 1
    assert not PatchTransition.objects.filter(world=world, target_kind="environment").exists()


# --- 2. the PA: silent on turn 1, an announcement on turn 2 ---------------------------------


def test_pa_empty_then_announcement_injected_only_when_spoken(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    create_world("park", "pa")
    scripted_llm.script(bob_waits(1), bob_waits(2))
    first = run_turn("pa")
    second = run_turn("pa")
    for attempt in (first, second):
        assert_committed(attempt)
    (pa1,) = invocations(first, kind="ambient_context", ambient_source_id="park_pa")
    (pa2,) = invocations(second, kind="ambient_context", ambient_source_id="park_pa")
    # The empty result is a success and is traced like any other.
    assert pa1.status == "succeeded"
    assert pa1.response_json == {"announcements": []}
    assert pa1.validation_status == "valid"
    assert pa2.status == "succeeded"
    assert pa2.response_json == {"announcements": [PA_ANNOUNCEMENT]}
    turn1, turn2 = scripted_llm.requests
    assert PA_ANNOUNCEMENT not in all_text(turn1)
    assert ambient_in(turn1)["environments"]["park"]["public_announcements"] == {
        "announcements": []
    }
    assert PA_ANNOUNCEMENT in all_text(turn2)
    assert ambient_in(turn2)["environments"]["park"]["public_announcements"] == pa2.response_json
    for attempt in (first, second):
        assert_world_changed_only_by_patches(attempt)
    # The speaker is a prop the PA result never touches.
    assert entity_state(first.world_id, 2, "pa_speaker") == "mounted on a lamppost, silent"


# --- 3. Bob's phone: spam on turn 2 ---------------------------------------------------------


def test_phone_spam_on_turn_two_reaches_bobs_context_and_he_may_react(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    create_world("park", "phone")
    scripted_llm.script(
        bob_waits(1),
        final(
            "Bob glances at a spam text about a cruise and ignores it.",
            set_state("bob", "hungry, frowning at his phone"),
            remember("bob", "Turn 2: I ignored a spam text about a free cruise."),
        ),
    )
    first = run_turn("phone")
    second = run_turn("phone")
    for attempt in (first, second):
        assert_committed(attempt)
        (phone,) = invocations(attempt, ambient_source_id="bob_phone")
        assert phone.kind == "ambient_context"
        assert phone.subject_id == "bob"
        assert phone.source_label == "toy_phone_inbox"
        assert phone.status == "succeeded"
        assert phone.request["body"] == {"turn": attempt.attempted_turn, "subject": "bob"}
    (phone1,) = invocations(first, ambient_source_id="bob_phone")
    (phone2,) = invocations(second, ambient_source_id="bob_phone")
    assert phone1.response_json == {"messages": []}
    assert phone2.response_json == {"messages": [PHONE_SPAM_MESSAGE]}
    # The bob_phone call ran just before Bob's nodes, after the once-per-turn sources.
    kinds = [(i.kind, i.ambient_source_id) for i in invocations(second)]
    assert kinds == [
        ("ambient_context", "park_weather"),
        ("ambient_context", "park_pa"),
        ("ambient_context", "bob_phone"),
        ("llm_generation", ""),
    ]
    turn1, turn2 = scripted_llm.requests
    assert PHONE_SPAM_MESSAGE["text"] not in all_text(turn1)
    assert ambient_in(turn2)["entities"]["bob"]["phone_inbox"] == phone2.response_json
    assert PHONE_SPAM_MESSAGE["text"] in all_text(turn2)
    # Bob's reaction arrives through his patch; the phone itself is untouched.
    assert (
        "spam text"
        in next(e for e in turn_state(second.world_id, 2)["entities"] if e["id"] == "bob")["kind"][
            "agent"
        ]["memory"]
    )
    assert entity_state(second.world_id, 2, "bobs_phone") == "in Bob's pocket"
    for attempt in (first, second):
        assert_world_changed_only_by_patches(attempt)


# --- 4. tools offered but not called --------------------------------------------------------


def test_offered_tools_are_not_called_when_the_model_returns_a_final_patch(
    scripted_llm: ScriptedLLM, toy_sources: str, tmp_path: Path
) -> None:
    world = create_world("park", "no-tools")
    scripted_llm.script(
        final(
            "Bob decides he is not that hungry after all and sits on a bench.",
            set_state("bob", "sitting on a bench, still a little hungry"),
        )
    )
    attempt = run_turn("no-tools")
    assert_committed(attempt)
    # The tools were on offer, in the prompt and in the response_format schema.
    (request,) = scripted_llm.requests
    schema_text = json.dumps(request["response_format"])
    for name in TOOL_NAMES:
        assert name in all_text(request)
        assert name in schema_text
    assert invocations(attempt, kind="model_elected_tool") == []
    assert events(attempt, "tool_invoked") == []
    for label in ("toy_vending_machine", "toy_drinking_fountain", "toy_send_text"):
        assert not SourceInvocation.objects.filter(source_label=label).exists()
    assert not (tmp_path / "toys" / STOCK_FILE).exists()  # the machine was never asked
    assert len(invocations(attempt, kind="llm_generation")) == 1
    assert entity_state(world.pk, 1, "bob") == "sitting on a bench, still a little hungry"
    assert entity_state(world.pk, 1, "vending_machine") == entity_state(
        world.pk, 0, "vending_machine"
    )
    assert_world_changed_only_by_patches(attempt)


# --- 5. one buy_candy call ------------------------------------------------------------------


def test_one_buy_candy_call_is_traced_fed_back_and_changes_nothing_by_itself(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = create_world("park", "candy")
    scripted_llm.script(
        BUY_CANDY,
        final(
            "Bob buys the last candy bar and unwraps it.",
            set_state("bob", "holding a candy bar, about to eat it"),
            remember("bob", "Turn 1: I bought the last candy bar."),
        ),
    )
    attempt = run_turn("candy")
    assert_committed(attempt)
    generations = invocations(attempt, kind="llm_generation")
    assert [g.model_output_kind for g in generations] == ["tool_call", "final_patch"]
    (tool,) = invocations(attempt, kind="model_elected_tool")
    assert tool.tool_name == "buy_candy"
    assert tool.source_label == "toy_vending_machine"
    assert tool.parent_id == generations[0].pk
    assert tool.subject_id == "bob"
    assert tool.node_id == "act"
    assert tool.status == "succeeded"
    assert tool.http_status == 200
    assert tool.request["body"] == {"item": "candy_bar"}
    assert tool.response_json["result"] == "dispensed"
    assert json.loads(tool.response_text) == tool.response_json
    assert tool.validation_status == "valid"
    assert generations[0].seq < tool.seq < generations[1].seq
    (event,) = events(attempt, "tool_invoked")
    assert event.invocation_id == tool.pk
    assert event.llm_call_id == LlmCall.objects.get(invocation=generations[0]).pk
    assert event.payload["result"] == tool.response_json
    # The next generation saw the call it made and the machine's answer.
    first, second = scripted_llm.requests
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assistant, result = second["messages"][len(first["messages"]) :]
    assert assistant == {"role": "assistant", "content": json.dumps(BUY_CANDY)}
    assert result["role"] == "user"
    assert "buy_candy" in result["content"]
    assert json.dumps(tool.response_json, sort_keys=True) in result["content"]
    # The world changed only as the final patch says: Bob holds candy; the machine's state is
    # untouched because the patch did not mention it.
    assert entity_state(world.pk, 1, "bob") == "holding a candy bar, about to eat it"
    assert entity_state(world.pk, 1, "vending_machine") == entity_state(
        world.pk, 0, "vending_machine"
    )
    assert not PatchTransition.objects.filter(target_id="vending_machine").exists()
    assert_world_changed_only_by_patches(attempt)


# --- 6. two agents, one candy bar -----------------------------------------------------------


def _park_with_alice() -> dict[str, Any]:
    body = fixture_body("park")
    body["scenario_slug"] = "park_two_walkers"
    alice = {
        "inline": {
            "id": "alice",
            "name": "Alice",
            "state": "hungry, walking towards the vending machine",
            "environment": "park",
            "kind": {"agent": {"goal": "get a snack", "memory": "", "cognition_profile": "walker"}},
        }
    }
    body["entities"].insert(1, alice)
    return body


def _walker_reply(body: dict[str, Any]) -> dict[str, Any]:
    """Both walkers try to buy candy, then report what the machine actually did."""
    subject = subject_of(body)
    last = body["messages"][-1]
    if not last["content"].startswith("Result of buy_candy"):
        return BUY_CANDY
    outcome = json.loads(last["content"].split("\n", 2)[1])["result"]
    if outcome == "dispensed":
        return final(
            f"{subject} buys the last candy bar.",
            set_state(subject, "holding the last candy bar"),
            remember(subject, "I bought the last candy bar."),
        )
    return final(
        f"{subject} presses the button but the machine is empty.",
        set_state(subject, "empty-handed and still hungry; the machine was empty"),
        remember(subject, "The vending machine was empty."),
    )


def test_two_walkers_one_candy_bar_first_dispensed_second_empty(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = create_world(_park_with_alice(), "two-walkers")
    scripted_llm.script(*[_walker_reply] * 4)
    attempt = run_turn("two-walkers")
    assert_committed(attempt)
    scripted_llm.assert_exhausted()
    assert [subject_of(r) for r in scripted_llm.requests] == ["alice", "alice", "bob", "bob"]
    tools = invocations(attempt, kind="model_elected_tool")
    assert [(t.subject_id, t.tool_name) for t in tools] == [
        ("alice", "buy_candy"),
        ("bob", "buy_candy"),
    ]
    assert [t.response_json["result"] for t in tools] == ["dispensed", "empty"]
    for tool in tools:  # durable: finished rows with their request and response
        assert tool.status == "succeeded"
        assert tool.http_status == 200
        assert tool.parent.kind == "llm_generation"
        assert tool.parent.subject_id == tool.subject_id
        assert tool.response_text
    # One committed turn holds both patches (and the ant's), in id order.
    applied = events(attempt, "world_patch_applied")
    assert [(e.subject_id, e.patch_seq) for e in applied] == [
        ("alice", 1),
        ("ant", 2),
        ("bob", 3),
    ]
    world.refresh_from_db()
    assert world.current_turn == 1
    assert entity_state(world.pk, 1, "alice") == "holding the last candy bar"
    assert (
        entity_state(world.pk, 1, "bob") == "empty-handed and still hungry; the machine was empty"
    )
    assert entity_state(world.pk, 1, "vending_machine") == entity_state(
        world.pk, 0, "vending_machine"
    )
    # Bob's phone inbox is Bob's alone; both walkers see the park's weather.
    alice_request, _, bob_request, _ = scripted_llm.requests
    assert "entities" not in ambient_in(alice_request)
    assert "phone_inbox" in ambient_in(bob_request)["entities"]["bob"]
    assert "weather" in ambient_in(alice_request)["environments"]["park"]
    (phone,) = invocations(attempt, ambient_source_id="bob_phone")
    assert phone.subject_id == "bob"
    # The walkers share one workflow: its once-per-turn sources ran once.
    assert len(invocations(attempt, ambient_source_id="park_weather")) == 1
    assert len(invocations(attempt, ambient_source_id="park_pa")) == 1
    assert_world_changed_only_by_patches(attempt)


# --- 7. Bob and the ant in one committed turn -----------------------------------------------


def test_bob_and_the_ant_change_one_committed_turn_with_separate_patches(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    body = fixture_body("park")
    body["scenario_slug"] = "park_hungry_ant"
    entity_of(body, "ant")["state"] = "beside the crumb on the picnic plate, hungry."
    world = create_world(body, "bob-and-ant")
    scripted_llm.script(
        BUY_CANDY,
        final(
            "Bob buys a candy bar.",
            set_state("bob", "holding a candy bar"),
            remember("bob", "Turn 1: I bought a candy bar."),
        ),
    )
    attempt = run_turn("bob-and-ant")
    assert_committed(attempt)
    world.refresh_from_db()
    assert world.current_turn == 1
    assert list(Turn.objects.filter(world=world).values_list("number", flat=True)) == [0, 1]
    assert attempt.produced_turn == 1
    state = turn_state(world.pk, 1)
    entities = {e["id"]: e for e in state["entities"]}
    assert entities["bob"]["state"] == "holding a candy bar"
    assert entities["crumb"]["state"].startswith("eaten")
    assert "chewing" in entities["ant"]["state"]

    applied = events(attempt, "world_patch_applied")
    assert [(e.subject_id, e.patch_seq) for e in applied] == [("ant", 1), ("bob", 2)]
    ant_event, bob_event = applied
    generations = invocations(attempt, kind="llm_generation")
    accepted = generations[-1]
    accepted_call = LlmCall.objects.get(invocation=accepted)
    assert accepted.model_output_kind == "final_patch"
    assert bob_event.llm_call_id == accepted_call.pk
    assert bob_event.invocation_id == accepted.pk
    assert ant_event.llm_call_id is None
    assert ant_event.invocation_id is None

    transitions = list(PatchTransition.objects.filter(attempt=attempt))
    ant_rows = [t for t in transitions if t.patch_seq == 1]
    bob_rows = [t for t in transitions if t.patch_seq == 2]
    assert ant_rows and bob_rows
    assert len(ant_rows) + len(bob_rows) == len(transitions)
    assert {t.subject_id for t in ant_rows} == {"ant"}
    assert {t.subject_id for t in bob_rows} == {"bob"}
    assert {t.target_id for t in ant_rows} >= {"ant", "crumb"}
    assert {t.target_id for t in bob_rows} == {"bob"}
    assert all(t.turn_number == 1 for t in transitions)
    for t in bob_rows:
        assert t.llm_call_id == accepted_call.pk
        assert t.invocation_id == accepted.pk
        assert t.node_id == "act"
    for t in ant_rows:
        assert t.llm_call_id is None
        assert t.invocation_id is None
        assert t.node_id == "decide"
    crumb = next(t for t in ant_rows if t.target_id == "crumb")
    assert crumb.before == "a bread crumb in the middle of the picnic plate."
    assert crumb.after.startswith("eaten")
    assert_world_changed_only_by_patches(attempt)


# --- the LLM traces of a turn ---------------------------------------------------------------


def test_llm_calls_are_streamed_redacted_measured_and_probed_once(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    create_world("park", "traces")
    usage = {
        "prompt_tokens": 321,
        "completion_tokens": 45,
        "total_tokens": 366,
        "prompt_tokens_details": {"cached_tokens": 7},
    }
    texts = [
        json.dumps(BUY_CANDY),
        json.dumps(final("Bob buys a candy bar.", set_state("bob", "holding a candy bar"))),
    ]
    scripted_llm.script(*(Reply(text=t, usage=usage, chunk_size=5) for t in texts))
    attempt = run_turn("traces")
    assert_committed(attempt)

    # The key was sent to the backend (probe and generations) ...
    expected_auth = f"Bearer {TEST_API_KEY}"
    assert [h["authorization"] for h in scripted_llm.headers] == [expected_auth] * 2
    assert [h["authorization"] for h in scripted_llm.probe_headers] == [expected_auth]
    # ... and appears in no trace row.
    rows = [model_to_dict(i) for i in SourceInvocation.objects.all()]
    rows += [model_to_dict(c) for c in LlmCall.objects.all()]
    rows += [model_to_dict(p) for p in SourceProbe.objects.all()]
    dumped = json.dumps(rows, default=str)
    assert TEST_API_KEY not in dumped
    assert "Bearer" not in dumped

    generations = invocations(attempt, kind="llm_generation")
    assert len(generations) == 2
    for inv, text in zip(generations, texts, strict=True):
        call = LlmCall.objects.get(invocation=inv)
        assert inv.status == call.status == "succeeded"
        assert call.base_url == scripted_llm.base_url
        assert call.requested_model == "gpt-4o-mini"
        assert call.response_model == "gpt-4o-mini"
        assert call.response_format["type"] == "json_schema"
        assert call.response_format["json_schema"]["strict"] is True
        assert call.params == PARK_LLM_PARAMS
        assert call.raw_text == text
        assert inv.response_text == text
        assert call.finish_reason == "stop"
        chunks = list(LlmChunk.objects.filter(call=call).order_by("seq"))
        assert len(chunks) == -(-len(text) // 5)
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        assert "".join(c.text for c in chunks) == call.raw_text
        offsets = [c.offset_ms for c in chunks]
        assert offsets == sorted(offsets)
        assert call.ttft_ms is not None
        assert call.ttft_ms == chunks[0].offset_ms
        assert (call.prompt_tokens, call.completion_tokens, call.cached_tokens) == (321, 45, 7)
        assert call.usage_source == "provider"
        assert call.ended_at is not None
        assert inv.duration_ms is not None
    # The messages recorded are the messages sent.
    sent = scripted_llm.requests
    for inv, request in zip(generations, sent, strict=True):
        assert LlmCall.objects.get(invocation=inv).messages == request["messages"]
        assert inv.request["messages"] == f"{len(request['messages'])} messages, on the LLM call"
        for key, value in PARK_LLM_PARAMS.items():  # the source's params were sent as given
            assert request[key] == value

    # One conformance probe for this backend and model, not repeated for the second generation.
    assert len(scripted_llm.probes) == 1
    probe = SourceProbe.objects.get()
    assert probe.base_url == scripted_llm.base_url
    assert probe.model == "gpt-4o-mini"
    assert probe.enforces_schema is True
    # A second turn on the same backend does not probe again either.
    scripted_llm.script(json.dumps(bob_waits(2)))
    assert_committed(run_turn("traces"))
    assert len(scripted_llm.probes) == 1


def test_llm_generation_records_http_status_and_response_headers(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    """The specification lists response headers and HTTP status among an invocation's fields; the LLM
    generation is an invocation like any other (the provider's request id is what a reviewer
    needs to chase a call with the provider)."""
    create_world("park", "llm-status")
    scripted_llm.script(bob_waits(1))
    attempt = run_turn("llm-status")
    assert_committed(attempt)
    (generation,) = invocations(attempt, kind="llm_generation")
    assert generation.http_status == 200
    assert generation.response_headers.get("x-request-id", "").startswith("req_scripted_")
