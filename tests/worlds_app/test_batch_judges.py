"""Measurement judges through provider batches (docs/costs.md, "Batch"), over real HTTP with a
real worker against the scripted model, counting what it receives: a judge whose source declares
``interface.batch`` sends no live request; its turns stay unmeasured (shown as waiting) until the
batch poll ends the batch, then each is measured once, priced at the batch prices; a failed or
expired batch fails the judgings after the source's retry policy; cancelling the experiment
cancels its provider batch; reuse still wins over a batch."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import httpx
import pytest
from celery import current_app
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cognition_app import batches
from cognition_app.models import BatchRequest, LlmCall, ModelPrice, SourceInvocation
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import control_queue, routed_to, worker_process
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.models import Experiment, Measurement
from worlds_app.services.measure_redrive import batch_answers_redrive, measure_redrive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

API_KEY = "test-secret-key"
JUDGE_SYSTEM = "Score how restless the ant was this turn."
BATCH_PRICES = {"input": Decimal("0.5"), "output": Decimal("2"), "cached": Decimal("0.25")}
T = TypeVar("T")


def _scenario() -> str:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0, "max_tokens": 200}
    return str(scenario_assemble(data=body)["scenario_hash"])


def _judge(attempts: int = 1) -> str:
    interface: dict[str, Any] = {
        "name": "llm_chat_completions",
        "model": "scripted-model",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "api_key_env": "CHUKWA_LLM_API_KEY",
        "schema_delivery": "response_format",
        "timeout_ms": 30000,
        "params": {"max_tokens": 100},
        "batch": {"api": "openai", "completion_window": "24h"},
    }
    if attempts > 1:
        interface["retry"] = {"attempts": attempts, "backoff_ms": 0}
    return str(
        metric_put(
            content={
                "version": 1,
                "label": "restless",
                "kind": "llm_judge",
                "aggregate": "mean",
                "source": {"inline": {"version": 1, "label": "judge_chat", "interface": interface}},
                "system": JUDGE_SYSTEM,
                "user_template": "{{turn.patches}}",
                "scale": {"min": 0, "max": 10},
            }
        )["hash"]
    )


def _reply(request: dict[str, Any]) -> Reply:
    if request["messages"][0]["content"] == JUDGE_SYSTEM:
        return Reply(text=json.dumps({"score": 7, "rationale": "it paced"}))
    patch = {"narration": "The ant waits.", "effects": []}
    return Reply(text=json.dumps({"kind": "final_patch", "tool_call": None, "patch": patch}))


def _judge_requests(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in bodies if b["messages"][0]["content"] == JUDGE_SYSTEM]


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        server.route(_reply)
        yield server


def _until(check: Callable[[], T | None], what: str, seconds: float = 120) -> T:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} after {seconds} s")
        time.sleep(0.3)


def _client(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    )


def _design(slug: str, judge: str) -> dict[str, Any]:
    scenario = _scenario()
    return {
        "slug": slug,
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "other", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 1,
        "turns": 1,
        "metrics": [{"hash": judge}],
    }


def _env(llm: ScriptedLLM) -> dict[str, str]:
    return {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }


def _waiting(http: httpx.Client, slug: str, judgings: int) -> dict[str, Any] | None:
    """The experiment once its turns are run and ``judgings`` judgings wait on a batch."""
    state: dict[str, Any] = http.get(f"/api/experiments/{slug}/").json()
    if state["status"] == "completed" and state["progress"]["judges_waiting"] == judgings:
        return state
    return None


def _measured(http: httpx.Client, slug: str) -> dict[str, Any] | None:
    state: dict[str, Any] = http.get(f"/api/experiments/{slug}/").json()
    progress = state["progress"]
    if progress["measurements_done"] == progress["measurements_planned"]:
        return state
    return None


def _tick(queue: str) -> None:
    """One batch poll, as the beat sends it every CHUKWA_BATCH_POLL_SECONDS."""
    current_app.send_task("cognition.batch_tick", queue=control_queue(queue))


def _price() -> None:
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="scripted-model",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("4"),
        cached_input_per_million=Decimal("0.5"),
        batch_input_per_million=BATCH_PRICES["input"],
        batch_output_per_million=BATCH_PRICES["output"],
        batch_cached_input_per_million=BATCH_PRICES["cached"],
        valid_from=timezone.now() - timezone.timedelta(days=1),
    )


def test_a_judge_pass_in_batch_mode_sends_nothing_live_and_is_priced_at_the_batch_price(
    llm: ScriptedLLM, live_server: Any, operator_user: User, client: Client
) -> None:
    _price()
    judge = _judge()
    queue = f"batchjudge-{os.getpid()}"
    with (
        worker_process(queue, env=_env(llm), queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        made = http.post("/api/experiments/", json=_design("judged", judge))
        assert made.status_code == 201, made.text
        # 2 worlds by turns 0 and 1: every judging waits, none measured, none failed
        state = _until(lambda: _waiting(http, "judged", 4), "the judgings did not wait")
        assert state["progress"]["measurements_done"] == 0
        assert state["progress"]["judge_batches"] == 0  # gathered at the next poll
        assert not Measurement.objects.exists()
        queued = BatchRequest.objects.count()
        assert queued >= 1
        owner = f"experiment:{Experiment.objects.get(slug='judged').pk}"
        assert BatchRequest.objects.filter(owner=owner).count() == queued
        client.force_login(operator_user)
        page = client.get("/experiments/judged/")
        assert page.status_code == 200
        assert 'id="progress-judges-waiting">4' in page.content.decode()

        _tick(queue)
        state = _until(lambda: _measured(http, "judged"), "the batch's answers were not measured")
        assert state["progress"]["judges_waiting"] == 0
    # nothing live for the judge; its requests went in one batch, each once
    assert _judge_requests(llm.requests) == []
    assert len(_judge_requests(llm.batch_requests)) == queued
    assert len(llm.batches) == 1
    rows = list(Measurement.objects.values_list("world_id", "turn_number", "value"))
    assert len(rows) == 4 and len({(w, t) for w, t, _ in rows}) == 4
    assert {value for _, _, value in rows} == {7.0}
    calls = list(LlmCall.objects.filter(invocation__kind="judge"))
    paid = [c for c in calls if c.invocation.reused_from is None]
    # one paid call per batch line, read from it; the identical judgings reused it
    assert len(paid) == queued
    assert all(c.batched and c.batch_request_id is not None for c in paid)
    for call in paid:
        line = BatchRequest.objects.get(pk=call.batch_request_id).response_body
        assert line is not None
        usage = line["usage"]
        assert (call.prompt_tokens, call.completion_tokens) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
        cached = call.cached_tokens or 0
        assert call.cost == (
            (usage["prompt_tokens"] - cached) * BATCH_PRICES["input"]
            + cached * BATCH_PRICES["cached"]
            + usage["completion_tokens"] * BATCH_PRICES["output"]
        ) / Decimal(1_000_000)
    assert all(c.cost == 0 for c in calls if c.invocation.reused_from is not None)


def test_reuse_wins_over_a_batch(llm: ScriptedLLM, live_server: Any, operator_user: User) -> None:
    judge = _judge()
    queue = f"batchreuse-{os.getpid()}"
    with (
        worker_process(queue, env=_env(llm), queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        assert http.post("/api/experiments/", json=_design("first", judge)).status_code == 201
        _until(lambda: _waiting(http, "first", 4), "the judgings did not wait")
        _tick(queue)
        _until(lambda: _measured(http, "first"), "the batch's answers were not measured")
        lines, batches = BatchRequest.objects.count(), len(llm.batches)
        calls = LlmCall.objects.filter(invocation__kind="judge").count()
        # the same judgings asked again (a world's measurements asked for anew): all reused
        world = "first--other--1"
        Measurement.objects.filter(world__slug=world).delete()
        asked = http.post(f"/api/worlds/{world}/measurements/", json={"metrics": [{"hash": judge}]})
        assert asked.status_code == 202, asked.text
        _until(
            lambda: Measurement.objects.filter(world__slug=world).count() == 2,
            "the world was not measured again",
        )
    again = LlmCall.objects.filter(invocation__kind="judge").order_by("started_at")[calls:]
    assert len(again) == 2
    assert all(c.invocation.reused_from is not None and c.cost == 0 for c in again)
    assert BatchRequest.objects.count() == lines and len(llm.batches) == batches
    assert _judge_requests(llm.requests) == []


@pytest.mark.parametrize(
    ("outcome", "failure_class"), [("failed", "batch_failed"), ("expired", "batch_expired")]
)
def test_a_failed_or_expired_batch_fails_the_judgings_after_the_retry_policy(
    llm: ScriptedLLM, live_server: Any, operator_user: User, outcome: str, failure_class: str
) -> None:
    judge = _judge(attempts=2)
    queue = f"batchfail-{os.getpid()}"
    llm.script_batches(outcome, outcome)
    with (
        worker_process(queue, env=_env(llm), queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        assert http.post("/api/experiments/", json=_design("failing", judge)).status_code == 201
        _until(lambda: _waiting(http, "failing", 4), "the judgings did not wait")
        first = BatchRequest.objects.count()
        _tick(queue)
        # the first try failed, traced; the second waits in a new request
        _until(
            lambda: BatchRequest.objects.filter(status="pending").count() == first,
            "the judgings were not tried again",
        )
        state = _waiting(http, "failing", 4)
        assert state is not None and state["progress"]["measurements_done"] == 0
        _tick(queue)
        _until(lambda: _measured(http, "failing"), "the failed judgings were not recorded")
    errors = set(Measurement.objects.values_list("error_code", "value"))
    assert errors == {(failure_class, None)}
    failed = SourceInvocation.objects.filter(kind="judge", status="failed")
    assert set(failed.values_list("failure_class", flat=True)) == {failure_class}
    assert failed.count() == 2 * first  # one traced try per request, two tries each
    assert len(llm.batches) == 2
    assert _judge_requests(llm.requests) == []


def test_cancelling_the_experiment_cancels_its_provider_batch(
    llm: ScriptedLLM, live_server: Any, operator_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the web process cancels at the provider: it reads the endpoint's variables as workers do
    for name, value in _env(llm).items():
        if name != "CHUKWA_DB_NAME":
            monkeypatch.setenv(name, value)
    judge = _judge(attempts=3)
    queue = f"batchcancel-{os.getpid()}"
    llm.script_batches("in_progress")
    with (
        worker_process(queue, env=_env(llm), queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        assert http.post("/api/experiments/", json=_design("cancelled", judge)).status_code == 201
        _until(lambda: _waiting(http, "cancelled", 4), "the judgings did not wait")
        _tick(queue)
        _until(
            lambda: BatchRequest.objects.filter(status="submitted").exists(),
            "the batch was not sent",
        )
        state = http.get("/api/experiments/cancelled/").json()
        assert state["progress"]["judge_batches"] == 1
        cancelled = http.post("/api/experiments/cancelled/cancel/")
        assert cancelled.status_code in (200, 202), cancelled.text
        _until(lambda: _measured(http, "cancelled"), "the cancelled judgings were not recorded")
    batch_id = llm.batches[0]["id"]
    assert ("POST", f"/v1/batches/{batch_id}/cancel", 200) in llm.batch_calls
    assert llm.batches[0]["status"] == "cancelled"
    # a cancel is never tried again
    assert set(Measurement.objects.values_list("error_code", flat=True)) == {"batch_cancelled"}
    assert not BatchRequest.objects.filter(status__in=["pending", "submitted"]).exists()
    assert _judge_requests(llm.requests) == []


def test_the_reaper_measures_the_judgings_whose_batch_ended_when_the_kick_was_lost(
    llm: ScriptedLLM, live_server: Any, operator_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in _env(llm).items():  # this process polls the batch itself
        if name != "CHUKWA_DB_NAME":
            monkeypatch.setenv(name, value)
    judge = _judge()
    queue = f"batchlost-{os.getpid()}"
    with (
        worker_process(queue, env=_env(llm), queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        assert http.post("/api/experiments/", json=_design("lost", judge)).status_code == 201
        _until(lambda: _waiting(http, "lost", 4), "the judgings did not wait")
        # while the batch runs, the re-drive does not ask again (it would only find it waiting)
        assert measure_redrive() == [] and batch_answers_redrive() == []
        # the batch polled to its end without the poll's kick (as if its message were lost)
        assert len(batches.submit_pending()) == 1 and len(batches.poll_submitted()) == 1
        assert http.get("/api/experiments/lost/").json()["progress"]["measurements_done"] == 0
        current_app.send_task("worlds.reap_expired_attempts", queue=control_queue(queue))
        state = _until(lambda: _measured(http, "lost"), "the reaper did not measure them")
    assert state["progress"]["judges_waiting"] == 0
    assert Measurement.objects.filter(value=7.0).count() == 4
    assert _judge_requests(llm.requests) == []
