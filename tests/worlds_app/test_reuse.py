"""Reuse (docs/costs.md): an LLM call whose whole request equals a recorded succeeded call's is
answered from the record, nothing sent.

Every test runs worlds on real Celery workers against the scripted model over real HTTP, whose
every reply differs from the last (a counter): a request answered from a record instead of being
sent shows in what the model received, and in equal measurements where a live reply would differ.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from cognition_app.models import LlmCall, ModelPrice, SourceInvocation
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.experiment_results import export_rows
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import World
from worlds_app.telemetry import attempt_spans

API_KEY = "test-secret-key"
START = "2026-05-01T08:00:00+00:00"
SEED = 4242


def _scenario(model: str = "scripted-model") -> dict[str, Any]:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = model
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0.7, "max_tokens": 200}
    return {"hash": scenario_assemble(data=body)["scenario_hash"]}


class Counting:
    """Every reply differs from the last (its narration carries a counter); ``fail_first``
    replies fail (HTTP 500) or are rejected (not JSON) before the counter starts."""

    def __init__(self, fail_first: list[Reply | str] | None = None, delay_s: float = 0) -> None:
        self.n = 0
        self.failing = list(fail_first or [])
        self.delay_s = delay_s

    def __call__(self, request: dict[str, Any]) -> Reply | str:
        if self.failing:
            return self.failing.pop(0)
        self.n += 1
        patch = {"narration": "The ant waits" + "." * self.n, "effects": []}
        body = json.dumps({"kind": "final_patch", "tool_call": None, "patch": patch})
        return Reply(text=body, delay_s=self.delay_s)


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def workers(llm: ScriptedLLM) -> Iterator[str]:
    """Two worker processes on one queue: worlds (and an experiment's arms) run side by side."""
    queue = f"reuse-{os.getpid()}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }
    with (
        worker_process(f"{queue}-1", env=env, queue=queue),
        worker_process(f"{queue}-2", env=env, queue=queue),
        routed_to(queue),
    ):
        yield queue


def _price() -> None:
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="scripted-model",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        cached_input_per_million=Decimal("0.5"),
        valid_from=timezone.now() - timedelta(days=1),
    )


def _world(client: Any, slug: str, scenario: dict[str, Any], **extra: Any) -> None:
    body = {"slug": slug, "scenario_ref": scenario, "start_time": START, "seed": SEED, **extra}
    answer = client.post("/api/worlds/", body, format="json")
    assert answer.status_code == 201, answer.json()


def _run(client: Any, slug: str, turns: int) -> dict[str, Any]:
    answer = client.post(f"/api/worlds/{slug}/turns/", {"count": turns}, format="json")
    assert answer.status_code in (200, 201, 202), answer.json()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        world = client.get(f"/api/worlds/{slug}/").json()
        if world["current_turn"] >= turns or any(
            a["status"] == "failed" for a in world["recent_attempts"]
        ):
            return dict(world)
        time.sleep(0.2)
    raise AssertionError(f"world {slug} did not finish: {world}")


def _replies(slug: str) -> list[str]:
    """The world's generations' replies, turn by turn (the counter's, so each live one new)."""
    return list(
        LlmCall.objects.filter(invocation__world__slug=slug, invocation__kind="llm_generation")
        .order_by("invocation__attempted_turn", "invocation__seq")
        .values_list("raw_text", flat=True)
    )


def _live(**where: Any) -> Any:
    return SourceInvocation.objects.filter(
        kind="llm_generation", reused_from__isnull=True, replayed_from__isnull=True, **where
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_seeded_twin_with_reuse_sends_nothing_and_reuse_off_sends_everything(
    llm: ScriptedLLM, workers: str, operator_client: Any, operator_user: Any
) -> None:
    llm.reset()
    llm.route(Counting())
    _price()
    scenario = _scenario()
    _world(operator_client, "first", scenario)
    first = _run(operator_client, "first", 2)
    assert first["current_turn"] == 2, first
    sent = len(llm.requests)
    assert sent == 2  # one generation a turn

    _world(operator_client, "twin", scenario, reuse="exact")
    twin = _run(operator_client, "twin", 2)
    assert twin["current_turn"] == 2, twin
    assert (twin["reuse"], first["reuse"]) == ("exact", "off")  # a world's default: off
    assert len(llm.requests) == sent  # not one request more
    assert _replies("twin") == _replies("first")  # the counter's replies, not new ones
    originals = {str(i.pk) for i in _live(world__slug="first")}
    reused = list(SourceInvocation.objects.filter(world__slug="twin", kind="llm_generation"))
    assert len(reused) == 2 and all(str(i.reused_from) in originals for i in reused)
    calls = LlmCall.objects.filter(invocation__world__slug="twin")
    assert {c.cost for c in calls} == {Decimal(0)}
    assert all(c.prompt_tokens is None and c.tokens_reused for c in calls)
    paid = LlmCall.objects.filter(
        invocation__world__slug="first", invocation__kind="llm_generation"
    )
    cost = twin["cost"]
    assert cost["calls_reused"] == 2 and cost["tokens"]["total"] == 0
    assert cost["tokens_reused"] == sum(c.prompt_tokens + c.completion_tokens for c in paid)
    assert Decimal(cost["cost_saved"]) == sum(c.cost for c in paid) > 0
    assert Decimal(cost["total"]) == 0

    # shown where a call is read: the API's invocation and LLM call, their pages, the timeline
    one = reused[0]
    got = operator_client.get(f"/api/source-invocations/{one.pk}/").json()
    assert got["reused_from"] == str(one.reused_from)
    call = operator_client.get(f"/api/llm-calls/{one.llm_call.pk}/").json()
    assert call["reused_from"] == str(one.reused_from) and Decimal(call["cost_saved"]) > 0
    browser = Client()
    browser.force_login(operator_user)
    page = browser.get(f"/invocations/{one.pk}/").content.decode()
    assert "Reused from" in page and str(one.reused_from)[:8] in page
    attempt = browser.get(f"/attempts/{one.attempt_id}/").content.decode()
    assert "Reused from" in attempt
    # the OTel export: the generation's span is a cache hit naming the original
    (span,) = [
        span
        for span in attempt_spans(attempt_id=one.attempt_id)
        if span.attributes and span.attributes.get("chukwa.invocation.id") == str(one.pk)
    ]
    assert span.attributes is not None
    assert span.attributes["chukwa.cache_hit"] is True
    assert span.attributes["chukwa.reused_from"] == str(one.reused_from)
    assert span.attributes["chukwa.llm_call.cost_saved"] > 0

    _world(operator_client, "live", scenario, reuse="off")
    live = _run(operator_client, "live", 2)
    assert live["current_turn"] == 2, live
    assert len(llm.requests) == sent + 2  # off: every call sent
    assert live["cost"]["calls_reused"] == 0
    assert _replies("live") != _replies("first")


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_failed_or_rejected_call_is_never_reused_nor_a_call_to_another_model(
    llm: ScriptedLLM, workers: str, operator_client: Any
) -> None:
    # the first world's first request fails (HTTP 500, no retry): its attempt fails
    llm.reset()
    llm.route(Counting(fail_first=[Reply(status=500)]))
    scenario = _scenario()
    _world(operator_client, "broken", scenario, reuse="exact")
    broken = _run(operator_client, "broken", 1)
    assert broken["current_turn"] == 0
    assert len(llm.requests) == 1
    _world(operator_client, "after-failure", scenario, reuse="exact")
    assert _run(operator_client, "after-failure", 1)["current_turn"] == 1
    assert len(llm.requests) == 2  # sent: the failed call answered nothing
    assert llm.requests[0] == llm.requests[1]  # the very same request

    # a rejected reply (not JSON): the corrective retry sends a different request
    llm.reset()
    llm.route(Counting(fail_first=["not json at all"]))
    other_start = {"start_time": "2026-06-01T08:00:00+00:00"}
    _world(operator_client, "rejected", scenario, reuse="exact", **other_start)
    assert _run(operator_client, "rejected", 1)["current_turn"] == 1
    first_request = llm.requests[0]
    asked = len(llm.requests)
    assert asked == 2  # the rejected try and the corrective one
    _world(operator_client, "after-rejection", scenario, reuse="exact", **other_start)
    assert _run(operator_client, "after-rejection", 1)["current_turn"] == 1
    assert llm.requests[asked] == first_request  # sent again, not answered by the rejection
    assert len(llm.requests) == asked + 1  # its reply was accepted: no corrective retry

    # the same request to another model is its own request
    _world(operator_client, "other-model", _scenario("scripted-model-b"), reuse="exact")
    assert _run(operator_client, "other-model", 1)["current_turn"] == 1
    assert llm.requests[-1]["model"] == "scripted-model-b"
    assert not SourceInvocation.objects.filter(
        world__slug="other-model", reused_from__isnull=False
    ).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_an_identical_request_in_flight_is_awaited_not_sent_twice(
    llm: ScriptedLLM, workers: str, operator_client: Any
) -> None:
    llm.reset()
    llm.route(Counting(delay_s=1.5))
    scenario = _scenario()
    for slug in ("left", "right"):
        _world(operator_client, slug, scenario, reuse="exact")
    for slug in ("left", "right"):  # both queued at once, each on its own worker
        answer = operator_client.post(f"/api/worlds/{slug}/turns/", {"count": 2}, format="json")
        assert answer.status_code in (200, 201, 202), answer.json()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and set(
        World.objects.filter(slug__in=["left", "right"]).values_list("current_turn", flat=True)
    ) != {2}:
        time.sleep(0.2)
    assert _replies("left") == _replies("right")
    assert len(llm.requests) == 2  # each turn's request sent once, by one of the two
    assert SourceInvocation.objects.filter(reused_from__isnull=False).count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_when_the_call_in_flight_fails_the_waiting_one_sends_its_own(
    llm: ScriptedLLM, workers: str, operator_client: Any
) -> None:
    llm.reset()
    # the first request is answered slowly, with HTTP 500 (no retry policy: its attempt fails)
    llm.route(Counting(fail_first=[Reply(status=500, delay_s=1.5)]))
    scenario = _scenario()
    for slug in ("hare", "tortoise"):
        _world(operator_client, slug, scenario, reuse="exact")
    for slug in ("hare", "tortoise"):
        answer = operator_client.post(f"/api/worlds/{slug}/turns/", {"count": 1}, format="json")
        assert answer.status_code in (200, 201, 202), answer.json()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(llm.requests) < 2:
        time.sleep(0.2)
    while time.monotonic() < deadline and not World.objects.filter(current_turn=1).exists():
        time.sleep(0.2)
    time.sleep(1)  # nothing more may be sent
    turns = dict(World.objects.values_list("slug", "current_turn"))
    assert sorted(turns.values()) == [0, 1], turns  # one failed, the other went on
    assert len(llm.requests) == 2 and llm.requests[0] == llm.requests[1]
    assert llm.max_in_flight == 1  # the second waited for the first instead of going along
    assert not SourceInvocation.objects.filter(reused_from__isnull=False).exists()


def _metric() -> dict[str, str]:
    content = {
        "version": 1,
        "label": "narration_chars",
        "kind": "expression",
        "aggregate": "mean",
        "expression": "length(join('', patches[].narration))",
    }
    return {"hash": metric_put(content=content)["hash"]}


def _intervention(crumb: str) -> list[dict[str, Any]]:
    patch = {
        "narration": "Someone moves the crumb.",
        "effects": [{"op": "set_entity_state", "entity_id": "crumb", "state": crumb}],
    }
    return [{"turn": 2, "note": "the crumb moves", "patch": patch}]


def _wait(slug: str) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        state = experiment_get(slug=slug)
        progress = state["progress"]
        if state["status"] == "failed" or (
            state["status"] != "running"
            and progress["measurements_done"] == progress["measurements_planned"]
        ):
            return state
        time.sleep(0.3)
    raise AssertionError(f"experiment {slug} did not finish: {state}")


def _measured(slug: str, arm: str) -> list[tuple[Any, ...]]:
    _, rows = export_rows(slug=slug)
    return [(r["replicate"], r["turn"], r["value"]) for r in rows if r["arm"] == arm]


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_arms_share_their_first_turns_and_a_rerun_sends_only_the_changed_arm(
    llm: ScriptedLLM, workers: str, operator_client: Any
) -> None:
    llm.reset()
    llm.route(Counting())
    scenario = _scenario()
    design = {
        "slug": "shared",
        "arms": [
            {"label": "a", "scenario_ref": scenario},
            {"label": "b", "scenario_ref": scenario, "interventions": _intervention("gone.")},
        ],
        "replicates": 2,
        "turns": 3,
        "metrics": [_metric()],
        "seed": SEED,
        "start_time": START,
    }
    answer = operator_client.post("/api/experiments/", design, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["design"]["reuse"] == "exact"  # the default
    done = _wait("shared")
    assert done["status"] == "completed", done
    calls = LlmCall.objects.filter(
        invocation__world__experiment__slug="shared", invocation__kind="llm_generation"
    ).count()
    sent = len(llm.requests)
    # the arms of a replicate ask the same first turn: answered once
    assert sent < calls
    got = operator_client.get("/api/experiments/shared/").json()
    assert got["calls_reused"] == calls - sent >= design["replicates"]
    # single flight: no request was sent twice, though the arms ran side by side
    assert len({json.dumps(r, sort_keys=True) for r in llm.requests}) == sent
    assert got["tokens_reused"] > 0 and got["cost_saved"] is None  # no price: unknown

    # the same design again with arm b changed: only arm b's changed turns are sent
    again = copy.deepcopy(design)
    again["slug"] = "shared-again"
    again["arms"][1]["interventions"] = _intervention("eaten by a beetle.")
    # the estimate knows arm a is already recorded (its twins: same scenario, seed, start and
    # interventions) and arm b is not (its intervention differs)
    estimate = operator_client.post("/api/experiments/estimate/", again, format="json").json()
    recorded_a = LlmCall.objects.filter(
        invocation__world__experiment__slug="shared",
        invocation__world__arm="a",
        invocation__kind="llm_generation",
        invocation__attempt__status="committed",
    ).count()
    assert recorded_a > 0
    assert estimate["recorded"]["worlds"] == design["replicates"]
    assert estimate["recorded"]["turns"] == design["replicates"] * design["turns"]
    assert estimate["recorded"]["calls"] == recorded_a
    assert estimate["recorded"]["cost"] is None  # no price: unknown, never 0
    unseeded = {k: v for k, v in again.items() if k != "seed"}
    nothing = operator_client.post("/api/experiments/estimate/", unseeded, format="json").json()
    assert nothing["recorded"]["calls"] == 0 and "no seed" in nothing["recorded"]["basis"]
    unstarted = {k: v for k, v in again.items() if k != "start_time"}  # the worlds start now
    nothing = operator_client.post("/api/experiments/estimate/", unstarted, format="json").json()
    assert nothing["recorded"]["calls"] == 0 and "no start_time" in nothing["recorded"]["basis"]
    off_estimate = {**again, "reuse": "off"}
    nothing = operator_client.post("/api/experiments/estimate/", off_estimate, format="json")
    assert nothing.json()["recorded"]["calls"] == 0
    assert 'reuse "off"' in nothing.json()["recorded"]["basis"]
    answer = operator_client.post("/api/experiments/", again, format="json")
    assert answer.status_code == 201, answer.json()
    redone = _wait("shared-again")
    assert redone["status"] == "completed", redone
    new = len(llm.requests) - sent
    assert new > 0
    assert not _live(world__experiment__slug="shared-again", world__arm="a").exists()
    # what the estimate said was recorded is what was answered from the record
    assert (
        SourceInvocation.objects.filter(
            world__experiment__slug="shared-again",
            world__arm="a",
            kind="llm_generation",
            reused_from__isnull=False,
        ).count()
        == estimate["recorded"]["calls"]
    )
    assert _live(world__experiment__slug="shared-again", world__arm="b").count() == new
    assert _measured("shared-again", "a") == _measured("shared", "a")
    assert _measured("shared-again", "b") != _measured("shared", "b")

    # reuse off: every call sent
    off = {**copy.deepcopy(design), "slug": "shared-off", "reuse": "off"}
    answer = operator_client.post("/api/experiments/", off, format="json")
    assert answer.status_code == 201, answer.json()
    assert _wait("shared-off")["status"] == "completed"
    before = sent + new
    assert len(llm.requests) - before == calls
    assert experiment_get(slug="shared-off")["calls_reused"] == 0
    assert set(
        World.objects.filter(experiment__slug="shared-off").values_list("reuse", flat=True)
    ) == {"off"}


@pytest.mark.django_db
def test_a_bad_reuse_is_a_400_naming_the_field_and_writes_nothing(operator_client: Any) -> None:
    scenario = _scenario()
    for value in ("sometimes", "", None, 1, ["exact"]):
        body = {"slug": "w", "scenario_ref": scenario, "reuse": value}
        answer = operator_client.post("/api/worlds/", body, format="json")
        assert answer.status_code == 400, answer.json()
        error = answer.json()["error"]
        assert (error["code"], error["details"]["field"]) == ("invalid_reuse", "reuse"), error
        design = {
            "slug": "e",
            "arms": [{"label": "a", "scenario_ref": scenario}],
            "replicates": 1,
            "turns": 1,
            "metrics": [_metric()],
            "reuse": value,
        }
        for path in ("/api/experiments/", "/api/experiments/estimate/"):
            answer = operator_client.post(path, design, format="json")
            assert answer.status_code == 400, answer.json()
            error = answer.json()["error"]
            assert (error["code"], error["details"]["field"]) == ("invalid_reuse", "reuse")
    assert not World.objects.exists()
    world = {"slug": "w", "scenario_ref": scenario}
    assert operator_client.post("/api/worlds/", world, format="json").status_code == 201
    assert World.objects.get(slug="w").reuse == "off"  # a world's default
