"""The `concurrent` execution mode and events written as they happen, through
a real Celery worker and the scripted LLM server.

Subjects of a concurrent phase send their requests in any order, so the scripted server answers
through a router (by the subject named in the system message) instead of its FIFO queue; a reply
that must prove two subjects think at the same time holds until the server has seen that many
requests in flight at once.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from chukwa_core.patch_schema import world_patch_schema_hash
from cognition_app.models import LlmCall, SourceInvocation
from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from worlds_app import selectors
from worlds_app.models import AttemptEvent, AttemptStatus, PatchTransition, Turn, TurnAttempt
from worlds_app.services import turn_attempt_enqueue, world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

API_KEY = "test-secret-key"
SUBJECT = re.compile(r"You control ([a-z0-9_]+)\.")
FINISHED = {"committed", "failed", "interrupted", "cancelled"}
LAMP_OFF = "dark, switched off at the wall"


# --- a real worker on a scripted model ----------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def _worker(name: str, llm: ScriptedLLM, **env: str) -> Iterator[str]:
    queue = f"{name}-{os.getpid()}"
    full_env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
        **env,
    }
    with worker_process(queue, env=full_env, queue=queue):
        yield queue


@pytest.fixture(scope="module")
def worker(llm: ScriptedLLM, django_db_setup: Any) -> Iterator[str]:
    yield from _worker("conc", llm)


@pytest.fixture(scope="module")
def bounded_worker(llm: ScriptedLLM, django_db_setup: Any) -> Iterator[str]:
    """A worker whose deployment lets two subjects think at once."""
    yield from _worker("conc2", llm, CHUKWA_MAX_CONCURRENT_SUBJECTS="2")


@pytest.fixture(autouse=True)
def _fresh_llm(llm: ScriptedLLM) -> None:
    llm.reset()


# --- scenarios ----------------------------------------------------------------------------------


def _source(concurrency: int | None = None) -> dict[str, Any]:
    interface: dict[str, Any] = {
        "name": "llm_chat_completions",
        "model": "scripted-model",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "api_key_env": "CHUKWA_LLM_API_KEY",
        "schema_delivery": "response_format",
        "timeout_ms": 30000,
        "params": {"max_tokens": 400},
    }
    if concurrency is not None:
        interface["limits"] = {"concurrency": concurrency}
    return {"version": 1, "label": "chat", "interface": interface}


def _workflow(execution: str, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "execution": execution,
        "ambient_sources": [],
        "nodes": [
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": {"inline": source},
                "max_generation_attempts": 2,
                "max_tool_calls": 0,
                "available_tools": [],
                "final_schema_ref": {"hash": world_patch_schema_hash()},
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": "You control {{subject.id}}."},
                        {"role": "user", "content": "World:\n{{world.projection}}"},
                    ]
                },
            }
        ],
        "apply": {"from": "act.final"},
    }


def _world(
    slug: str,
    concurrent: list[str],
    ordered: list[str] = (),  # type: ignore[assignment]
    *,
    concurrency: int | None = None,
) -> None:
    source = _source(concurrency)
    entities = [
        {
            "inline": {
                "id": agent,
                "name": agent.title(),
                "state": "waiting",
                "environment": "room",
                "kind": {
                    "agent": {
                        "goal": "act",
                        "memory": "",
                        "cognition_profile": "crowd" if agent in concurrent else "director",
                    }
                },
            }
        }
        for agent in [*concurrent, *ordered]
    ]
    entities.append(
        {
            "inline": {
                "id": "lamp",
                "name": "Lamp",
                "state": LAMP_OFF,
                "environment": "room",
                "kind": "prop",
            }
        }
    )
    body = {
        "scenario_slug": "crowd_room",
        "description": "Agents thinking at the same time around a lamp.",
        "chronon_seconds": 60,
        "cognition_profiles": {
            "crowd": {"inline": {"workflow": {"inline": _workflow("concurrent", source)}}},
            "director": {
                "inline": {"workflow": {"inline": _workflow("per_subject_ordered", source)}}
            },
        },
        "environments": {"room": {"inline": "A room with a lamp."}},
        "entities": entities,
    }
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})


def _final(narration: str, *effects: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {"narration": narration, "effects": list(effects)},
    }


def _set(entity: str, state: str) -> dict[str, Any]:
    return {"op": "set_entity_state", "entity_id": entity, "state": state}


def subject_of(request: dict[str, Any]) -> str:
    match = SUBJECT.search(request["messages"][0]["content"])
    assert match, request["messages"][0]
    return match.group(1)


def prompt_of(llm: ScriptedLLM, subject: str) -> str:
    (request,) = [r for r in llm.requests if subject_of(r) == subject]
    return str(request["messages"][1]["content"])


def _router(
    llm: ScriptedLLM, replies: dict[str, Any], *, together: int = 0
) -> Callable[[dict[str, Any]], Any]:
    """Answer each subject with its reply; the first ``together`` requests hold until that many
    are in flight at once (proof that they think at the same time)."""

    def route(request: dict[str, Any]) -> Any:
        if together and not llm.wait_in_flight(together):
            raise AssertionError(f"{together} subjects never thought at the same time")
        reply = replies[subject_of(request)]
        return reply(request) if callable(reply) else reply

    return route


def _run(queue: str, slug: str) -> TurnAttempt:
    with routed_to(queue):
        (attempt_id,) = turn_attempt_enqueue(slug=slug)["attempt_ids"]
    return _run_finished(attempt_id)


def _kinds(attempt: TurnAttempt) -> list[tuple[str, str, int | None]]:
    return list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("kind", "subject_id", "patch_seq")
    )


def _lamp(attempt: TurnAttempt) -> list[tuple[int, str, str, str]]:
    return list(
        PatchTransition.objects.filter(attempt_id=attempt.pk, target_id="lamp")
        .order_by("patch_seq")
        .values_list("patch_seq", "subject_id", "before", "after")
    )


# --- the semantics ------------------------------------------------------------------------------


def test_subjects_think_on_the_turn_start_world_and_apply_in_id_order(
    llm: ScriptedLLM, worker: str
) -> None:
    _world("crowd", ["beta", "alpha"])
    llm.route(
        _router(
            llm,
            {
                "alpha": _final("Alpha lights the lamp.", _set("lamp", "on, lit by Alpha")),
                "beta": _final(
                    "Beta knocks the lamp over.",
                    _set("lamp", "knocked over by Beta"),
                    {"op": "append_entity_memory", "entity_id": "beta", "content": "Oops."},
                ),
            },
            together=2,
        )
    )
    attempt = _run(worker, "crowd")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    assert llm.max_in_flight == 2  # they thought at the same time
    # Each prompt shows the turn-start world: neither saw the other's effect of this turn.
    for subject in ("alpha", "beta"):
        prompt = prompt_of(llm, subject)
        assert f"- lamp (Lamp, prop): {LAMP_OFF}" in prompt
        assert "lit by Alpha" not in prompt and "knocked over" not in prompt
    # Applied in subject-id order, numbered in that order; before = just before that patch.
    assert _lamp(attempt) == [
        (1, "alpha", LAMP_OFF, "on, lit by Alpha"),
        (2, "beta", "on, lit by Alpha", "knocked over by Beta"),
    ]
    assert _kinds(attempt) == [
        ("attempt_started", "", None),
        ("world_patch_applied", "alpha", 1),
        ("world_patch_applied", "beta", 2),
        ("effect_contested", "beta", 2),
        ("turn_committed", "", None),
    ]
    contested = AttemptEvent.objects.get(attempt=attempt, kind="effect_contested").payload
    assert contested == {
        "target_kind": "entity_state",
        "target_id": "lamp",
        "op": "set_entity_state",
        "kept": {"subject_id": "beta", "patch_seq": 2, "value": "knocked over by Beta"},
        "overridden": {"subject_id": "alpha", "patch_seq": 1, "value": "on, lit by Alpha"},
    }
    state = {e["id"]: e for e in Turn.objects.get(world__slug="crowd", number=1).state["entities"]}
    assert state["lamp"]["state"] == "knocked over by Beta"  # the later patch's value
    assert state["beta"]["kind"]["agent"]["memory"] == "Oops."
    # Invocation sequence numbers are unique and follow the order the rows were opened.
    rows = list(SourceInvocation.objects.filter(attempt=attempt).order_by("seq"))
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert [r.started_at for r in rows] == sorted(r.started_at for r in rows)
    assert sorted(r.subject_id for r in rows if r.kind == "llm_generation") == ["alpha", "beta"]
    events = selectors.attempt_get(attempt_id=str(attempt.pk))["events"]
    assert {e["commit_state"] for e in events if e["kind"] == "world_patch_applied"} == {
        "committed"
    }


def test_the_mixed_turn_runs_ordered_subjects_after_on_the_working_world(
    llm: ScriptedLLM, worker: str
) -> None:
    # "able" sorts first, but its workflow is per_subject_ordered: it runs in phase 2.
    _world("mixed", ["alpha", "beta"], ["able"])
    llm.route(
        _router(
            llm,
            {
                "alpha": _final("Alpha sits.", _set("alpha", "sitting by the lamp")),
                "beta": _final("Beta lights the lamp.", _set("lamp", "on, lit by Beta")),
                "able": _final("Able switches the lamp off.", _set("lamp", "off again, by Able")),
            },
        )
    )
    attempt = _run(worker, "mixed")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    assert [subject_of(r) for r in llm.requests][2] == "able"  # after both of phase 1
    able = prompt_of(llm, "able")
    assert "sitting by the lamp" in able and "on, lit by Beta" in able  # phase 1's effects
    assert "sitting by the lamp" not in prompt_of(llm, "beta")
    assert _lamp(attempt) == [
        (2, "beta", LAMP_OFF, "on, lit by Beta"),
        (3, "able", "on, lit by Beta", "off again, by Able"),
    ]
    # A phase-2 subject that sets what phase 1 set saw it: not a contest.
    assert not AttemptEvent.objects.filter(attempt=attempt, kind="effect_contested").exists()
    assert [k for k in _kinds(attempt) if k[0] == "world_patch_applied"] == [
        ("world_patch_applied", "alpha", 1),
        ("world_patch_applied", "beta", 2),
        ("world_patch_applied", "able", 3),
    ]


def test_a_failing_subject_stops_the_others_and_every_row_is_finished(
    llm: ScriptedLLM, worker: str
) -> None:
    _world("stopped", ["alpha", "beta", "gamma"])
    slow = _final("Slowly. " + "And slowly. " * 300)
    slow_reply = Reply(text=json.dumps(slow), chunk_size=4, chunk_delay_s=0.05)

    def alpha(request: dict[str, Any]) -> Reply:
        # Fail only once both others are streaming.
        assert llm.wait_in_flight(3), "the three subjects never thought at the same time"
        time.sleep(0.3)
        return Reply(status=400, error_body={"error": {"message": "bad request for alpha"}})

    llm.route(_router(llm, {"alpha": alpha, "beta": slow_reply, "gamma": slow_reply}))
    attempt = _run(worker, "stopped")

    assert attempt.status == AttemptStatus.FAILED
    assert (attempt.failure_step, attempt.failure_subject) == ("source", "alpha")
    rows = {r.subject_id: r for r in SourceInvocation.objects.filter(attempt=attempt)}
    assert rows["alpha"].status == "failed"
    full = len(json.dumps(slow))
    for subject in ("beta", "gamma"):
        inv = rows[subject]
        call = LlmCall.objects.get(invocation=inv)
        assert (inv.status, inv.failure_class, call.status) == (
            "cancelled",
            "cancelled",
            "cancelled",
        )
        assert "subject 'alpha' failed" in inv.failure_message
        assert len(call.raw_text) < full  # the stream was cut, not read to its end
    assert not SourceInvocation.objects.filter(attempt=attempt, status="running").exists()
    assert not LlmCall.objects.filter(invocation__attempt=attempt, status="running").exists()
    assert Turn.objects.filter(world__slug="stopped").count() == 1  # still turn 0
    assert _kinds(attempt)[-1] == ("attempt_failed", "alpha", None)


def test_the_deployment_bound_holds(llm: ScriptedLLM, bounded_worker: str) -> None:
    subjects = ["alpha", "beta", "gamma", "delta", "epsilon"]
    _world("bounded", subjects)
    replies = {s: Reply(text=json.dumps(_final(f"{s} waits.")), delay_s=0.3) for s in subjects}
    llm.route(_router(llm, replies, together=2))
    attempt = _run(bounded_worker, "bounded")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    assert len(llm.requests) == 5
    assert llm.max_in_flight == 2  # CHUKWA_MAX_CONCURRENT_SUBJECTS=2


def test_a_sources_concurrency_limit_holds(llm: ScriptedLLM, worker: str) -> None:
    subjects = ["alpha", "beta", "gamma", "delta", "epsilon"]
    _world("limited", subjects, concurrency=2)  # the deployment allows 8
    replies = {s: Reply(text=json.dumps(_final(f"{s} waits.")), delay_s=0.3) for s in subjects}
    llm.route(_router(llm, replies, together=2))
    attempt = _run(worker, "limited")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    assert llm.max_in_flight == 2


def test_events_are_readable_while_the_attempt_runs(
    llm: ScriptedLLM, worker: str, operator_client: APIClient, operator_user: User
) -> None:
    _world("live", ["alpha"], ["zed"])
    slow = json.dumps(_final("Zed ponders. " + "Hmm. " * 200))
    llm.route(
        _router(
            llm,
            {
                "alpha": _final("Alpha lights the lamp.", _set("lamp", "on, lit by Alpha")),
                "zed": Reply(text=slow, chunk_size=4, chunk_delay_s=0.02),
            },
        )
    )
    with routed_to(worker):
        (attempt_id,) = turn_attempt_enqueue(slug="live")["attempt_ids"]
    # While zed's generation streams, phase 1's patch is already readable, provisional.
    deadline = time.monotonic() + 60
    while not LlmCall.objects.filter(
        invocation__attempt_id=attempt_id, invocation__subject_id="zed", chunks__seq__gte=3
    ).exists():
        assert time.monotonic() < deadline, "zed's generation never streamed"
        time.sleep(0.05)
    live = operator_client.get(f"/api/attempts/{attempt_id}/").json()
    assert live["status"] == "running"
    assert [(e["seq"], e["kind"], e["commit_state"]) for e in live["events"]] == [
        (1, "attempt_started", None),
        (2, "world_patch_applied", "provisional"),
    ]
    operator_client.force_login(operator_user)
    page = operator_client.get(f"/attempts/{attempt_id}/")
    assert "patch #1 applied (provisional)" in page.content.decode()

    attempt = _run_finished(attempt_id)
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    done = operator_client.get(f"/api/attempts/{attempt_id}/").json()
    assert [e["commit_state"] for e in done["events"] if e["kind"] == "world_patch_applied"] == [
        "committed",
        "committed",
    ]


def test_patches_of_a_failed_attempt_stay_visibly_uncommitted(
    llm: ScriptedLLM, worker: str, operator_client: APIClient, operator_user: User
) -> None:
    _world("unlucky", ["alpha"], ["zed"])
    llm.route(
        _router(
            llm,
            {
                "alpha": _final("Alpha lights the lamp.", _set("lamp", "on, lit by Alpha")),
                "zed": Reply(status=500),
            },
        )
    )
    attempt = _run(worker, "unlucky")

    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_subject == "zed"
    data = operator_client.get(f"/api/attempts/{attempt.pk}/").json()
    applied = [e for e in data["events"] if e["kind"] == "world_patch_applied"]
    assert [(e["subject_id"], e["commit_state"]) for e in applied] == [("alpha", "not_committed")]
    operator_client.force_login(operator_user)
    page = operator_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "patch #1 not committed" in page and "patch #1 applied" not in page
    assert not PatchTransition.objects.filter(attempt_id=attempt.pk).exists()


def _run_finished(attempt_id: str, timeout: float = 90.0) -> TurnAttempt:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attempt = TurnAttempt.objects.get(pk=attempt_id)
        if attempt.status in FINISHED:
            return attempt
        time.sleep(0.1)
    raise AssertionError(f"attempt {attempt_id} did not finish")
