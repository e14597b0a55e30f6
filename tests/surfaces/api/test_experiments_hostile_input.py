"""Hostile designs and requests to the experiment API: every one is a 4xx naming its problem,
never a 500, and neither creating nor estimating writes anything for them (the estimate checks a
design exactly as creating it does: a start time with no room for a turn included)."""

from typing import Any

import pytest

from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.models import Experiment, World


@pytest.mark.django_db
def test_hostile_experiment_input_is_a_4xx_and_writes_nothing(operator_client: Any) -> None:
    sc = scenario_assemble(data=fixture_body("ant_on_plate_rules"))["scenario_hash"]
    m = metric_put(
        content={
            "version": 1,
            "label": "t",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    base = {
        "slug": "h",
        "arms": [{"label": "a", "scenario_ref": {"hash": sc}}],
        "replicates": 1,
        "turns": 1,
        "metrics": [{"hash": m}],
    }
    bads = [
        {"budget": {"max_cost_total": "1e400"}},
        {"budget": []},
        {"budget": {"max_tokens_total": True}},
        {"branch_from": {"world": "nope", "turn": 1}},
        {"branch_from": []},
        {"branch_from": {"world": 5, "turn": "x"}},
        {"replay_from": []},
        {"replay_from": {"experiment": None, "mode": "replay_strict"}},
        {"start_time": "garbage"},
        {"start_time": 12},
        {"start_time": "9999-12-31T23:59:59Z"},
        {
            "arms": [
                {
                    "label": "a",
                    "scenario_ref": {"hash": sc},
                    "interventions": [{"turn": 1, "patch": {"effects": "x"}}],
                }
            ]
        },
        {"arms": [{"label": "a", "scenario_ref": {"hash": sc}, "interventions": "x"}]},
        {"name": "\x00"},
        {"description": 5},
        {"seed": 2**70},
        {"slug": "estimate"},
        {"metrics": "x"},
        {"arms": [{"label": "a", "scenario_ref": {"name": "\x00"}}]},
    ]
    for url in ("/api/experiments/", "/api/experiments/estimate/"):
        for bad in bads:
            r = operator_client.post(url, {**base, **bad}, format="json")
            assert r.status_code in (400, 409), (url, bad, r.status_code, r.content[:300])
            assert not Experiment.objects.exists() and not World.objects.exists()
    for path in (
        "/api/experiments/nope/",
        "/api/experiments/nope/results/",
        "/api/experiments/nope/measurements.csv",
    ):
        r = operator_client.get(path)
        assert r.status_code in (400, 404), (path, r.status_code)
    r = operator_client.post("/api/experiments/", base, format="json")
    assert r.status_code == 201
    for path, body in (
        ("/api/experiments/h/replicates/", {"count": "x"}),
        ("/api/experiments/h/replicates/", {"count": 10**9}),
        ("/api/experiments/h/metrics/", {"metrics": [{"label": "zz"}]}),
        ("/api/experiments/h/metrics/", {}),
    ):
        r = operator_client.post(path, body, format="json")
        assert r.status_code == 400, (path, body, r.status_code, r.content[:300])
