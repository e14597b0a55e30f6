"""Re-running and branching experiments (docs/experiments.md, "Replaying an experiment" and
"Experiments from a branch").

``replay_from: {"experiment", "mode": "replay_strict"}`` pairs each new world with the old
world of the same arm and replicate: run on a worker against a scripted model whose every reply
differs from the last (a counter), the strict replay makes no model request at all and
reproduces every measurement, judges' scores included. ``branch_from`` starts every world at a
committed turn of another world, and the experiment's turns, progress and baseline follow it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest
from django.db import connection

from scenarios_app.services import metric_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.experiment_results import experiment_results, export_rows
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import Experiment, Turn, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, world_create
from worlds_app.services.experiments import experiment_create

API_KEY = "test-secret-key"
JUDGE_SYSTEM = "Score how restless the ant was this turn."


def _scenario() -> str:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0, "max_tokens": 200}
    return str(scenario_assemble(data=body)["scenario_hash"])


def _metrics() -> list[dict[str, str]]:
    source = {
        "inline": {
            "version": 1,
            "label": "judge_chat",
            "interface": {
                "name": "llm_chat_completions",
                "model": "scripted-model",
                "base_url_env": "CHUKWA_LLM_BASE_URL",
                "api_key_env": "CHUKWA_LLM_API_KEY",
                "schema_delivery": "response_format",
                "timeout_ms": 30000,
                "params": {"max_tokens": 100},
            },
        }
    }
    judge = metric_put(
        content={
            "version": 1,
            "label": "restless",
            "kind": "llm_judge",
            "aggregate": "mean",
            "source": source,
            "system": JUDGE_SYSTEM,
            "user_template": "{{turn.patches}}",
            "scale": {"min": 0, "max": 10},
        }
    )["hash"]
    narration = metric_put(
        content={
            "version": 1,
            "label": "narration_chars",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "length(join('', patches[].narration))",
        }
    )["hash"]
    return [{"hash": judge}, {"hash": narration}]


class Counting:
    """Every reply differs from the last: an agent's narration and a judge's score carry a
    counter, so a world run live twice never measures the same."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        self.n += 1
        if request["messages"][0]["content"] == JUDGE_SYSTEM:
            score = {"score": self.n % 11, "rationale": f"reply {self.n}"}
            return Reply(text=json.dumps(score))
        patch = {"narration": "The ant waits" + "." * self.n, "effects": []}
        return Reply(text=json.dumps({"kind": "final_patch", "tool_call": None, "patch": patch}))


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def _wait(slug: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
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


def _failures(slug: str) -> list[tuple[str, str, str]]:
    return list(
        TurnAttempt.objects.filter(world__experiment__slug=slug, status="failed").values_list(
            "world__slug", "failure_step", "failure_reason"
        )
    )


def _measured(slug: str) -> list[tuple[Any, ...]]:
    _, rows = export_rows(slug=slug)
    return [(r["arm"], r["replicate"], r["turn"], r["metric_label"], r["value"]) for r in rows]


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_strict_replay_of_an_experiment_asks_no_model_and_reproduces_every_measurement(
    llm: ScriptedLLM,
) -> None:
    llm.route(Counting())
    design = {
        "slug": "first",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": _scenario()}},
            {"label": "other", "scenario_ref": {"hash": _scenario()}},
        ],
        "replicates": 2,
        "turns": 2,
        "metrics": _metrics(),
        # every call of the first run sent (its identical arms would otherwise share replies):
        # the replay is what this test is about
        "reuse": "off",
    }
    queue = f"replay-{os.getpid()}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }
    with worker_process(queue, env=env, queue=queue), routed_to(queue):
        experiment_create(data=design)
        first = _wait("first")
        assert first["status"] == "completed", first
        asked = len(llm.requests)
        # 4 worlds by 2 turns by one agent, and the judge on 4 worlds by 3 turns
        assert asked == 8 + 12
        measured = _measured("first")
        assert len(measured) == 4 * 3 * 2 and all(row[4] is not None for row in measured)

        experiment_create(
            data={
                **design,
                "slug": "again",
                "replay_from": {"experiment": "first", "mode": "replay_strict"},
            }
        )
        again = _wait("again")
    assert again["status"] == "completed", _failures("again")
    assert len(llm.requests) == asked  # not one model request (nor a probe) more
    assert _measured("again") == measured
    assert again["design"].seed == first["design"].seed
    pairs = World.objects.filter(experiment__slug="again").values_list(
        "slug", "replay_source__slug", "seed"
    )
    seeds = dict(World.objects.filter(experiment__slug="first").values_list("slug", "seed"))
    for slug, source, seed in pairs:
        assert source == slug.replace("again--", "first--") and seeds[source] == seed
    ours = json.loads(json.dumps(asdict(experiment_results(slug="again"))["results"]))
    theirs = json.dumps(asdict(experiment_results(slug="first"))["results"])
    theirs = theirs.replace("first--", "again--")
    assert ours == json.loads(theirs)  # the same numbers; only the worlds' names differ


@pytest.mark.django_db
def test_a_replay_needs_a_pair_for_every_world_and_keeps_the_seed(operator_client: Any) -> None:
    scenario = str(scenario_assemble(data=fixture_body("ant_on_plate_rules"))["scenario_hash"])
    metric = _metrics()[1]
    design = {
        "slug": "small",
        "arms": [{"label": "only", "scenario_ref": {"hash": scenario}}],
        "replicates": 1,
        "turns": 1,
        "metrics": [metric],
    }
    assert operator_client.post("/api/experiments/", design, format="json").status_code == 201
    for change, code, field, words in (
        ({"replicates": 2}, "invalid_replay_from", "replay_from.experiment", "replicate 2"),
        ({"seed": 5}, "invalid_seed", "seed", "leave seed out"),
        (
            {"replay_from": {"experiment": "nothing", "mode": "replay_strict"}},
            "invalid_replay_from",
            "replay_from.experiment",
            "no experiment",
        ),
        (
            {"replay_from": {"experiment": "small", "mode": "replay"}},
            "invalid_replay_from",
            "replay_from.mode",
            "replay_strict",
        ),
    ):
        body = {
            **design,
            "slug": "redo",
            "replay_from": {"experiment": "small", "mode": "replay_strict"},
            **change,
        }
        answer = operator_client.post("/api/experiments/", body, format="json")
        assert answer.status_code == 400, answer.json()
        error = answer.json()["error"]
        assert (error["code"], error["details"]["field"]) == (code, field), error
        assert words in error["message"], error
    assert not Experiment.objects.filter(slug="redo").exists()
    assert World.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_an_experiment_from_a_branch_runs_its_turns_after_the_branch_point(
    celery_worker: str,
) -> None:
    scenario = str(scenario_assemble(data=fixture_body("ant_on_plate_rules"))["scenario_hash"])
    world_create(data={"slug": "trunk", "scenario_ref": {"hash": scenario}})
    turn_attempt_enqueue(slug="trunk", count=2)  # run by the worker
    deadline = time.monotonic() + 60
    while World.objects.get(slug="trunk").current_turn < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    metric = metric_put(
        content={
            "version": 1,
            "label": "turn_number",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    design = {
        "slug": "limb",
        "arms": [
            {"label": "a", "scenario_ref": {"hash": scenario}},
            {"label": "b", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 2,
        "turns": 2,
        "metrics": [{"hash": metric}],
        "branch_from": {"world": "trunk", "turn": 2},
    }
    # an intervention's turn is the world's own: 3 or 4 here, not 1
    bad = json.loads(json.dumps(design))
    bad["arms"][1]["interventions"] = [{"turn": 1, "patch": {"narration": "x", "effects": []}}]
    with pytest.raises(Exception, match="invalid_turn"):
        experiment_create(data=bad)
    experiment_create(data=design)
    state = _wait("limb")
    assert state["status"] == "completed", state
    assert state["progress"]["turns_committed"] == state["progress"]["turns_planned"] == 8
    worlds = World.objects.filter(experiment__slug="limb")
    assert {(w.branched_from_slug, w.branched_from_turn, w.current_turn) for w in worlds} == {
        ("trunk", 2, 4)
    }
    assert set(Turn.objects.filter(world__in=worlds).values_list("number", flat=True)) == {2, 3, 4}
    (result,) = experiment_results(slug="limb").results
    arm = result.arms[0]
    assert [p.turn for p in arm.per_turn] == [2, 3, 4]
    assert arm.mean == 3.5  # turns 3 and 4; the branch point is the baseline
