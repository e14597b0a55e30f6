"""Answers a methods reviewer accepts (docs/experiments.md, "Results, honestly"; docs/statistics.md),
checked from outside: a binary experiment run by a real worker, whose exported values — read by
pandas, as a notebook reads them — give the exact McNemar p (statsmodels' own) that the API
reports; replicates added after the results were seen listed in ``history`` and flagged on the
effects they change; a failed world counted missing with its reason, not aggregated from the turns
it ran; the primary metric flagged; bad primaries refused naming the field."""

from __future__ import annotations

import copy
import io
import time
from typing import Any

import httpx
import pandas as pd
import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from statsmodels.stats.contingency_tables import mcnemar

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import metric_put, scenario_assemble, scenario_fork
from tests.support.worlds import fixture_body
from worlds_app.models import AttemptStatus, Experiment, TurnAttempt, World
from worlds_app.services import turn_attempt_run
from worlds_app.services.experiments import experiment_create
from worlds_app.services.measurements import world_measure

EATEN = "contains(entities.crumb.state, 'eaten')"


def _crumb_eaten() -> str:
    return metric_put(
        content={
            "version": 1,
            "label": "crumb_eaten",
            "kind": "expression",
            "aggregate": "any",
            "expression": EATEN,
        }
    )["hash"]


def _cautious() -> str:
    """picnic_rules whose forager eats the crumb with probability 0.5 (the demo's variant)."""
    scenario_assemble(data={**fixture_body("picnic_rules"), "name": "picnic_rules"})
    forager = copy.deepcopy(load_fixture("picnic_rules")["cognition_profiles"]["forager"])
    for rule in forager["inline"]["workflow"]["inline"]["nodes"][0]["rules"]:
        if rule["id"] == "eat_crumb":
            rule["probability"] = 0.5
    return str(
        scenario_fork(
            data={
                "primary_parent": {"name": "picnic_rules"},
                "changes": {"cognition_profile_upserts": {"forager": forager}},
                "name": "picnic_rules_cautious",
                "operator": "test",
                "note": "eats the crumb half the time",
            }
        )["scenario_hash"]
    )


def _wait(http: httpx.Client, slug: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = http.get(f"/api/experiments/{slug}/").json()
        progress = state["progress"]
        if state["status"] != "running" and (
            progress["measurements_done"] == progress["measurements_planned"]
        ):
            return state
        time.sleep(0.3)
    raise AssertionError(f"experiment {slug} did not finish: {state}")


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_binary_experiment_reports_the_exact_mcnemar_p_of_its_exported_values(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    metric, cautious = _crumb_eaten(), _cautious()
    token = Token.objects.get_or_create(user=operator_user)[0].key
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as http:
        made = http.post(
            "/api/experiments/",
            json={
                "slug": "crumbs",
                "arms": [
                    {"label": "control", "scenario_ref": {"name": "picnic_rules"}},
                    {"label": "cautious", "scenario_ref": {"hash": cautious}},
                ],
                "replicates": 12,
                "turns": 4,
                "metrics": [{"hash": metric}],
                "primary": {"label": "crumb_eaten"},
                "seed": 11,
            },
        )
        assert made.status_code == 201, made.text
        assert made.json()["design"]["primary"] == metric
        _wait(http, "crumbs")
        first = http.get("/api/experiments/crumbs/results/").json()
        assert first["history"] == [] and len(first["registered_hash"]) == 64
        (effect,) = first["results"][0]["effects"]
        assert effect["added_after_creation"] is False and effect["primary"] is True
        # looked at the results, then asked for more replicates: recorded, and flagged
        more = http.post("/api/experiments/crumbs/replicates/", json={"count": 4})
        assert more.status_code == 200, more.text
        _wait(http, "crumbs")
        results = http.get("/api/experiments/crumbs/results/").json()
        exported = http.get("/api/experiments/crumbs/measurements.csv")
    assert results["registered_hash"] == first["registered_hash"]  # the registration is frozen
    (change,) = results["history"]
    assert (change["change"], change["detail"], change["by"]) == (
        "replicates",
        "12 → 16 per arm",
        operator_user.username,
    )
    (result,) = results["results"]
    assert result["metric"]["type"] == "binary" and result["metric"]["primary"] is True
    (effect,) = result["effects"]
    assert effect["added_after_creation"] is True and effect["n_pairs"] == 16
    assert "changed after creation" in results["methods"]

    frame = pd.read_csv(io.StringIO(exported.text))
    ran = frame[frame.turn >= 1]
    world = ran.groupby(["arm", "replicate"]).value.max().unstack(0)  # "any" over turns 1 to 4
    both = world.dropna()
    table = pd.crosstab(both["control"], both["cautious"]).reindex(
        index=[0.0, 1.0], columns=[0.0, 1.0], fill_value=0
    )
    own = mcnemar(table.to_numpy(), exact=True)
    assert effect["p_value"] == pytest.approx(own.pvalue, rel=1e-12)
    assert effect["p_exact"] is True and "McNemar" in effect["p_method"]
    assert effect["difference"] == pytest.approx(both["cautious"].mean() - both["control"].mean())
    assert effect["p_holm"] == effect["p_value"]  # the only comparison: its own family
    arms = {a["arm"]: a for a in result["arms"]}
    control = arms["control"]
    assert control["ci_status"] == "shown" and 0 <= control["ci_low"] < control["ci_high"] <= 1
    # never zero-width from a finite sample, even when every world ate the crumb (Wilson)
    assert control["ci_low"] < control["mean"] or control["ci_high"] > control["mean"]
    assert control["ci_low"] < 1.0


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


@pytest.mark.django_db
def test_a_world_that_stopped_short_is_missing_not_aggregated_from_its_turns(
    operator_client: APIClient,
) -> None:
    scenario = str(scenario_assemble(data=fixture_body("picnic_rules"))["scenario_hash"])
    turn = metric_put(
        content={
            "version": 1,
            "label": "turn_number",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
            "type": "count",
        }
    )["hash"]
    experiment_create(
        data={
            "slug": "short",
            "arms": [
                {"label": "a", "scenario_ref": {"hash": scenario}},
                {"label": "b", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 3,
            "turns": 3,
            "metrics": [{"hash": turn}],
        }
    )
    # world b--2 stops after 1 of its 3 turns
    last = TurnAttempt.objects.filter(world__slug="short--b--2").order_by("seq")[1:]
    TurnAttempt.objects.filter(pk__in=[a.pk for a in last]).update(status=AttemptStatus.CANCELLED)
    for attempt in TurnAttempt.objects.filter(
        world__experiment__slug="short", status=AttemptStatus.QUEUED
    ).order_by("world_id", "seq"):
        assert turn_attempt_run(attempt_id=str(attempt.pk), owner="test") == "committed"
    for world_id in World.objects.filter(experiment__slug="short").values_list("pk", flat=True):
        world_measure(world_id=world_id, metric_hashes=[turn])
    (result,) = operator_client.get("/api/experiments/short/results/").json()["results"]
    arms = {a["arm"]: a for a in result["arms"]}
    b = arms["b"]
    # the mean of turns 1 to 3 is 2 for every whole world; b--2's turn 1 alone would say 1
    assert (b["n"], b["n_missing"], b["mean"]) == (2, 1, 2.0)
    assert b["missing"] == {
        "world_incomplete": 1,
        "world_running": 0,
        "metric_error": 0,
        "not_measured": 0,
    }
    (short,) = [w for w in b["worlds"] if w["world"] == "short--b--2"]
    assert (short["value"], short["missing_reason"]) == (None, "world_incomplete")
    (effect,) = result["effects"]
    # both arms' means over the complete pairs, beside their difference
    assert (effect["n_pairs"], effect["n_dropped"]) == (2, 1)
    assert (effect["control_mean"], effect["treatment_mean"], effect["difference"]) == (
        2.0,
        2.0,
        0.0,
    )
    assert result["metric"]["type_basis"] == "declared by the metric"
    assert result["metric"]["type"] == "continuous"  # the mean of counts
    assert Experiment.objects.get(slug="short").registered_design is not None
    # one of its turns queued again: the same world is missing as still running
    again = TurnAttempt.objects.filter(world__slug="short--b--2").order_by("seq")[2]
    TurnAttempt.objects.filter(pk=again.pk).update(status=AttemptStatus.QUEUED)
    (result,) = operator_client.get("/api/experiments/short/results/").json()["results"]
    b = {a["arm"]: a for a in result["arms"]}["b"]
    assert b["missing"] == {
        "world_incomplete": 0,
        "world_running": 1,
        "metric_error": 0,
        "not_measured": 0,
    }


@pytest.mark.django_db
def test_a_primary_metric_must_be_one_of_the_designs(operator_client: APIClient) -> None:
    scenario = str(scenario_assemble(data=fixture_body("picnic_rules"))["scenario_hash"])
    metric = _crumb_eaten()
    other = metric_put(
        content={
            "version": 1,
            "label": "other",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    base = {
        "slug": "p",
        "arms": [{"label": "a", "scenario_ref": {"hash": scenario}}],
        "replicates": 1,
        "turns": 1,
        "metrics": [{"hash": metric}],
    }
    for primary, code in (
        ({"hash": other}, "invalid_primary"),
        ({"label": "nothing-here"}, "unresolved_reference"),
        ("crumb_eaten", "invalid_metric_ref"),
    ):
        answer = operator_client.post(
            "/api/experiments/", {**base, "primary": primary}, format="json"
        )
        assert answer.status_code == 400, answer.json()
        error = answer.json()["error"]
        assert (error["code"], error["details"]["field"]) == (code, "primary"), error
    assert not Experiment.objects.exists() and not World.objects.exists()
