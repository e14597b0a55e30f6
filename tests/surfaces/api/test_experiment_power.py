"""How many replicates a design needs, over real HTTP (docs/experiments.md, "How many
replicates do I need?"): with a given sd the answer is statsmodels' own (TTestPower, rounded up)
for continuous and count metrics; with a pilot the sd is the pilot's paired differences' (a
rule-policy pilot run in this process); every bad ``power`` is a 400 naming its field with
nothing written."""

from __future__ import annotations

import math
import statistics
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from statsmodels.stats.power import TTestPower

from scenarios_app.services import metric_put
from tests.surfaces.pages.test_experiment_pages import design, run_experiment, stored_scenario
from worlds_app.experiment_results import experiment_results
from worlds_app.models import Experiment, World
from worlds_app.services.experiments import experiment_create

ESTIMATE = "/api/experiments/estimate/"
# constructed data with a known answer: 3 in the first treated world, 1 in the others, 0 in
# control, so the paired differences are 3, 1, 1 (sd 1.1547…), as a varying effect's are
BY_REPLICATE = (
    "(contains(world, '--treated--1') && `3`) || (contains(world, '--treated--') && `1`) || `0`"
)


def metric(label: str, expression: str, aggregate: str) -> str:
    content = {
        "version": 1,
        "label": label,
        "kind": "expression",
        "aggregate": aggregate,
        "expression": expression,
    }
    return metric_put(content=content)["hash"]


def http(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=60
    )


def statsmodels_n(effect: float, sd: float, alpha: float, power: float) -> int:
    solved = TTestPower().solve_power(
        effect_size=effect / sd, alpha=alpha, power=power, alternative="two-sided"
    )
    return math.ceil(float(solved))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("expression", "aggregate", "kind"),
    [
        ("length(join(' ', patches[].narration))", "mean", "continuous"),
        ("contains(world, '--treated--')", "sum", "count"),
    ],
)
@pytest.mark.parametrize(
    ("effect", "sd", "alpha", "power"), [(0.5, 1.0, 0.05, 0.8), (-3.0, 7.5, 0.01, 0.9)]
)
def test_replicates_needed_are_statsmodels_answer(
    live_server: Any,
    operator_user: User,
    expression: str,
    aggregate: str,
    kind: str,
    effect: float,
    sd: float,
    alpha: float,
    power: float,
) -> None:
    measure = metric("measure", expression, aggregate)
    body = {
        **design("sized", stored_scenario(), [measure], replicates=10),
        "power": {
            "metric": {"label": "measure"},
            "effect": effect,
            "sd": sd,
            "alpha": alpha,
            "power": power,
        },
    }
    with http(live_server, operator_user) as client:
        answer = client.post(ESTIMATE, json=body)
    assert answer.status_code == 200, answer.text
    got = answer.json()["power"]
    expected = statsmodels_n(effect, sd, alpha, power)
    assert expected > 6  # above the fewest pairs the exact test needs, where the floor binds
    assert abs(got["replicates_needed"] - expected) <= 1, (got, expected)
    of_design = TTestPower().power(effect_size=effect / sd, nobs=10, alpha=alpha)
    assert got["power_of_design"] == pytest.approx(of_design, abs=1e-9)
    assert got["metric"] == {"hash": measure, "label": "measure"}
    assert (got["type"], got["effect"], got["sd"], got["sd_source"]) == (kind, effect, sd, "given")
    assert (got["alpha"], got["power_target"], got["replicates"]) == (alpha, power, 10)
    assert "TTestPower" in got["method"] and "statsmodels 0." in got["method"]
    assert not Experiment.objects.exists() and not World.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_pilots_paired_differences_give_the_sd(live_server: Any, operator_user: User) -> None:
    """A rule-policy pilot (3 replicates of control, treated and a second treatment arm) run in
    this process; the estimate reads its paired differences' sd for the metric, the largest of
    its two treatment arms, and says so."""
    scenario = stored_scenario()
    measure = metric("constructed", BY_REPLICATE, "mean")
    pilot = design("pilot", scenario, [measure])
    pilot["arms"].append({"label": "other", "scenario_ref": {"hash": scenario}})
    experiment_create(data=pilot, created_by="olga")
    run_experiment("pilot", [measure])
    (result,) = experiment_results(slug="pilot").results
    arms = {a.arm: [w.value for w in a.worlds] for a in result.arms}
    differences = [t - c for t, c in zip(arms["treated"], arms["control"], strict=True)]
    assert differences == [3, 1, 1]
    sd = statistics.stdev(differences)
    effect = sd / 2
    body = {
        **design("main", scenario, [measure], replicates=8),
        "power": {"metric": {"hash": measure}, "effect": effect, "pilot": "pilot"},
    }
    with http(live_server, operator_user) as client:
        answer = client.post(ESTIMATE, json=body)
        assert answer.status_code == 200, answer.text
        got = answer.json()["power"]
        assert got["sd"] == pytest.approx(sd, rel=1e-9)
        assert got["sd_source"].startswith("pilot pilot: 3 pairs (treated − control)")
        assert "largest sd of its 2 treatment arms" in got["sd_source"]
        expected = statsmodels_n(effect, sd, 0.05, 0.8)
        assert abs(got["replicates_needed"] - expected) <= 1, (got, expected)
        of_design = TTestPower().power(effect_size=0.5, nobs=8, alpha=0.05)
        assert got["power_of_design"] == pytest.approx(of_design, abs=1e-9)
        # a pilot with one complete pair cannot say how the differences spread
        experiment_create(data=design("tiny", scenario, [measure], replicates=1), created_by="o")
        run_experiment("tiny", [measure])
        body["power"]["pilot"] = "tiny"
        refused = client.post(ESTIMATE, json=body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["details"]["field"] == "power.pilot" and "1 complete pair" in error["message"]
    assert not Experiment.objects.filter(slug="main").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("power", "field"),
    [
        ({"effect": 1, "sd": 1}, "power.metric"),
        ({"metric": {"label": "other"}, "effect": 1, "sd": 1}, "power.metric"),
        ({"metric": {"label": "nowhere"}, "effect": 1, "sd": 1}, "power.metric"),
        ({"metric": {"label": "measure"}, "sd": 1}, "power.effect"),
        ({"metric": {"label": "measure"}, "effect": 0, "sd": 1}, "power.effect"),
        ({"metric": {"label": "measure"}, "effect": "big", "sd": 1}, "power.effect"),
        ({"metric": {"label": "measure"}, "effect": 1, "sd": 1, "alpha": 1.5}, "power.alpha"),
        ({"metric": {"label": "measure"}, "effect": 1, "sd": 1, "power": 1}, "power.power"),
        ({"metric": {"label": "measure"}, "effect": 1}, "power.sd"),
        ({"metric": {"label": "measure"}, "effect": 1, "sd": 0}, "power.sd"),
        ({"metric": {"label": "measure"}, "effect": 1, "sd": 1, "pilot": "p"}, "power.pilot"),
        ({"metric": {"label": "measure"}, "effect": 1, "pilot": "nothing"}, "power.pilot"),
        ({"metric": {"label": "measure"}, "effect": 1, "sd": 1, "beta": 0.2}, "power.beta"),
        ({"metric": {"label": "flag"}, "effect": 0.9, "sd": 0.9}, "power.sd"),
        ("lots", "power"),
    ],
)
def test_a_bad_power_is_a_400_naming_its_field(
    operator_client: APIClient, power: Any, field: str
) -> None:
    measure = metric("measure", "length(patches)", "mean")
    flag = metric("flag", "length(patches) > `0`", "any")  # binary: McNemar's power
    metric("other", "length(calls)", "mean")  # stored, but not in the design
    body = {**design("sized", stored_scenario(), [measure, flag]), "power": power}
    answer = operator_client.post(ESTIMATE, body, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["details"]["field"] == field, answer.json()
    assert not Experiment.objects.exists() and not World.objects.exists()


@pytest.mark.django_db
def test_a_binary_metric_uses_mcnemars_power_and_no_power_is_null(
    operator_client: APIClient,
) -> None:
    flag = metric("flag", "length(patches) > `0`", "any")
    body = design("sized", stored_scenario(), [flag], replicates=20)
    assert operator_client.post(ESTIMATE, body, format="json").json()["power"] is None
    body["power"] = {"metric": {"hash": flag}, "effect": 0.3, "sd": 0.6}
    got = operator_client.post(ESTIMATE, body, format="json").json()["power"]
    assert got["type"] == "binary" and "McNemar" in got["method"]
    assert got["replicates_needed"] > 20 > 0 < got["power_of_design"] < 0.8
