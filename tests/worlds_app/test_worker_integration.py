"""Turn attempts through a real Celery worker and Redis."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from chukwa_core.hashing import canonical_json_bytes
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.worker import control_queue
from worlds_app import selectors
from worlds_app.models import AttemptStatus, PatchTransition, Turn, TurnAttempt, World
from worlds_app.services import (
    turn_attempt_claim,
    turn_attempt_enqueue,
    world_create,
    world_delete,
)
from worlds_app.tasks import reap_expired_attempts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

FINISHED = {
    AttemptStatus.COMMITTED,
    AttemptStatus.FAILED,
    AttemptStatus.INTERRUPTED,
    AttemptStatus.CANCELLED,
}


def _rule(
    rule_id: str, when: list[dict[str, Any]], plan: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "id": rule_id,
        "when": when,
        "intent": f"do {rule_id}",
        "plan": plan,
        "memory": "Turn {{world.attempted_turn}}: " + rule_id + ".",
        "narration": "{{subject.name}} does " + rule_id + ".",
        **extra,
    }


def _workflow(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [{"id": "decide", "type": "rule_policy", "rules": rules}],
        "apply": {"from": "decide.final"},
    }


def _lamp_scenario(
    beta_rules: list[dict[str, Any]], *, alpha_rules: list[dict[str, Any]] | None = None
) -> str:
    """alpha switches the lamp on; beta (running second) reacts to it in the same turn."""
    alpha = alpha_rules or [
        _rule(
            "switch_on",
            [{"kind": "entity_state_contains", "entity_id": "lamp", "text": "off"}],
            [{"op": "set_entity_state", "entity_id": "lamp", "state": "on, switched on by Alpha"}],
        ),
        _rule(
            "idle", [], [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "idle"}]
        ),
    ]
    body = {
        "scenario_slug": "lamp_room",
        "description": "Two agents and a lamp.",
        "chronon_seconds": 10,
        "cognition_profiles": {
            "alpha": {"inline": {"workflow": {"inline": _workflow(alpha)}}},
            "beta": {"inline": {"workflow": {"inline": _workflow(beta_rules)}}},
        },
        "environments": {"room": {"inline": "A small room."}},
        "entities": [
            {
                "inline": {
                    "id": "alpha",
                    "name": "Alpha",
                    "state": "by the door",
                    "environment": "room",
                    "kind": {
                        "agent": {"goal": "light", "memory": "", "cognition_profile": "alpha"}
                    },
                }
            },
            {
                "inline": {
                    "id": "beta",
                    "name": "Beta",
                    "state": "by the window",
                    "environment": "room",
                    "kind": {
                        "agent": {"goal": "mischief", "memory": "", "cognition_profile": "beta"}
                    },
                }
            },
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
    return scenario_assemble(data=body)["scenario_hash"]


BREAK_LAMP = [
    _rule(
        "break_lamp",
        [{"kind": "entity_state_contains", "entity_id": "lamp", "text": "on"}],
        [{"op": "set_entity_state", "entity_id": "lamp", "state": "broken: Beta knocked it over"}],
    ),
    _rule("idle", [], [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "idle"}]),
]
# A plan the kernel must reject: memory belongs to agents only.
BAD_MEMORY_STEP = {
    "op": "append_entity_memory",
    "entity_id": "lamp",
    "content": "a prop cannot remember",
}


def _wait(attempt_ids: list[str], timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = dict(TurnAttempt.objects.filter(pk__in=attempt_ids).values_list("id", "status"))
        if len(statuses) == len(attempt_ids) and all(s in FINISHED for s in statuses.values()):
            return {str(k): v for k, v in statuses.items()}
        time.sleep(0.1)
    raise AssertionError(f"attempts not finished after {timeout}s: {statuses}")


def test_two_subjects_one_committed_turn_with_per_patch_transitions(celery_worker: str) -> None:
    scenario = _lamp_scenario(BREAK_LAMP)
    world_create(data={"slug": "lamp", "scenario_ref": {"hash": scenario}})
    queued = turn_attempt_enqueue(slug="lamp", count=1)
    assert _wait(queued["attempt_ids"]) == {queued["attempt_ids"][0]: "committed"}

    world = World.objects.get(slug="lamp")
    assert world.current_turn == 1
    turn = Turn.objects.get(world=world, number=1)
    state = {e["id"]: e for e in turn.state["entities"]}
    assert state["lamp"]["state"] == "broken: Beta knocked it over"
    assert state["alpha"]["kind"]["agent"]["memory"] == "Turn 1: switch_on."
    assert state["beta"]["kind"]["agent"]["memory"] == "Turn 1: break_lamp."
    lamp = list(
        PatchTransition.objects.filter(world=world, target_id="lamp")
        .order_by("patch_seq")
        .values_list("patch_seq", "subject_id", "before", "after")
    )
    # before = the state just before *that* patch, not the turn-start state
    assert lamp == [
        (1, "alpha", "off", "on, switched on by Alpha"),
        (2, "beta", "on, switched on by Alpha", "broken: Beta knocked it over"),
    ]
    attempt = selectors.attempt_get(attempt_id=queued["attempt_ids"][0])
    kinds = [e["kind"] for e in attempt["events"]]
    assert kinds == [
        "attempt_started",
        "inner_monologue",
        "world_patch_applied",
        "inner_monologue",
        "world_patch_applied",
        "turn_committed",
    ]
    assert attempt["lease_owner"].startswith("it-")


def test_failure_in_second_subject_leaves_world_unchanged(celery_worker: str) -> None:
    beta = [_rule("ruin", [], [BAD_MEMORY_STEP])]
    world_create(data={"slug": "lamp-fail", "scenario_ref": {"hash": _lamp_scenario(beta)}})
    queued = turn_attempt_enqueue(slug="lamp-fail", count=1)
    attempt_id = queued["attempt_ids"][0]
    assert _wait([attempt_id]) == {attempt_id: "failed"}

    world = World.objects.get(slug="lamp-fail")
    assert world.current_turn == 0
    assert not Turn.objects.filter(world=world, number=1).exists()
    assert not PatchTransition.objects.filter(world=world).exists()
    assert Turn.objects.get(world=world, number=0).state["entities"][2]["state"] == "off"
    attempt = selectors.attempt_get(attempt_id=attempt_id)
    assert attempt["failure"]["subject_id"] == "beta"
    assert attempt["failure"]["step"] == "patch_validation"
    assert "append_entity_memory applies to agents only" in attempt["failure"]["reason"]
    kinds = [(e["kind"], e["patch_seq"]) for e in attempt["events"]]
    # alpha's patch was applied to the working copy (and traced), then beta failed
    assert ("world_patch_applied", 1) in kinds
    assert kinds[-1] == ("attempt_failed", None)


def test_batch_of_five_with_failure_at_third(celery_worker: str) -> None:
    alpha = [
        _rule(
            "stumble", [{"kind": "subject_memory_contains", "text": "turn 2:"}], [BAD_MEMORY_STEP]
        ),
        _rule(
            "wait",
            [],
            [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "waiting"}],
        ),
    ]
    beta = [_rule("idle", [], [])]
    world_create(
        data={"slug": "batch", "scenario_ref": {"hash": _lamp_scenario(beta, alpha_rules=alpha)}}
    )
    queued = turn_attempt_enqueue(slug="batch", count=5)
    ids = queued["attempt_ids"]
    statuses = _wait(ids)
    assert [statuses[i] for i in ids] == [
        "committed",
        "committed",
        "failed",
        "cancelled",
        "cancelled",
    ]
    world = World.objects.get(slug="batch")
    assert world.current_turn == 2
    assert sorted(Turn.objects.filter(world=world).values_list("number", flat=True)) == [0, 1, 2]
    cancelled = TurnAttempt.objects.get(pk=ids[3])
    failed = TurnAttempt.objects.get(pk=ids[2])  # named by its number in the world
    assert cancelled.failure_reason == f"cancelled: attempt {failed.seq} of this batch failed"


def test_expired_lease_is_interrupted_and_a_later_attempt_succeeds(celery_worker: str) -> None:
    world_create(data={"slug": "lease", "scenario_ref": {"hash": _lamp_scenario(BREAK_LAMP)}})
    # Queue where no worker listens, then claim as a worker that will "die" holding the lease.
    settings.CELERY_TASK_DEFAULT_QUEUE = f"{celery_worker}-nowhere"
    try:
        queued = turn_attempt_enqueue(slug="lease", count=2)
    finally:
        settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker
    dead, follower = queued["attempt_ids"]
    claimed = turn_attempt_claim(attempt_id=dead, owner="dead-worker@nowhere")
    assert claimed is not None and claimed.status == AttemptStatus.RUNNING
    TurnAttempt.objects.filter(pk=dead).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    # the periodic task, on the control queue the test worker consumes besides its own
    reap_expired_attempts.apply_async(queue=control_queue(celery_worker))
    assert _wait([dead, follower]) == {dead: "interrupted", follower: "cancelled"}
    world = World.objects.get(slug="lease")
    assert world.current_turn == 0
    interrupted = selectors.attempt_get(attempt_id=dead)
    assert interrupted["failure"]["step"] == "lease"
    assert interrupted["events"][-1]["kind"] == "attempt_interrupted"

    later = turn_attempt_enqueue(slug="lease", count=1)["attempt_ids"]
    assert _wait(later) == {later[0]: "committed"}
    assert World.objects.get(slug="lease").current_turn == 1


def test_racing_enqueue_requests_give_contiguous_turns(
    celery_worker: str, operator_user: Any
) -> None:
    world_create(data={"slug": "race", "scenario_ref": {"hash": _lamp_scenario(BREAK_LAMP)}})
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def post() -> None:
        client = APIClient()
        client.force_authenticate(operator_user)
        barrier.wait()
        try:
            results.append(client.post("/api/worlds/race/turns/", {"count": 3}, format="json"))
        finally:
            connection.close()  # a thread's connection would block dropping the test database

    threads = [threading.Thread(target=post) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in results] == [202, 202]
    ids = [i for r in results for i in r.json()["attempt_ids"]]
    statuses = _wait(ids, timeout=90)
    assert set(statuses.values()) == {"committed"}
    world = World.objects.get(slug="race")
    assert world.current_turn == 6
    assert sorted(Turn.objects.filter(world=world).values_list("number", flat=True)) == list(
        range(7)
    )
    produced = sorted(
        TurnAttempt.objects.filter(pk__in=ids).values_list("produced_turn", flat=True)
    )
    assert produced == [1, 2, 3, 4, 5, 6]
    seqs = sorted(TurnAttempt.objects.filter(world=world).values_list("seq", flat=True))
    assert seqs == [1, 2, 3, 4, 5, 6]


def _run_world(slug: str, scenario_hash: str, turns: int) -> list[tuple[bytes, bytes]]:
    world_create(
        data={
            "slug": slug,
            "scenario_ref": {"hash": scenario_hash},
            "start_time": "2026-01-01T12:00:00+00:00",
        }
    )
    ids = turn_attempt_enqueue(slug=slug, count=turns)["attempt_ids"]
    assert set(_wait(ids).values()) == {"committed"}
    out = []
    for number in range(turns + 1):
        turn = selectors.turn_get(slug=slug, number=number)
        out.append(
            (
                canonical_json_bytes(turn["state"]),
                canonical_json_bytes([p["patch"] for p in turn["patches"]]),
            )
        )
    return out


def test_same_deterministic_world_twice_is_byte_identical(celery_worker: str) -> None:
    body = load_fixture("picnic_rules")
    body.pop("name")
    scenario_hash = scenario_assemble(data=body)["scenario_hash"]
    first = _run_world("det", scenario_hash, 4)
    world_delete(slug="det")
    second = _run_world("det", scenario_hash, 4)
    assert first == second
    assert len({state for state, _ in first}) > 1  # the world did change turn over turn
