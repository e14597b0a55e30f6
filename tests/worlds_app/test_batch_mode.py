"""Batch-mode experiments (docs/costs.md, "Batch mode") on real workers against the scripted
model's Batch API, counting what the model receives: the same results as online with the same
seeds; while a batch is held no worker is busy (another world's turn commits meanwhile); cancel
ends parked attempts ``cancelled`` and cancels the provider batch; a bad mode is a 400."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from cognition_app.models import BatchRequest, ProviderBatch, SourceInvocation
from cognition_app.tasks import batch_tick
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.experiment_results import export_rows
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import ACTIVE_STATUSES, AttemptStatus, Turn, TurnAttempt, World

API_KEY = "sk-batch-mode-test"
START = "2026-05-01T08:00:00+00:00"
SEED = 4242


def _scenario(execution: str = "per_subject_ordered") -> dict[str, Any]:
    body = fixture_body("ant_on_plate")
    workflow_of(body, "ant")["execution"] = execution
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0.7, "max_tokens": 200}
    iface["batch"] = {"api": "openai", "completion_window": "24h"}
    # a second ant: two generations per turn, so a resumed attempt replays its first
    second = copy.deepcopy(next(e for e in body["entities"] if e["inline"]["id"] == "ant"))
    second["inline"] |= {"id": "ant_b", "name": "Second ant"}
    body["entities"].append(second)
    return {"hash": scenario_assemble(data=body)["scenario_hash"]}


def by_request(request: dict[str, Any]) -> Reply:
    """The reply is a function of the request: the same requests, sent or batched, get the same
    replies, and different requests different ones."""
    digest = hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode()).hexdigest()
    patch = {"narration": f"The ant waits ({digest[:8]}).", "effects": []}
    body = json.dumps({"kind": "final_patch", "tool_call": None, "patch": patch})
    return Reply(text=body, usage={"prompt_tokens": 400, "completion_tokens": 60})


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def worker_env(llm: ScriptedLLM) -> dict[str, str]:
    """The environment of a worker on the test database and the scripted model; this process
    gets the model too (the batch tick runs here)."""
    os.environ["CHUKWA_LLM_BASE_URL"] = llm.base_url
    os.environ["CHUKWA_LLM_API_KEY"] = API_KEY
    return {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }


@pytest.fixture
def workers(llm: ScriptedLLM) -> Iterator[str]:
    queue = f"batch-mode-{os.getpid()}"
    env = worker_env(llm)
    with (
        worker_process(f"{queue}-1", env=env, queue=queue),
        worker_process(f"{queue}-2", env=env, queue=queue),
        routed_to(queue),
    ):
        yield queue


def _metric() -> dict[str, str]:
    content = {
        "version": 1,
        "label": "narration_chars",
        "kind": "expression",
        "aggregate": "mean",
        "expression": "length(join('', patches[].narration))",
    }
    return {"hash": metric_put(content=content)["hash"]}


def _design(slug: str, execution: str = "per_subject_ordered", **extra: Any) -> dict[str, Any]:
    scenario = _scenario(execution)
    patch = {
        "narration": "Someone moves the crumb.",
        "effects": [{"op": "set_entity_state", "entity_id": "crumb", "state": "gone."}],
    }
    return {
        "slug": slug,
        "arms": [
            {"label": "a", "scenario_ref": scenario},
            {
                "label": "b",
                "scenario_ref": scenario,
                "interventions": [{"turn": 2, "note": "moved", "patch": patch}],
            },
        ],
        "replicates": 2,
        "turns": 3,
        "metrics": [_metric()],
        "seed": SEED,
        "start_time": START,
        "reuse": "off",  # every call its own: the batch arm must not be answered by the online
        **extra,
    }


def _until(check: Callable[[], bool], what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what}")
        time.sleep(0.1)


def _finished(slug: str) -> bool:
    state = experiment_get(slug=slug)
    progress = state["progress"]
    return bool(
        state["status"] == "failed"
        or (
            state["status"] != "running"
            and progress["measurements_done"] == progress["measurements_planned"]
        )
    )


def _attempts(slug: str, *statuses: str) -> int:
    return TurnAttempt.objects.filter(
        world__experiment__slug=slug, status__in=list(statuses)
    ).count()


def _all_parked_or_done(slug: str) -> bool:
    """Every world's attempt has parked (or its world is done): nothing runs, nothing is next.
    One statement: one snapshot of every world's first attempt not ended."""
    heads: dict[int, str] = {}
    for world_id, status in (
        TurnAttempt.objects.filter(world__experiment__slug=slug, status__in=ACTIVE_STATUSES)
        .order_by("world_id", "seq")
        .values_list("world_id", "status")
    ):
        heads.setdefault(world_id, status)
    return all(status == AttemptStatus.WAITING for status in heads.values())


def _states(slug: str) -> dict[tuple[str, int], list[str]]:
    return {
        (world.arm, world.replicate): list(
            Turn.objects.filter(world=world).order_by("number").values_list("state_hash", flat=True)
        )
        for world in World.objects.filter(experiment__slug=slug)
    }


def _measured(slug: str) -> list[tuple[Any, ...]]:
    _, rows = export_rows(slug=slug)
    return sorted((r["arm"], r["replicate"], r["turn"], r["value"]) for r in rows)


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
@pytest.mark.parametrize(
    ("execution", "ticks_per_turn"),
    # two ants one after the other: a tick each, the second's resume replays the first's call;
    # two ants thinking at once: both requests in one tick
    [("per_subject_ordered", 2), ("concurrent", 1)],
)
def test_batch_mode_gives_the_online_results_and_holds_no_worker_while_a_batch_is_held(
    llm: ScriptedLLM, workers: str, operator_client: Any, execution: str, ticks_per_turn: int
) -> None:
    llm.reset()
    llm.route(by_request)
    lines_before = len(llm.batch_requests)
    online = _design("online", execution)
    answer = operator_client.post("/api/experiments/", online, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["design"]["mode"] == "online"  # the default
    _until(lambda: _finished("online"), "the online experiment did not finish")
    assert experiment_get(slug="online")["status"] == "completed"
    sent_online = len(llm.requests)
    assert sent_online > 0 and len(llm.batch_requests) == lines_before

    # an interactive world on the same model, to turn while the batch is held
    world = operator_client.post(
        "/api/worlds/",
        {"slug": "bystander", "scenario_ref": online["arms"][0]["scenario_ref"], "seed": 7},
        format="json",
    )
    assert world.status_code == 201, world.json()

    batched = copy.deepcopy(online) | {"slug": "batched", "mode": "batch"}
    answer = operator_client.post("/api/experiments/", batched, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["design"]["mode"] == "batch"
    ticks = 0
    while _attempts("batched", *ACTIVE_STATUSES):
        _until(lambda: _all_parked_or_done("batched"), "the worlds did not all park")
        parked = _attempts("batched", AttemptStatus.WAITING)
        if not parked:  # the last tick's attempts committed meanwhile
            assert not _attempts("batched", *ACTIVE_STATUSES)
            break
        if ticks == 0:
            # every world parked, its request pending: no attempt holds a worker or a lease
            assert parked == 2 * batched["replicates"]
            assert (
                not TurnAttempt.objects.filter(
                    world__experiment__slug="batched", status=AttemptStatus.WAITING
                )
                .exclude(lease_owner="")
                .exists()
            )
            llm.script_batches("in_progress")
            batch_tick()  # sent; held in progress by the model
            assert ProviderBatch.objects.filter(status="in_progress").count() == 1
            state = experiment_get(slug="batched")
            assert state["batch"]["attempts_waiting"] == parked
            # the arms of a replicate ask the same first turn: one line waits for both
            assert state["batch"]["requests_pending"] == batched["replicates"] * (
                2 // ticks_per_turn
            )
            # while the batch is held, an operator's turn of another world commits at once
            before = len(llm.requests)
            turned = operator_client.post("/api/worlds/bystander/turns/", {}, format="json")
            assert turned.status_code in (200, 201, 202), turned.json()
            _until(
                lambda: World.objects.get(slug="bystander").current_turn == 1,
                "the bystander's turn did not commit while the batch was held",
            )
            assert len(llm.requests) == before + 2  # its two ants, sent live
            assert _attempts("batched", AttemptStatus.WAITING) == parked  # still parked
            llm.settle_batches()
        batch_tick()
        ticks += 1
        assert ticks <= 20, "too many ticks"
    _until(lambda: _finished("batched"), "the batch-mode experiment was not measured")
    state = experiment_get(slug="batched")
    assert state["status"] == "completed", state
    # one tick per round of generations (no tool loop)
    assert ticks == ticks_per_turn * batched["turns"]
    assert state["batch"]["ticks"] == ticks
    assert state["batch"]["attempts_waiting"] == 0 and state["batch"]["requests_pending"] == 0
    # nothing of the batch-mode experiment was sent live; every generation went in a batch
    assert len(llm.requests) == sent_online + 2  # the bystander's only
    # every distinct request the online run sent went in a batch once (identical ones share)
    distinct = {json.dumps(r, sort_keys=True) for r in llm.requests[:sent_online]}
    assert len(distinct) < sent_online
    assert len(llm.batch_requests) - lines_before == len(distinct)
    assert _states("batched") == _states("online")
    assert _measured("batched") == _measured("online")
    # each attempt parked once per tick, then committed as the same row; resumed for the
    # second ant, it replayed the first's call: no call twice in its record
    assert set(
        TurnAttempt.objects.filter(world__experiment__slug="batched").values_list("status", "parks")
    ) == {(AttemptStatus.COMMITTED, ticks_per_turn)}
    for attempt in TurnAttempt.objects.filter(world__experiment__slug="batched"):
        calls = SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation")
        assert calls.filter(replayed_from__isnull=True).count() == 2  # one per agent
        replayed = ticks_per_turn - 1
        assert calls.filter(replayed_from__isnull=False).count() == replayed
        assert calls.filter(status="succeeded").count() == 2 + replayed
        kinds = list(attempt.events.order_by("seq").values_list("kind", flat=True))
        assert kinds.count("attempt_started") == 1 and kinds[-1] == "turn_committed"


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_cancel_ends_parked_attempts_cancelled_and_cancels_the_provider_batch(
    llm: ScriptedLLM, workers: str, operator_client: Any
) -> None:
    llm.reset()
    llm.route(by_request)
    design = _design("cancelled", mode="batch")
    answer = operator_client.post("/api/experiments/", design, format="json")
    assert answer.status_code == 201, answer.json()
    _until(lambda: _all_parked_or_done("cancelled"), "the worlds did not all park")
    llm.script_batches("in_progress")
    batch_tick()
    assert ProviderBatch.objects.get().status == "in_progress"
    answer = operator_client.post("/api/experiments/cancelled/cancel/", {}, format="json")
    assert answer.status_code in (200, 202), answer.json()
    first_turns = 2 * design["replicates"]
    assert _attempts("cancelled", AttemptStatus.CANCELLED) == first_turns * design["turns"]
    assert _attempts("cancelled", AttemptStatus.WAITING) == 0
    assert ProviderBatch.objects.get().status == "cancelled"
    assert set(BatchRequest.objects.values_list("status", flat=True)) == {"cancelled"}
    assert any(method == "POST" and path.endswith("/cancel") for method, path, _ in llm.batch_calls)
    batch_tick()  # nothing resumes a cancelled attempt
    assert _attempts("cancelled", AttemptStatus.QUEUED, AttemptStatus.RUNNING) == 0
    assert llm.requests == []


@pytest.mark.django_db
def test_a_bad_mode_is_a_400_naming_the_field_and_writes_nothing(operator_client: Any) -> None:
    for value in ("later", "", None, 1, ["batch"]):
        design = _design("bad-mode", mode=value)
        for path in ("/api/experiments/", "/api/experiments/estimate/"):
            answer = operator_client.post(path, design, format="json")
            assert answer.status_code == 400, answer.json()
            error = answer.json()["error"]
            assert (error["code"], error["details"]["field"]) == ("invalid_mode", "mode"), error
    # batch mode replays the attempt's own calls: not with another experiment's replay
    design = _design(
        "bad-mode", mode="batch", replay_from={"experiment": "x", "mode": "replay_strict"}
    )
    answer = operator_client.post("/api/experiments/", design, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["details"]["field"] == "mode"
    assert not World.objects.filter(slug__startswith="bad-mode").exists()


def _one_turn(slug: str, retry: dict[str, int] | None) -> dict[str, Any]:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface |= {"model": "scripted-model", "timeout_ms": 30000}
    iface["params"] = {"temperature": 0.7, "max_tokens": 200}
    iface["batch"] = {"api": "openai", "completion_window": "24h"}
    if retry is not None:
        iface["retry"] = retry
    scenario = {"hash": scenario_assemble(data=body)["scenario_hash"]}
    return {
        "slug": slug,
        "arms": [{"label": "a", "scenario_ref": scenario}],
        "replicates": 2,
        "turns": 1,
        "metrics": [_metric()],
        "seed": SEED,
        "start_time": START,
        "mode": "batch",
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_failed_batch_is_tried_again_by_policy_and_an_expired_one_fails_the_attempt(
    llm: ScriptedLLM, workers: str, operator_client: Any
) -> None:
    llm.reset()
    llm.route(by_request)
    batches_before = len(llm.batches)
    # two tries allowed: the failed batch's calls go in the next batch, the attempts park again
    answer = operator_client.post(
        "/api/experiments/", _one_turn("retried", {"attempts": 2, "backoff_ms": 0}), format="json"
    )
    assert answer.status_code == 201, answer.json()
    _until(lambda: _all_parked_or_done("retried"), "the worlds did not park")
    llm.script_batches("failed", "completed")
    batch_tick()  # sent and failed: the attempts resume, try again, park on new requests
    _until(
        lambda: _attempts("retried", AttemptStatus.WAITING) == 2 and _all_parked_or_done("retried"),
        "the attempts did not park again",
    )
    assert set(BatchRequest.objects.values_list("status", flat=True)) == {"failed", "pending"}
    batch_tick()  # the second batch completes
    _until(lambda: not _attempts("retried", *ACTIVE_STATUSES), "the attempts did not end")
    attempts = TurnAttempt.objects.filter(world__experiment__slug="retried")
    assert set(attempts.values_list("status", "parks")) == {(AttemptStatus.COMMITTED, 2)}
    for attempt in attempts:
        tries = SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation")
        assert list(tries.order_by("seq").values_list("status", "failure_class")) == [
            ("failed", "batch_failed"),
            ("succeeded", ""),
        ]
    assert len(llm.batches) - batches_before == 2 and llm.requests == []

    # one try: an expired batch fails the attempt as a transport failure would
    # (another seed: requests of its own, not the ones answered above)
    expiring = _one_turn("expired", None) | {"seed": SEED + 1}
    answer = operator_client.post("/api/experiments/", expiring, format="json")
    assert answer.status_code == 201, answer.json()
    _until(lambda: _all_parked_or_done("expired"), "the worlds did not park")
    llm.script_batches("expired")
    batch_tick()
    _until(lambda: not _attempts("expired", *ACTIVE_STATUSES), "the attempts did not end")
    failed = TurnAttempt.objects.filter(world__experiment__slug="expired")
    assert set(failed.values_list("status", flat=True)) == {AttemptStatus.FAILED}
    assert all("batch_expired" in a.failure_reason for a in failed)
    assert llm.requests == []
