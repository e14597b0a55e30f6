"""Factorial designs and stopping early over real HTTP (docs/designs.md): factors over a base
become forked arms (a 2x2 gives 4, a 2x2x2 half fraction 4 with its aliasing stated); the
results' main effects and interaction are statsmodels' own fit of the exported data, with
standard errors clustered by replicate; a stopping rule run by a real worker stops early on a
large effect and runs to max_replicates on none; bad factors and stopping are 400s naming the
field, and nothing is written."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scenarios_app.models import Scenario
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.models import Experiment, World

SCENARIO = "ant_on_plate_rules"
# thirst and fountain together make 1 (but in replicate 3), and replicate 1 makes 1 whatever
# the arm: an interaction, two main effects, variation between replicates (the clusters), and
# no arm all 0 or all 1 (a logistic fit would be separated)
FACTORIAL_VALUE = (
    "(contains(world, 'thirst-yes') && contains(world, 'fountain-yes') && "
    "!ends_with(world, '--3')) || ends_with(world, '--1')"
)


def _metric(label: str, expression: str) -> str:
    return metric_put(
        content={
            "version": 1,
            "label": label,
            "kind": "expression",
            "aggregate": "mean",
            "expression": expression,
        }
    )["hash"]


def _factor(name: str, changes: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "levels": [{"label": "no"}, {"label": "yes", "fork": {"changes": changes}}],
    }


def _factorial(scenario: str, metric: str, **extra: Any) -> dict[str, Any]:
    return {
        "slug": "grid",
        "base": {"hash": scenario},
        "factors": [
            _factor("thirst", {"description": "A thirsty ant."}),
            _factor("fountain", {"chronon_seconds": 120}),
        ],
        "replicates": 3,
        "turns": 1,
        "metrics": [{"hash": metric}],
        **extra,
    }


def _client(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    )


def _wait(http: httpx.Client, slug: str, done: Any, seconds: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        # the state first: the results read after it are at least as new
        state = http.get(f"/api/experiments/{slug}/").json()
        results = http.get(f"/api/experiments/{slug}/results/").json()
        if done(state, results):
            return results
        assert time.monotonic() < deadline, (state["status"], state["progress"])
        time.sleep(0.5)


def _finished(state: dict[str, Any], _: dict[str, Any]) -> bool:
    progress = state["progress"]
    return state["status"] != "running" and (
        progress["measurements_done"] == progress["measurements_planned"]
    )


@pytest.mark.django_db
def test_a_half_fraction_of_three_factors_gives_four_arms_and_states_its_aliasing(
    operator_client: APIClient,
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    body = _factorial(scenario, _metric("any", "`true`"), slug="half", fraction="1/2")
    body["factors"].append(_factor("rain", {"description": "Rain on the plate."}))
    made = operator_client.post("/api/experiments/", body, format="json")
    assert made.status_code == 201, made.json()
    design = made.json()["design"]
    labels = [a["label"] for a in design["arms"]]
    assert labels == [
        "thirst-no--fountain-no--rain-no",
        "thirst-no--fountain-yes--rain-yes",
        "thirst-yes--fountain-no--rain-yes",
        "thirst-yes--fountain-yes--rain-no",
    ]
    assert design["control"] == labels[0]
    assert design["arms"][0]["scenario_ref"]["hash"] == scenario
    # every other arm a fork of the base: distinct scenarios, each with the base as its parent
    assert len({a["scenario_ref"]["hash"] for a in design["arms"]}) == 4
    factorial = design["factorial"]
    assert (factorial["resolution"], factorial["defining_relation"]) == (3, "I = -ABC")
    assert factorial["aliases"] == [
        ["+thirst", "-fountain:rain"],
        ["+fountain", "-thirst:rain"],
        ["+rain", "-thirst:fountain"],
    ]
    assert "resolution III" in factorial["text"] and "A = -BC" in factorial["text"]
    assert factorial["arm_levels"][labels[1]] == {"thirst": "no", "fountain": "yes", "rain": "yes"}
    results = operator_client.get("/api/experiments/half/results/").json()
    assert "I = -ABC" in results["design_text"]
    (fit,) = results["factorial"]
    assert [e["term"] for e in fit["effects"]] == ["thirst", "fountain", "rain"]
    assert fit["effects"][0]["aliases"] == ["-fountain:rain"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"factors": [_factor("thirst", {})]}, "invalid_factors", "factors"),
        (
            {"factors": [_factor("a", {"chronon_seconds": -5}), _factor("b", {})]},
            "invalid_chronon",
            "factors[0].levels[1].fork.changes.chronon_seconds",
        ),
        (
            {
                "factors": [
                    _factor("a", {}),
                    {
                        "name": "b",
                        "levels": [{"label": "x"}, {"label": "y", "fork": {"changes": {}, "x": 1}}],
                    },
                ]
            },
            "invalid_input",
            "factors[1].levels[1].fork.x",
        ),
        (
            {
                "factors": [
                    _factor("a", {}),
                    _factor("b", {"environment_removals": ["no_such_environment"]}),
                ]
            },
            "unknown_label",
            "factors[1].levels[1].fork.changes.environment_removals[0]",
        ),
        ({"fraction": "1/2"}, "invalid_fraction", "fraction"),
        ({"base": {"hash": "0" * 64}}, "unresolved_reference", "base"),
        (
            {"arms": [{"label": "control", "scenario_ref": {"name": "x"}}]},
            "invalid_factors",
            "arms",
        ),
        ({"stopping": {"metric": {"label": "x"}}}, "invalid_stopping", "stopping.alpha"),
        (
            {"stopping": {"alpha": 0.05, "every": 1, "max_replicates": 5}},
            "invalid_stopping",
            "stopping.metric",
        ),
        (
            {"stopping": {"metric": "M", "alpha": 1.5, "every": 1, "max_replicates": 5}},
            "invalid_stopping",
            "stopping.alpha",
        ),
        (
            {"stopping": {"metric": "M", "alpha": 0.05, "every": 0, "max_replicates": 5}},
            "invalid_stopping",
            "stopping.every",
        ),
        (
            {"stopping": {"metric": "M", "alpha": 0.05, "every": 1, "max_replicates": 2}},
            "invalid_stopping",
            "stopping.max_replicates",
        ),
        (
            {"stopping": {"metric": "M", "alpha": 0.05, "every": 1, "max_replicates": 5}},
            "invalid_stopping",
            "stopping.treatment",
        ),
    ],
)
def test_bad_factors_and_stopping_are_400s_naming_the_field_writing_nothing(
    operator_client: APIClient, change: dict[str, Any], code: str, field: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    metric = _metric("any", "`true`")
    stored = Scenario.objects.count()
    text = json.dumps(change).replace('"M"', json.dumps({"hash": metric}))
    body = {**_factorial(scenario, metric), **json.loads(text)}
    answer = operator_client.post("/api/experiments/", body, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert not Experiment.objects.exists() and not World.objects.exists()
    assert Scenario.objects.count() == stored  # no fork was kept


@pytest.mark.django_db
def test_the_estimate_of_a_stopping_rule_is_its_worst_case(operator_client: APIClient) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    metric = _metric("any", "`true`")
    stopping = {"metric": {"hash": metric}, "alpha": 0.05, "every": 2, "max_replicates": 9}
    plain = operator_client.post(
        "/api/experiments/estimate/", _factorial(scenario, metric), format="json"
    )
    assert plain.status_code == 200, plain.json()
    worst = operator_client.post(
        "/api/experiments/estimate/",
        {
            **_factorial(scenario, metric),
            "stopping": {**stopping, "treatment": "thirst-yes--fountain-yes"},
        },
        format="json",
    )
    assert worst.status_code == 200, worst.json()
    assert (plain.json()["worlds"], worst.json()["worlds"]) == (4 * 3, 4 * 9)
    assert not Experiment.objects.exists() and Scenario.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_two_by_two_runs_forked_arms_and_its_effects_are_statsmodels_fit(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    metric = _metric("drank", FACTORIAL_VALUE)
    with _client(live_server, operator_user) as http:
        made = http.post("/api/experiments/", json=_factorial(scenario, metric))
        assert made.status_code == 201, made.text
        arms = made.json()["design"]["arms"]
        assert [a["label"] for a in arms] == [
            "thirst-no--fountain-no",
            "thirst-no--fountain-yes",
            "thirst-yes--fountain-no",
            "thirst-yes--fountain-yes",
        ]
        # the forks were written with the experiment: each arm's scenario is stored
        hashes = [a["scenario_ref"]["hash"] for a in arms]
        assert len(set(hashes)) == 4 and Scenario.objects.filter(pk__in=hashes).count() == 4
        assert World.objects.filter(experiment__slug="grid").count() == 12
        results = _wait(http, "grid", _finished)
        (fit,) = results["factorial"]
        metric_type = results["results"][0]["metric"]["type"]
        exported = http.get("/api/experiments/grid/measurements.csv").text
    frame = pd.read_csv(io.StringIO(exported))
    per_world = frame[frame.turn >= 1].groupby(["arm", "replicate"]).value.mean().reset_index()
    thirst = np.where(per_world.arm.str.contains("thirst-yes"), 1.0, -1.0)
    fountain = np.where(per_world.arm.str.contains("fountain-yes"), 1.0, -1.0)
    x = np.column_stack([np.ones(len(per_world)), thirst, fountain, thirst * fountain])
    y = per_world.value.to_numpy()
    binary = metric_type == "binary"
    assert fit["scale"] == ("log-odds" if binary else "mean"), fit
    model = sm.GLM(y, x, family=sm.families.Binomial()) if binary else sm.OLS(y, x)
    own = model.fit(
        cov_type="cluster", cov_kwds={"groups": per_world.replicate.to_numpy()}, use_t=True
    )
    bounds = own.conf_int(0.05)
    assert [e["term"] for e in fit["effects"]] == ["thirst", "fountain", "thirst:fountain"]
    assert fit["note"] is None or "clusters" in fit["note"], fit["note"]
    for i, effect in enumerate(fit["effects"], start=1):
        assert effect["coefficient"] == pytest.approx(own.params[i], abs=1e-9)
        assert effect["ci_low"] == pytest.approx(bounds[i, 0], abs=1e-9)
        assert effect["ci_high"] == pytest.approx(bounds[i, 1], abs=1e-9)
        assert effect["p_value"] == pytest.approx(own.pvalues[i], rel=1e-6)
        assert effect["contrast"] == pytest.approx(2 * own.params[i], abs=1e-9)
    assert fit["effects"][2]["coefficient"] != 0  # the constructed interaction is there
    assert fit["n_replicates"] == 3 and "clustered by replicate" in fit["method"]
    # the methods paragraph names the design and the estimation, with the fit's own figures
    methods = results["methods"]
    assert "4 arms from 2 factors (A = thirst, B = fountain): the full factorial product" in methods
    assert f"estimated by {fit['method']} ({fit['library']})" in methods
    assert "G - 1 degrees of freedom (G = 3)" in methods
    cells = {c["arm"]: c for c in fit["cells"]}
    assert cells["thirst-yes--fountain-yes"]["mean"] == pytest.approx(2 / 3)
    assert cells["thirst-no--fountain-no"]["levels"] == ["no", "no"]


def _two_arms(
    scenario: str, metric: str, slug: str, treated: str, **stopping: Any
) -> dict[str, Any]:
    return {
        "slug": slug,
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": treated, "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 2,
        "turns": 1,
        "metrics": [{"hash": metric}],
        "stopping": {"metric": {"hash": metric}, "alpha": 0.05, **stopping},
    }


def _ended(state: dict[str, Any], results: dict[str, Any]) -> bool:
    # the experiment reads running until the rule has ended: completed means ended
    if _finished(state, results):
        assert results["stopping"]["reason"] is not None, results["stopping"]
        return True
    return False


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_stopping_rule_stops_early_on_a_large_effect_and_runs_to_its_maximum_on_none(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    metric = _metric("treated", "contains(world, '--treated--')")
    with _client(live_server, operator_user) as http:
        large = _two_arms(scenario, metric, "large", "treated", every=2, max_replicates=14)
        assert http.post("/api/experiments/", json=large).status_code == 201
        none = _two_arms(scenario, metric, "none", "same", every=2, max_replicates=4)
        assert http.post("/api/experiments/", json=none).status_code == 201
        large_results = _wait(http, "large", _ended, 300)
        stopped = large_results["stopping"]
        (effect,) = large_results["results"][0]["effects"]
        assert effect["added_after_creation"] is False  # the rule's replicates were registered
        none_results = _wait(http, "none", _ended, 300)
        ran_out = none_results["stopping"]
        large_state = http.get("/api/experiments/large/").json()
        history = http.get("/api/experiments/large/results/").json()["history"]
    assert stopped["reason"] == "stopped_early"
    assert "betting e-process" in stopped["test"]
    looks = stopped["looks"]
    assert [look["replicates"] for look in looks] == list(range(2, looks[-1]["replicates"] + 1, 2))
    assert looks[-1]["replicates"] < 14 and looks[-1]["decision"] == "rejected"
    assert looks[-1]["e_value"] >= looks[-1]["boundary"] == pytest.approx(20)
    assert all(look["e_value"] < look["boundary"] for look in looks[:-1])
    assert large_state["status"] == "completed"
    (end,) = [h for h in history if h["change"] == "stopping"]
    assert end["by"] == "stopping rule" and end["detail"].startswith("stopped_early at ")
    steps = [h for h in history if h["change"] == "replicates"]
    assert (
        len(steps) == len(looks) - 1
    )  # one step of `every` replicates after each look but the last
    assert large_state["design"]["replicates"] == looks[-1]["replicates"]
    assert World.objects.filter(experiment__slug="large").count() == 2 * looks[-1]["replicates"]
    assert ran_out["reason"] == "max_replicates"
    assert [(look["replicates"], look["e_value"]) for look in ran_out["looks"]] == [
        (2, 1.0),
        (4, 1.0),
    ]
    assert World.objects.filter(experiment__slug="none").count() == 8
    # the methods paragraph names the rule, its looks and why it ended
    last = looks[-1]["replicates"]
    assert (
        f"{len(looks)} looks were taken (the last at {last} replicates)"
        in (large_results["methods"])
    )
    assert "stopped early when the boundary was reached" in large_results["methods"]
    assert stopped["test"] in large_results["methods"]
    assert (
        "2 looks were taken (the last at 4 replicates) and it ran to the maximum"
        in (none_results["methods"])
    )
