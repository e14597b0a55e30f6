"""Experiments over real HTTP with a real worker (docs/experiments.md): a design is validated
before anything is written; arms by replicates worlds with paired seeds run their turns on the
worker and are measured as turns commit; the results on constructed data (control always 0,
treatment always 1, 3 pairs) are scipy's own answer (difference 1, CI [1, 1], exact p 0.25);
the export's rows are every measurement; cancelling stops what has not started."""

from __future__ import annotations

import csv
import io
import json
import time
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from scipy import stats

from chukwa_core.seeds import experiment_seed, replicate_seed
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import Experiment, Intervention, TurnAttempt, World
from worlds_app.services.experiments import experiment_cancel, experiment_create

SCENARIO = "ant_on_plate_rules"
# 1 on every turn of a treated world, 0 on a control one: constructed data with a known answer
TREATED = "contains(world, '--treated--')"


def _metric() -> str:
    return metric_put(
        content={
            "version": 1,
            "label": "treated",
            "kind": "expression",
            "aggregate": "mean",
            "expression": TREATED,
        }
    )["hash"]


def _design(scenario: str, metric: str, **extra: Any) -> dict[str, Any]:
    return {
        "slug": "trial",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {
                "label": "treated",
                "scenario_ref": {"hash": scenario},
                "interventions": [
                    {
                        "turn": 1,
                        "patch": {
                            "narration": "A breeze.",
                            "effects": [
                                {
                                    "op": "set_environment_content",
                                    "environment_label": "kitchen_plate",
                                    "content": "A plate, in a breeze.",
                                }
                            ],
                        },
                        "note": "the treatment",
                    }
                ],
            },
        ],
        "replicates": 3,
        "turns": 2,
        "metrics": [{"hash": metric}],
        **extra,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"replicates": 0}, "invalid_replicates", "replicates"),
        ({"turns": 0}, "invalid_turns", "turns"),
        ({"turns": 101}, "invalid_turns", "turns"),
        ({"replicates": 5001}, "too_many_worlds", "replicates"),
        ({"control": "nobody"}, "invalid_control", "control"),
        ({"metrics": [{"label": "nothing"}]}, "unresolved_reference", "metrics[0]"),
        ({"slug": "Bad Slug"}, "invalid_slug", "slug"),
        ({"seed": -1}, "invalid_seed", "seed"),
    ],
)
def test_a_bad_design_is_refused_naming_the_field_and_writes_nothing(
    operator_client: APIClient, change: dict[str, Any], code: str, field: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    body = {**_design(scenario, _metric()), **change}
    answer = operator_client.post("/api/experiments/", body, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert not Experiment.objects.exists() and not World.objects.exists()


@pytest.mark.django_db
def test_arm_errors_name_the_arm(operator_client: APIClient) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    design = _design(scenario, _metric())
    twice = json.loads(json.dumps(design))
    twice["arms"][1]["label"] = "control"
    unknown = json.loads(json.dumps(design))
    unknown["arms"][1]["scenario_ref"] = {"hash": "0" * 64}
    bad_turn = json.loads(json.dumps(design))
    bad_turn["arms"][1]["interventions"][0]["turn"] = 3
    inline = json.loads(json.dumps(design))
    inline["arms"][0]["scenario_ref"] = {"data": {}}
    for body, code, field in (
        (twice, "duplicate_arm", "arms[1].label"),
        (unknown, "unresolved_reference", "arms[1].scenario_ref"),
        (bad_turn, "invalid_turn", "arms[1].interventions[0].turn"),
        (inline, "invalid_scenario_ref", "arms[0].scenario_ref"),
    ):
        answer = operator_client.post("/api/experiments/", body, format="json")
        assert answer.status_code == 400, answer.json()
        error = answer.json()["error"]
        assert (error["code"], error["details"]["field"]) == (code, field), error
    assert not Experiment.objects.exists() and not World.objects.exists()


def _client(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_an_experiment_runs_paired_worlds_and_answers_with_its_uncertainty(
    live_server: Any, operator_user: User, reader_user: User, celery_worker: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    metric = _metric()
    with _client(live_server, operator_user) as http:
        made = http.post("/api/experiments/", json=_design(scenario, metric))
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["design"]["control"] == "control"
        assert body["design"]["seed"] == experiment_seed("trial")
        assert [w["slug"] for w in body["worlds"]] == [
            f"trial--{arm}--{i}" for arm in ("control", "treated") for i in (1, 2, 3)
        ]
        # paired: replicate i has the same seed in every arm, another seed than replicate j
        seeds = {
            (w.arm, w.replicate): w.seed for w in World.objects.filter(experiment__slug="trial")
        }
        for i in (1, 2, 3):
            assert (
                seeds[("control", i)]
                == seeds[("treated", i)]
                == replicate_seed(body["design"]["seed"], i)
            )
        assert len({seeds[("control", i)] for i in (1, 2, 3)}) == 3
        read = http.get("/api/worlds/trial--treated--2/").json()
        assert (read["experiment"], read["arm"], read["replicate"]) == ("trial", "treated", 2)
        listed = {w["slug"]: w for w in http.get("/api/worlds/").json()["results"]}
        assert listed["trial--control--3"]["replicate"] == 3
        assert Intervention.objects.filter(world__arm="treated").count() == 3
        assert not Intervention.objects.filter(world__arm="control").exists()

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            state = http.get("/api/experiments/trial/").json()
            progress = state["progress"]
            if state["status"] != "running" and (
                progress["measurements_done"] == progress["measurements_planned"]
            ):
                break
            time.sleep(0.3)
        failures = list(
            TurnAttempt.objects.filter(world__experiment__slug="trial")
            .exclude(status="committed")
            .values_list("world__slug", "status", "failure_step", "failure_reason")
        )
        assert state["status"] == "completed", [f for f in failures if f[1] == "failed"]
        assert progress == {
            "worlds": 6,
            "turns_committed": 12,
            "turns_planned": 12,
            "measurements_done": 18,
            "measurements_planned": 18,
            "eta_seconds": None,
            "judges_waiting": 0,
            "judge_batches": 0,
        }
        assert state["failed_worlds"] == [] and state["finished_at"] is not None
        # every treated world's turn 1 applied its intervention
        assert not Intervention.objects.filter(world__arm="treated", consumed_by=None).exists()

        results = http.get("/api/experiments/trial/results/").json()
        (treated_metric,) = results["results"]
        arms = {a["arm"]: a for a in treated_metric["arms"]}
        assert (arms["control"]["mean"], arms["treated"]["mean"]) == (0.0, 1.0)
        assert arms["control"]["n"] == arms["treated"]["n"] == 3
        assert [p["mean"] for p in arms["treated"]["per_turn"]] == [1.0, 1.0, 1.0]
        (effect,) = treated_metric["effects"]
        # 3 agreeing pairs: no interval from no variation, and a p that cannot reach 0.05
        assert (effect["difference"], effect["ci_low"], effect["ci_high"]) == (1.0, None, None)
        assert effect["ci_status"] == "uninformative"
        assert effect["can_reach_significance"] is False and "6 pairs" in effect["note"]
        assert treated_metric["metric"]["type"] == "continuous"  # a mean of booleans
        assert (treated_metric["metric"]["range_low"], treated_metric["metric"]["range_high"]) == (
            0.0,
            1.0,
        )
        own = stats.permutation_test(
            (np.zeros(3), np.ones(3)),
            lambda x, y, axis: np.mean(y - x, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=np.inf,
        )
        assert effect["p_value"] == pytest.approx(own.pvalue) == pytest.approx(0.25)
        assert effect["p_exact"] and "exact" in effect["p_method"]
        assert "paired t" in effect["ci_method"] and effect["p_holm"] == effect["p_value"]

        exported = http.get("/api/experiments/trial/measurements.csv")
        assert exported.status_code == 200
        assert exported.headers["content-type"].startswith("text/csv")
        # read as a notebook reads it (docs/experiments.md, "Export to a notebook")
        frame = pd.read_csv(io.StringIO(exported.text))
        assert list(frame.columns) == [
            "arm",
            "replicate",
            "world",
            "turn",
            "metric_label",
            "metric_hash",
            "value",
            "error_code",
            "subject",
        ]
        assert len(frame) == 18 and frame["error_code"].isna().all()
        per_world = frame[frame.turn >= 1].groupby(["arm", "replicate"]).value.mean().unstack(0)
        assert per_world.to_dict() == {
            "control": {1: 0.0, 2: 0.0, 3: 0.0},
            "treated": {1: 1.0, 2: 1.0, 3: 1.0},
        }
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert {(r["arm"], r["value"]) for r in rows} == {("control", "0.0"), ("treated", "1.0")}
        lines = http.get("/api/experiments/trial/measurements.jsonl").text.splitlines()
        assert len(lines) == 18 and json.loads(lines[0])["metric_label"] == "treated"

        # a measure thought of after the run: every committed turn is measured with it
        acted = metric_put(
            content={
                "version": 1,
                "label": "acted",
                "kind": "expression",
                "aggregate": "mean",
                "expression": "length(patches) > `0`",
            }
        )["hash"]
        later = http.post("/api/experiments/trial/metrics/", json={"metrics": [{"hash": acted}]})
        assert later.status_code == 202, later.text
        assert later.json()["progress"]["measurements_planned"] == 36
        deadline = time.monotonic() + 60
        while http.get("/api/experiments/trial/").json()["progress"]["measurements_done"] < 36:
            assert time.monotonic() < deadline, "the added metric was not measured in 60 s"
            time.sleep(0.3)
        labels = [
            r["metric"]["label"]
            for r in http.get("/api/experiments/trial/results/").json()["results"]
        ]
        assert labels == ["treated", "acted"]

        # one more replicate in every arm, seeded as replicate 4; measured like the others
        more = http.post("/api/experiments/trial/replicates/", json={"count": 1})
        assert more.status_code == 200, more.text
        assert more.json()["design"]["replicates"] == 4 and more.json()["status"] == "running"
        fourth = World.objects.get(slug="trial--treated--4")
        assert fourth.seed == replicate_seed(body["design"]["seed"], 4)
        assert World.objects.get(slug="trial--control--4").seed == fourth.seed
        deadline = time.monotonic() + 90
        while True:
            state = http.get("/api/experiments/trial/").json()
            if state["status"] != "running" and state["progress"]["measurements_done"] == 48:
                break
            assert time.monotonic() < deadline, state["progress"]
            time.sleep(0.3)
        assert state["status"] == "completed" and state["progress"]["worlds"] == 8
        (effect,) = http.get("/api/experiments/trial/results/").json()["results"][0]["effects"]
        assert effect["n_pairs"] == 4 and effect["p_value"] == pytest.approx(0.125)
        bad = http.post("/api/experiments/trial/replicates/", json={"count": 0})
        assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "count"

        # readers read, but cannot create or cancel
        with _client(live_server, reader_user) as reader:
            assert reader.get("/api/experiments/").json()["results"][0]["status"] == "completed"
            assert reader.post("/api/experiments/trial/cancel/").status_code == 403
            again = reader.post(
                "/api/experiments/", json={**_design(scenario, metric), "slug": "x"}
            )
            assert again.status_code == 403


@pytest.mark.django_db
def test_cancelling_stops_what_has_not_started(operator_client: APIClient) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    made = operator_client.post("/api/experiments/", _design(scenario, _metric()), format="json")
    assert made.status_code == 201, made.json()
    cancelled = operator_client.post("/api/experiments/trial/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert not TurnAttempt.objects.filter(world__experiment__slug="trial", status="queued").exists()
    assert (
        TurnAttempt.objects.filter(world__experiment__slug="trial", status="cancelled").count()
        == 12
    )
    assert operator_client.post("/api/experiments/nope/cancel/").status_code == 404


@pytest.mark.django_db
def test_progress_has_no_eta_before_a_turn_commits_or_once_cancelled() -> None:
    """The ETA's model (the estimate's, tests/surfaces/api/test_experiment_time.py) needs a
    committed turn and a running experiment."""
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    experiment_create(data=_design(scenario, _metric()), created_by="op")  # 6 worlds, 12 turns
    assert experiment_get(slug="trial")["progress"]["eta_seconds"] is None  # nothing committed
    experiment_cancel(slug="trial")
    assert experiment_get(slug="trial")["progress"]["eta_seconds"] is None


def test_the_api_input_declares_exactly_the_designs_fields() -> None:
    """A design's fields are listed once (chukwa_core.experiment_design); the API's input
    serializer, which only checks shape, declares the same ones, required as they are."""
    from chukwa_core.experiment_design import INPUT_OPTIONAL, INPUT_REQUIRED
    from surfaces.api.experiments import ExperimentInputSerializer

    fields = ExperimentInputSerializer().fields
    assert {name for name, f in fields.items() if f.required} == set(INPUT_REQUIRED)
    assert {name for name, f in fields.items() if not f.required} == set(INPUT_OPTIONAL)
