"""The time an experiment takes (docs/experiments.md, "Time estimate"), over real HTTP: before any
call of its model has been recorded the estimate's ``seconds`` is null and its basis says why;
once turns have run on the scripted model (a real HTTP server answering after a delay), it is
the observed median latency times the calls each world makes in sequence, shared over the
concurrency the deployment allows, with that basis named; ``run_experiment --estimate`` prints
it; the live ETA of a running experiment comes from the same model."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from chukwa_core.experiment_time import duration_text, wall_seconds
from cognition_app.models import LlmCall
from scenarios_app.models import ResponseSource
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import run_turn
from tests.surfaces.api.test_experiment_power import ESTIMATE, http
from tests.worlds_app.test_experiment_budget import (
    API_KEY,
    MAX_TOKENS,
    USAGE,
    _design,
    _final,
    _scenario,
)
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import Experiment, TurnAttempt, World
from worlds_app.services import turn_attempt_run
from worlds_app.services.experiments import experiment_create
from worlds_app.services.worlds import parse_start_time, world_create, world_start

DELAY = 0.3  # every scripted answer waits this long before it is sent


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def model_env(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLM:
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", API_KEY)
    monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "1")
    llm.route(lambda request: Reply(text=_final("The ant waits."), usage=USAGE, delay_s=DELAY))
    return llm


def _median_latency() -> tuple[float, int]:
    """The scripted model's recorded successful generations (the conformance check, short by
    design, is not one): their median duration, and how many."""
    rows = LlmCall.objects.filter(
        requested_model="scripted-model",
        status="succeeded",
        ended_at__isnull=False,
        invocation__kind="llm_generation",
    ).values_list("started_at", "ended_at")
    durations = [(ended - started).total_seconds() for started, ended in rows]
    return statistics.median(durations), len(durations)


def _workflow(scenario: str) -> str:
    """The ant's workflow hash in a stored scenario."""
    snapshot = world_start(scenario, {"hash": scenario}, parse_start_time(None), None).snapshot
    return str(snapshot["cognition_profiles"]["ant"]["workflow_hash"])


def _whole_up(answer: int | None, seconds: float) -> bool:
    """``answer`` is ``seconds`` rounded up (summed in another order: within float noise)."""
    return answer is not None and math.ceil(seconds - 1e-6) <= answer <= math.ceil(seconds + 1e-6)


def test_the_wall_time_model() -> None:
    # one world: its turns in sequence, whatever the concurrency
    assert wall_seconds([30.0], 4) == 30.0
    # three worlds of 30 s: one at a time 90 s, two at a time 45 s, three or more 30 s
    assert [wall_seconds([30.0] * 3, p) for p in (1, 2, 3, 8)] == [90.0, 45.0, 30.0, 30.0]
    # a long world bounds the time however wide the rest run
    assert wall_seconds([100.0, 10.0, 10.0], 3) == 100.0
    assert wall_seconds([], 1) == 0.0
    with pytest.raises(ValueError, match="at least 1"):
        wall_seconds([1.0], 0)
    assert [duration_text(s) for s in (47, 845, 7380)] == ["47 s", "14 min 05 s", "2 h 03 min"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_seconds_is_null_before_a_call_then_the_observed_median_over_the_concurrency(
    live_server: Any,
    operator_user: User,
    model_env: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    scenario = _scenario()
    design = _design("timed", scenario)  # 2 arms by 3 replicates by 3 turns, one agent
    path = tmp_path / "design.json"
    path.write_text(json.dumps(design))
    with http(live_server, operator_user) as client:
        before = client.post(ESTIMATE, json=design)
        assert before.status_code == 200, before.text
        assert before.json()["seconds"] is None
        basis = before.json()["seconds_basis"]
        assert basis.startswith(
            "no call of scripted-model (CHUKWA_LLM_BASE_URL) has been recorded yet and its "
            "source declares no latency_ms"
        )
        out = StringIO()
        call_command("run_experiment", str(path), "--estimate", stdout=out)
        assert f"time: unknown ({basis})" in out.getvalue()

        # three turns of a world on the same source: calls recorded with their latency
        world_create(data={"slug": "stopwatch", "scenario_ref": {"hash": scenario}})
        for _ in range(3):
            assert run_turn("stopwatch").status == "committed"
        median, observed = _median_latency()
        assert median >= DELAY and observed >= 3

        after = client.post(ESTIMATE, json=design).json()
        # 6 worlds of 3 calls each (one per turn, in sequence), one call at a time
        assert _whole_up(after["seconds"], 18 * median)
        assert after["seconds"] >= 18 * DELAY
        assert after["seconds_basis"].startswith("observed median ")
        assert f"over {observed} calls of scripted-model" in after["seconds_basis"]
        assert "1 at a time (CHUKWA_LLM_MAX_CONCURRENCY=1)" in after["seconds_basis"]
        assert "18 calls over 6 worlds, each world's turns in sequence" in after["seconds_basis"]
        out = StringIO()
        call_command("run_experiment", str(path), "--estimate", stdout=out)
        printed = f"time: {duration_text(after['seconds'])} ({after['seconds_basis']})"
        assert printed in out.getvalue()

        # four at a time: the work shared over four slots (18 / 4 calls), longer than a world
        monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "4")
        four = client.post(ESTIMATE, json=design).json()
        assert _whole_up(four["seconds"], 4.5 * median)
        assert "4 at a time (CHUKWA_LLM_MAX_CONCURRENCY=4)" in four["seconds_basis"]
        # no endpoint bound: every world at once, so one world's three turns in sequence
        monkeypatch.delenv("CHUKWA_LLM_MAX_CONCURRENCY")
        wide = client.post(ESTIMATE, json=design).json()
        assert _whole_up(wide["seconds"], 3 * median)
        assert "6 at a time (6 worlds)" in wide["seconds_basis"]
        # a bad bound is named, not guessed around
        monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "many")
        bad = client.post(ESTIMATE, json=design).json()
        assert bad["seconds"] is None and "CHUKWA_LLM_MAX_CONCURRENCY" in bad["seconds_basis"]
    assert not Experiment.objects.exists()
    assert list(World.objects.values_list("slug", flat=True)) == ["stopwatch"]


@pytest.mark.django_db
@pytest.mark.integration
def test_the_live_eta_uses_the_same_model(
    model_env: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _scenario()
    experiment_create(data=_design("clocked", scenario), created_by="op")
    assert experiment_get(slug="clocked")["progress"]["eta_seconds"] is None  # nothing yet
    first = (
        TurnAttempt.objects.filter(world__slug="clocked--control--1", status="queued")
        .order_by("seq")
        .first()
    )
    assert first is not None
    assert turn_attempt_run(attempt_id=str(first.pk), owner="test") == "committed"
    median, _ = _median_latency()
    calls = LlmCall.objects.filter(
        invocation__world__experiment__slug="clocked", invocation__kind="llm_generation"
    ).count()
    assert calls >= 1
    # 17 turns left (one world has two, five have three) at ``calls`` per turn, one at a time
    state = experiment_get(slug="clocked")
    assert state["progress"]["turns_committed"] == 1
    assert _whole_up(state["progress"]["eta_seconds"], 17 * calls * median)
    # every world at once: the longest world (three turns) bounds it
    monkeypatch.delenv("CHUKWA_LLM_MAX_CONCURRENCY")
    eta = experiment_get(slug="clocked")["progress"]["eta_seconds"]
    assert _whole_up(eta, 3 * calls * median)


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_the_estimate_counts_the_generations_a_turn_was_seen_to_make(
    live_server: Any, operator_user: User, model_env: ScriptedLLM
) -> None:
    """A turn that takes two generations (the first reply refused, the second valid) counts
    twice: the estimate uses the generations per agent turn observed for the workflow's node,
    and for an arm whose variant never ran, what the other arms' same node was seen to make
    (an estimate that assumed one call per turn said 3 minutes for a run whose ETA was 17)."""
    sent = iter(range(1_000_000))
    model_env.route(
        lambda request: Reply(
            text="not a patch" if next(sent) % 2 == 0 else _final("The ant waits."),
            usage=USAGE,
            delay_s=DELAY,
        )
    )
    scenario = _scenario()
    variant = _scenario(max_tokens=MAX_TOKENS + 1)  # another source, so another workflow
    world_create(data={"slug": "stopwatch", "scenario_ref": {"hash": scenario}})
    for _ in range(3):
        assert run_turn("stopwatch").status == "committed"
    generations = LlmCall.objects.filter(
        invocation__world__slug="stopwatch", invocation__kind="llm_generation"
    ).count()
    assert generations == 6  # two per turn
    median, _ = _median_latency()
    design = {
        **_design("doubled", scenario),
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "variant", "scenario_ref": {"hash": variant}},
        ],
    }
    with http(live_server, operator_user) as client:
        answer = client.post(ESTIMATE, json=design).json()
    basis = answer["seconds_basis"]
    # 6 worlds by 3 turns by 2 generations, one at a time
    assert "36 calls over 6 worlds" in basis, basis
    control, varied = (_workflow(h) for h in (scenario, variant))
    assert (
        f"generations per agent turn as observed: ant/act (workflow {control[:8]}) 2 over 3 turns"
    ) in basis
    assert (
        "for a variant not run yet, as observed in the other arms: "
        f"ant/act (workflow {varied[:8]}) 2"
    ) in basis
    assert _whole_up(answer["seconds"], 36 * median)


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_declared_latency_stands_in_until_calls_are_observed(
    live_server: Any, operator_user: User, model_env: ScriptedLLM
) -> None:
    # a source that says what a call takes (2 s), on a model never called here
    scenario = _scenario(model="declared-model", latency_ms=2000)
    design = _design("declared", scenario)
    with http(live_server, operator_user) as client:
        answer = client.post(ESTIMATE, json=design).json()
        assert answer["seconds"] == 36  # 6 worlds by 3 calls of 2 s, one at a time
        assert answer["seconds_basis"].startswith(
            "declared latency_ms 2000 of declared-model (no call of it recorded yet); "
            "1 at a time (CHUKWA_LLM_MAX_CONCURRENCY=1)"
        )
        # once calls are observed, they count instead
        world_create(data={"slug": "observed", "scenario_ref": {"hash": scenario}})
        assert run_turn("observed").status == "committed"
        observed = client.post(ESTIMATE, json=design).json()
        median = statistics.median(
            (ended - started).total_seconds()
            for started, ended in LlmCall.objects.filter(
                requested_model="declared-model",
                status="succeeded",
                invocation__kind="llm_generation",
            ).values_list("started_at", "ended_at")
        )
        assert observed["seconds_basis"].startswith("observed median ")
        assert "of declared-model" in observed["seconds_basis"]
        assert _whole_up(observed["seconds"], 18 * median)
        assert observed["seconds"] < 36  # the scripted model answers in 0.3 s, not 2


@pytest.mark.django_db
@pytest.mark.parametrize("bad", [0, -5, 600_001, 1.5, "2000", True])
def test_a_bad_declared_latency_is_refused_naming_the_field(
    operator_client: APIClient, bad: object
) -> None:
    content = {
        "version": 1,
        "label": "chat",
        "interface": {
            "name": "llm_chat_completions",
            "model": "m",
            "base_url_env": "CHUKWA_LLM_BASE_URL",
            "schema_delivery": "response_format",
            "timeout_ms": 60000,
            "latency_ms": bad,
        },
    }
    answer = operator_client.post("/api/response-sources/", {"content": content}, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["details"]["field"] == "content.interface.latency_ms"
    assert "1…600000 (milliseconds)" in answer.json()["error"]["message"]
    assert not ResponseSource.objects.exists()
    good = {**content, "interface": {**content["interface"], "latency_ms": 1500}}
    assert operator_client.post(
        "/api/response-sources/", {"content": good}, format="json"
    ).status_code in (200, 201)
