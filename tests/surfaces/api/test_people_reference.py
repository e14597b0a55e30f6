"""People as a reference (docs/populations.md, "Comparing with people"), over real HTTP with a
real worker: observed values uploaded as CSV or JSON to an experiment; bad input is a 400
naming the row and field, and writes nothing; only operators upload; the results' distances
per metric and arm are scipy's own (Welch, ks_2samp, wasserstein_distance, bootstrap) on the
exported values — the worlds' from measurements.csv, the people's from references.csv."""

from __future__ import annotations

import io
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

from chukwa_core.people_reference import BOOTSTRAP_RESAMPLES, people_distance
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.models import ReferenceValue
from worlds_app.services.experiments import experiment_create

SCENARIO = "ant_on_plate_rules"
# the replicate's number (1, 2 or 3), plus 2 in the treated arm: values that vary by world
BY_REPLICATE = (
    "sum([((contains(world, '--2') && `2`) || (contains(world, '--3') && `3`) || `1`), "
    "((contains(world, '--treated--') && `2`) || `0`)])"
)
PEOPLE_CSV = "unit,metric,value\np1,score,1.5\np2,score,2\np3,score,2.5\np4,score,4\np5,score,3\n"


def _metric() -> str:
    return metric_put(
        content={
            "version": 1,
            "label": "score",
            "kind": "expression",
            "aggregate": "last",
            "expression": BY_REPLICATE,
        }
    )["hash"]


def _design(scenario: str, metric: str) -> dict[str, Any]:
    return {
        "slug": "people",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "treated", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 3,
        "turns": 1,
        "metrics": [{"hash": metric}],
    }


def test_the_distances_are_scipys_own() -> None:
    ours, theirs = [1.0, 2.0, 3.0, 7.5], [1.5, 2.0, 2.5, 4.0, 3.0]
    found = people_distance("treated", ours, theirs, seed=11)
    welch = stats.ttest_ind(ours, theirs, equal_var=False).confidence_interval(0.95)
    ks = stats.ks_2samp(ours, theirs)
    assert found.difference == pytest.approx(np.mean(ours) - np.mean(theirs))
    assert (found.ci_low, found.ci_high) == (pytest.approx(welch.low), pytest.approx(welch.high))
    assert (found.ks_statistic, found.ks_p) == (
        pytest.approx(ks.statistic),
        pytest.approx(ks.pvalue),
    )
    assert found.wasserstein == pytest.approx(stats.wasserstein_distance(ours, theirs))
    boot = stats.bootstrap(
        (ours, theirs),
        stats.wasserstein_distance,
        paired=False,
        vectorized=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(11),
    ).confidence_interval
    assert (found.wasserstein_ci_low, found.wasserstein_ci_high) == (
        pytest.approx(boot.low),
        pytest.approx(boot.high),
    )
    assert found.wasserstein_ci_low < found.wasserstein < found.wasserstein_ci_high
    permuted = stats.permutation_test(
        (ours, theirs),
        stats.wasserstein_distance,
        permutation_type="independent",
        vectorized=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        alternative="greater",
        rng=np.random.default_rng(11),
    )
    assert found.wasserstein_p == pytest.approx(permuted.pvalue)
    assert 0 < found.wasserstein_p <= 1 and "permutation_test" in found.wasserstein_p_method
    # one value on a side: the distances, no intervals, and the reason said
    single = people_distance("treated", [2.0], theirs, seed=11)
    assert single.ks_statistic is not None and single.ci_low is None
    assert single.note is not None and "at least 2" in single.note


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        (
            {"rows": [{"unit": "p1", "metric": "nope", "value": 1}]},
            "unknown_metric",
            "rows[0].metric",
        ),
        (
            {
                "rows": [
                    {"unit": "p1", "metric": "score", "value": 1},
                    {"unit": "p2", "metric": "score", "value": "x"},
                ]
            },
            "invalid_value",
            "rows[1].value",
        ),
        ({"rows": [{"unit": "", "metric": "score", "value": 1}]}, "invalid_unit", "rows[0].unit"),
        ({"rows": [{"unit": "p1", "metric": "score"}]}, "missing_field", "rows[0].value"),
        (
            {"rows": [{"unit": "p1", "metric": "score", "value": True}]},
            "invalid_value",
            "rows[0].value",
        ),
        (
            {"rows": [{"unit": "p1", "metric": "score", "value": 1, "age": 3}]},
            "unknown_field",
            "rows[0].age",
        ),
        (
            {
                "rows": [
                    {"unit": "p1", "metric": "score", "value": 1},
                    {"unit": "p1", "metric": "score", "value": 2},
                ]
            },
            "duplicate_reference",
            "rows[1]",
        ),
        ({"rows": []}, "invalid_rows", "rows"),
    ],
)
def test_bad_json_is_refused_naming_the_row_and_writes_nothing(
    operator_client: APIClient, body: dict[str, Any], code: str, field: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    experiment_create(data=_design(scenario, _metric()))
    answer = operator_client.post("/api/experiments/people/references/", body, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert field in error["message"]
    assert not ReferenceValue.objects.exists()


@pytest.mark.django_db
def test_bad_csv_is_refused_naming_the_line_and_only_operators_upload(
    operator_client: APIClient, reader_client: APIClient
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    experiment_create(data=_design(scenario, _metric()))
    url = "/api/experiments/people/references/"
    for text, code, field in (
        ("unit,metric\np1,score\n", "invalid_header", "csv"),
        ("unit,metric,value\np1,score,1\np2,score,nan\n", "invalid_value", "rows[1].value"),
        ("unit,metric,value\np1,score,1\np2,score\n", "invalid_row", "rows[1]"),
    ):
        answer = operator_client.post(url, {"csv": text}, format="json")
        assert answer.status_code == 400, answer.json()
        error = answer.json()["error"]
        assert (error["code"], error["details"]["field"]) == (code, field), error
    assert "CSV line 3" in error["message"]
    both = operator_client.post(url, {"csv": PEOPLE_CSV, "rows": [{}]}, format="json")
    assert both.json()["error"]["code"] == "invalid_upload"
    refused = reader_client.post(url, {"csv": PEOPLE_CSV}, format="json")
    assert refused.status_code == 403
    assert not ReferenceValue.objects.exists()
    done = operator_client.post(url, {"csv": PEOPLE_CSV}, format="json")
    assert done.status_code == 201 and done.json()["written"] == 5
    again = operator_client.post(
        url,
        {
            "rows": [
                {"unit": "p9", "metric": "score", "value": 1},
                {"unit": "p2", "metric": "score", "value": 2},
            ]
        },
        format="json",
    )
    assert again.status_code == 409 and again.json()["error"]["details"]["field"] == "rows[1]"
    assert ReferenceValue.objects.count() == 5  # the whole upload refused, p9 included
    assert operator_client.delete(url).status_code == 204
    assert not ReferenceValue.objects.exists()


def _wait(http: httpx.Client, slug: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = http.get(f"/api/experiments/{slug}/").json()
        progress = state["progress"]
        if state["status"] != "running" and (
            progress["measurements_done"] == progress["measurements_planned"]
        ):
            assert state["status"] == "completed", state
            return
        time.sleep(0.3)
    raise AssertionError(f"experiment {slug} did not finish: {state}")


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_the_results_distances_from_people_are_scipys_own_on_the_exported_values(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    metric = _metric()
    token = Token.objects.get_or_create(user=operator_user)[0].key
    headers = {"Authorization": f"Token {token}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as http:
        made = http.post("/api/experiments/", json=_design(scenario, metric))
        assert made.status_code == 201, made.text
        uploaded = http.post(
            "/api/experiments/people/references/",
            json={"csv": PEOPLE_CSV},
        )
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json() == {"experiment": "people", "written": 5, "total": 5}
        _wait(http, "people")
        results = http.get("/api/experiments/people/results/").json()
        exported = pd.read_csv(
            io.StringIO(http.get("/api/experiments/people/measurements.csv").text)
        )
        people_csv = http.get("/api/experiments/people/references.csv")
        listed = http.get("/api/experiments/people/references/").json()
    assert people_csv.status_code == 200 and people_csv.headers["content-type"].startswith(
        "text/csv"
    )
    people = pd.read_csv(io.StringIO(people_csv.text))
    assert list(people.columns) == ["unit", "metric_label", "metric_hash", "value"]
    assert set(people.metric_hash) == {metric} and len(listed["results"]) == 5
    observed = people[people.metric_label == "score"].value.to_numpy()
    (result,) = results["results"]
    reference = result["people"]
    assert reference["n"] == 5 and reference["mean"] == pytest.approx(observed.mean())
    assert reference["sd"] == pytest.approx(observed.std(ddof=1))
    last = exported[exported.turn == exported.turn.max()]  # "last": each world's value
    distances = {d["arm"]: d for d in reference["distances"]}
    assert list(distances) == ["control", "treated"]
    for arm, expected in (("control", [1.0, 2.0, 3.0]), ("treated", [3.0, 4.0, 5.0])):
        worlds = last[last.arm == arm].sort_values("replicate").value.to_numpy()
        assert list(worlds) == expected  # the constructed values, read back from the export
        found = distances[arm]
        assert (found["n_worlds"], found["n_people"]) == (3, 5)
        assert found["difference"] == pytest.approx(worlds.mean() - observed.mean())
        welch = stats.ttest_ind(worlds, observed, equal_var=False).confidence_interval(0.95)
        assert (found["ci_low"], found["ci_high"]) == (
            pytest.approx(welch.low),
            pytest.approx(welch.high),
        )
        ks = stats.ks_2samp(worlds, observed)
        assert found["ks_statistic"] == pytest.approx(ks.statistic)
        assert found["ks_p"] == pytest.approx(ks.pvalue)
        assert found["wasserstein"] == pytest.approx(stats.wasserstein_distance(worlds, observed))
        assert found["wasserstein_ci_low"] <= found["wasserstein"] <= found["wasserstein_ci_high"]
        assert "scipy" in found["library"] and "Welch" in found["ci_method"]
    # the treated arm sits further from the people than control does
    assert distances["treated"]["wasserstein"] > distances["control"]["wasserstein"]
