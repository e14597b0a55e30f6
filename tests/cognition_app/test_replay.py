"""Replay (request keys, replay), end to end in-process through the scripted LLM server
and the toy sources: strict replays send nothing and reproduce every turn, a one-prompt fork
re-runs live only the calls whose requests changed, misses fail loudly, and the k-th use of a
request key gets the k-th recording."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from cognition_app.models import LlmCall, LlmChunk, SourceInvocation
from devservices.toys import toy_env
from scenarios_app.services import scenario_assemble, scenario_fork
from tests.cognition_app.test_park import (
    BUY_CANDY,
    assert_committed,
    bob_waits,
    final,
    remember,
    set_state,
    subject_of,
)
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import fixture_body, run_turn, workflow_of
from worlds_app.models import AttemptStatus, Turn, World
from worlds_app.services import world_create, world_delete

pytestmark = pytest.mark.django_db

START = "2031-05-01T09:00:00+00:00"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def new_world(scenario_hash: str, slug: str, replay: tuple[str, str] | None = None) -> World:
    data: dict[str, Any] = {
        "slug": slug,
        "scenario_ref": {"hash": scenario_hash},
        "start_time": START,
    }
    if replay is not None:
        data["replay_from"] = {"world": replay[0], "mode": replay[1]}
    return world_create(data=data)  # type: ignore[typeddict-item]


def state_hashes(world: World) -> list[str]:
    return list(
        Turn.objects.filter(world=world).order_by("number").values_list("state_hash", flat=True)
    )


def world_invocations(world: World, **filters: Any) -> list[SourceInvocation]:
    return list(
        SourceInvocation.objects.filter(world=world, **filters).order_by("attempted_turn", "seq")
    )


def cut_off_toys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every toy variable points at a closed port: any call that went live would fail."""
    for name in toy_env("http://127.0.0.1:9"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")


# --- a strict replay of three park turns ----------------------------------------------------


def test_strict_replay_sends_nothing_and_reproduces_every_turn(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario_hash = scenario_assemble(data=fixture_body("park"))["scenario_hash"]
    recorded = new_world(scenario_hash, "recorded")
    scripted_llm.script(
        BUY_CANDY,
        final(
            "Bob buys a candy bar.",
            set_state("bob", "holding a candy bar"),
            remember("bob", "Turn 1: I bought candy."),
        ),
        bob_waits(2),
        bob_waits(3),
    )
    for _ in range(3):
        assert_committed(run_turn("recorded"))
    scripted_llm.assert_exhausted()
    sent, probes = len(scripted_llm.requests), len(scripted_llm.probes)
    originals = world_invocations(recorded)
    assert all(HEX64.match(inv.request_key) for inv in originals)

    cut_off_toys(monkeypatch)
    replayed = new_world(scenario_hash, "replayed", ("recorded", "replay_strict"))
    for _ in range(3):
        assert_committed(run_turn("replayed"))

    # Not one request reached the model server (nor a conformance check), and the toys are
    # unreachable: every call was served from the record.
    assert (len(scripted_llm.requests), len(scripted_llm.probes)) == (sent, probes)
    assert state_hashes(replayed) == state_hashes(recorded)
    assert len(state_hashes(replayed)) == 4
    copies = world_invocations(replayed)
    kept = [inv for inv in originals if inv.kind != "conformance_check"]
    assert [c.replayed_from for c in copies] == [o.pk for o in kept]
    assert [(c.kind, c.request_key, c.status) for c in copies] == [
        (o.kind, o.request_key, "succeeded") for o in kept
    ]
    for copy_inv, original in zip(copies, kept, strict=True):
        assert copy_inv.response_json == original.response_json
        if original.kind != "llm_generation":
            continue
        new_call = LlmCall.objects.get(invocation=copy_inv)
        old_call = LlmCall.objects.get(invocation=original)
        assert new_call.raw_text == old_call.raw_text
        assert new_call.messages == old_call.messages
        assert (new_call.prompt_tokens, new_call.completion_tokens, new_call.usage_source) == (
            old_call.prompt_tokens,
            old_call.completion_tokens,
            old_call.usage_source,
        )
        assert new_call.artifacts == old_call.artifacts
        assert list(LlmChunk.objects.filter(call=new_call).values_list("text", flat=True)) == list(
            LlmChunk.objects.filter(call=old_call).values_list("text", flat=True)
        )


# --- a one-prompt fork, replay_then_live --------------------------------------------------------

STROLLER_PROMPT = "Alice strolls rather than hurries."


def _park_two_profiles(extra_system: str) -> dict[str, Any]:
    """The park with Alice, an LLM agent on her own profile ``stroller`` (the walker's workflow
    with ``extra_system`` added to its system prompt), so that one prompt can change alone."""
    body = fixture_body("park")
    body["scenario_slug"] = "park_stroller"
    stroller = copy.deepcopy(body["cognition_profiles"]["walker"])
    body["cognition_profiles"]["stroller"] = stroller
    _system_message(workflow_of(body, "stroller"))["content"] += " " + extra_system
    body["entities"].insert(
        1,
        {
            "inline": {
                "id": "alice",
                "name": "Alice",
                "state": "walking along the path",
                "environment": "park",
                "kind": {
                    "agent": {
                        "goal": "enjoy the park",
                        "memory": "",
                        "cognition_profile": "stroller",
                    }
                },
            }
        },
    )
    return body


def _system_message(workflow: dict[str, Any]) -> dict[str, Any]:
    messages = workflow["nodes"][0]["prompt_template"]["messages"]
    return next(m for m in messages if m["role"] == "system")


def _walk(body: dict[str, Any]) -> dict[str, Any]:
    """Each walker's patch depends on who acts, not on the prompt's wording."""
    subject = subject_of(body)
    return final(
        f"{subject} walks on.",
        set_state(subject, "walking on"),
        remember(subject, "I walked on."),
    )


def _recorded_and_fork(scripted_llm: ScriptedLLM, turns: int) -> tuple[World, str]:
    parent = scenario_assemble(data=_park_two_profiles(STROLLER_PROMPT))
    recorded = new_world(parent["scenario_hash"], "strollers")
    scripted_llm.script(*[_walk] * (2 * turns))
    for _ in range(turns):
        assert_committed(run_turn("strollers"))
    scripted_llm.assert_exhausted()
    changed = copy.deepcopy(_park_two_profiles(STROLLER_PROMPT)["cognition_profiles"]["stroller"])
    _system_message(changed["inline"]["workflow"]["inline"])["content"] += " She is in no hurry."
    fork = scenario_fork(
        data={
            "primary_parent": {"hash": parent["scenario_hash"]},
            "changes": {"cognition_profile_upserts": {"stroller": changed}},
        }
    )
    assert fork["scenario_hash"] != parent["scenario_hash"]
    return recorded, fork["scenario_hash"]


def test_replay_then_live_after_a_one_prompt_fork_reruns_only_the_changed_subject(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded, fork_hash = _recorded_and_fork(scripted_llm, turns=2)
    sent = len(scripted_llm.requests)
    cut_off_toys(monkeypatch)  # every ambient call replays: none may go live
    forked = new_world(fork_hash, "strollers-fork", ("strollers", "replay_then_live"))
    scripted_llm.script(*[_walk] * 2)
    for _ in range(2):
        assert_committed(run_turn("strollers-fork"))
    scripted_llm.assert_exhausted()
    # Only Alice's prompt changed, so only her generations (one per turn) went live.
    assert [subject_of(r) for r in scripted_llm.requests[sent:]] == ["alice", "alice"]
    live = [inv for inv in world_invocations(forked) if inv.replayed_from is None]
    assert [(inv.kind, inv.subject_id) for inv in live] == [("llm_generation", "alice")] * 2
    served = [inv for inv in world_invocations(forked) if inv.replayed_from is not None]
    assert {(inv.kind, inv.subject_id) for inv in served} == {
        ("ambient_context", ""),
        ("ambient_context", "bob"),
        ("llm_generation", "bob"),
    }
    # Alice did the same as before, so the turns are the same too.
    assert state_hashes(forked) == state_hashes(recorded)


def test_the_kth_use_of_a_request_key_gets_the_kth_recording(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two distinct workflows each run the park's once-per-turn sources: the same request (same
    # source, same body) twice in one turn, recorded twice.
    recorded, _ = _recorded_and_fork(scripted_llm, turns=1)
    weather = world_invocations(recorded, ambient_source_id="park_weather")
    assert len(weather) == 2
    assert weather[0].request_key == weather[1].request_key
    cut_off_toys(monkeypatch)
    again = new_world(recorded.scenario_id, "strollers-again", ("strollers", "replay_strict"))
    assert_committed(run_turn("strollers-again"))
    replayed = world_invocations(again, ambient_source_id="park_weather")
    assert [inv.replayed_from for inv in replayed] == [inv.pk for inv in weather]
    assert state_hashes(again) == state_hashes(recorded)


def test_strict_replay_miss_fails_the_attempt_naming_the_key_and_the_call(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, fork_hash = _recorded_and_fork(scripted_llm, turns=1)
    sent = len(scripted_llm.requests)
    cut_off_toys(monkeypatch)
    forked = new_world(fork_hash, "strollers-strict", ("strollers", "replay_strict"))
    attempt = run_turn("strollers-strict")
    assert attempt.status == AttemptStatus.FAILED
    assert len(scripted_llm.requests) == sent
    (miss,) = world_invocations(forked, status="failed")
    assert miss.failure_class == "replay_miss"
    assert (miss.kind, miss.subject_id, miss.node_id) == ("llm_generation", "alice", "act")
    assert HEX64.match(miss.request_key)
    assert miss.request_key in attempt.failure_reason
    assert "replay_miss" in attempt.failure_reason
    assert "alice" in attempt.failure_reason
    assert not LlmCall.objects.filter(invocation=miss).exists()
    assert len(state_hashes(forked)) == 1  # no turn committed


def test_a_failed_replaying_attempt_is_retried_with_the_same_recordings(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uses in failed attempts do not count: the retry of a turn replays what the turn needs."""
    recorded, fork_hash = _recorded_and_fork(scripted_llm, turns=1)
    cut_off_toys(monkeypatch)
    forked = new_world(fork_hash, "strollers-retry", ("strollers", "replay_then_live"))
    scripted_llm.script("not json at all", "still not json", "nope")  # Alice: 3 rejections
    failed = run_turn("strollers-retry")
    assert (failed.status, failed.failure_step) == (AttemptStatus.FAILED, "model_output")
    assert world_invocations(forked, ambient_source_id="park_weather")  # used, then not counted
    scripted_llm.script(_walk)
    assert_committed(run_turn("strollers-retry"))
    assert state_hashes(forked) == state_hashes(recorded)


def test_a_deleted_replay_source_fails_the_attempt_rather_than_going_live(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    scenario_hash = scenario_assemble(data=fixture_body("park"))["scenario_hash"]
    new_world(scenario_hash, "gone")
    new_world(scenario_hash, "orphan", ("gone", "replay_then_live"))
    world_delete(slug="gone")
    attempt = run_turn("orphan")
    assert (attempt.status, attempt.failure_step) == (AttemptStatus.FAILED, "replay")
    assert "'gone'" in attempt.failure_reason
    assert scripted_llm.requests == []


# --- creating a replaying world: API and CLI ----------------------------------------------------


def test_replay_from_is_validated_and_shown_by_the_api(operator_client: APIClient) -> None:
    scenario_hash = scenario_assemble(data=fixture_body("park"))["scenario_hash"]
    new_world(scenario_hash, "source")

    def create(slug: str, replay_from: Any) -> Any:
        return operator_client.post(
            "/api/worlds/",
            {"slug": slug, "scenario_ref": {"hash": scenario_hash}, "replay_from": replay_from},
            format="json",
        )

    for bad, field in (
        ({"world": "nowhere", "mode": "replay_strict"}, "replay_from.world"),
        ({"world": "source", "mode": "replay_sometimes"}, "replay_from.mode"),
        ({"world": "source"}, "replay_from.mode"),
    ):
        response = create("copy", bad)
        assert response.status_code == 400, response.json()
        error = response.json()["error"]
        assert error["code"] == "invalid_replay_from", error
        assert field in error["message"] or error["details"].get("field") == field, error
    response = create("copy", {"world": "source", "mode": "replay_strict", "x": 1})
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "replay_from.x"
    assert not World.objects.filter(slug="copy").exists()
    response = create("copy", {"world": "source", "mode": "replay_then_live"})
    assert response.status_code == 201, response.json()
    assert response.json()["replay_from"] == {"world": "source", "mode": "replay_then_live"}
    assert operator_client.get("/api/worlds/source/").json()["replay_from"] is None


def test_create_world_cli_sets_replay_from(capsys: pytest.CaptureFixture[str]) -> None:
    scenario_hash = scenario_assemble(data=fixture_body("park"))["scenario_hash"]
    new_world(scenario_hash, "source")
    call_command(
        "create_world",
        "copy",
        "--scenario-hash",
        scenario_hash,
        "--start-time",
        START,
        "--replay-from",
        "source",
        "--replay-mode",
        "replay_strict",
    )
    assert "replaying 'source' (replay_strict)" in capsys.readouterr().out
    world = World.objects.get(slug="copy")
    assert world.replay_from == {"world": "source", "mode": "replay_strict"}
    assert world.replay_source == World.objects.get(slug="source")


def test_the_api_shows_request_keys_and_replayed_from(
    scripted_llm: ScriptedLLM, toy_sources: str, operator_client: APIClient
) -> None:
    scenario_hash = scenario_assemble(data=fixture_body("park"))["scenario_hash"]
    new_world(scenario_hash, "shown")
    new_world(scenario_hash, "shown-again", ("shown", "replay_strict"))
    scripted_llm.script(bob_waits(1))
    original = run_turn("shown")
    replayed = run_turn("shown-again")
    assert_committed(replayed)
    (source_gen,) = world_invocations(original.world, kind="llm_generation")
    (copy_gen,) = world_invocations(replayed.world, kind="llm_generation")
    body = operator_client.get(f"/api/source-invocations/{copy_gen.pk}/").json()
    assert body["replayed_from"] == str(source_gen.pk)
    assert body["request_key"] == source_gen.request_key
    attempt = operator_client.get(f"/api/attempts/{replayed.pk}/").json()
    assert all(inv["replayed_from"] for inv in attempt["source_invocations"])
