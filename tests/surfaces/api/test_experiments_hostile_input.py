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
    # each hostile part of a design, with the error code and the field its 400 must name
    bads: list[tuple[dict[str, Any], str, str]] = [
        ({"budget": {"max_cost_total": "1e400"}}, "invalid_budget", "budget.max_cost_total"),
        ({"budget": []}, "invalid_budget", "budget"),
        ({"budget": {"max_tokens_total": True}}, "invalid_budget", "budget.max_tokens_total"),
        ({"budget": {"max_tokens_per_turn": 5}}, "invalid_budget", "budget.max_tokens_per_turn"),
        ({"branch_from": {"world": "nope", "turn": 1}}, "invalid_branch_from", "branch_from.world"),
        ({"branch_from": []}, "invalid_branch_from", "branch_from"),
        ({"branch_from": {"world": 5, "turn": "x"}}, "invalid_branch_from", "branch_from.world"),
        ({"replay_from": []}, "invalid_replay_from", "replay_from"),
        (
            {"replay_from": {"experiment": None, "mode": "replay_strict"}},
            "invalid_replay_from",
            "replay_from.experiment",
        ),
        ({"start_time": "garbage"}, "invalid_start_time", "start_time"),
        ({"start_time": 12}, "invalid_start_time", "start_time"),
        ({"start_time": "9999-12-31T23:59:59Z"}, "invalid_start_time", "start_time"),
        (
            {
                "arms": [
                    {
                        "label": "a",
                        "scenario_ref": {"hash": sc},
                        "interventions": [{"turn": 1, "patch": {"effects": "x"}}],
                    }
                ]
            },
            "invalid_patch",
            "arms[0].interventions[0].patch",
        ),
        (
            {
                "arms": [
                    {
                        "label": "a",
                        "scenario_ref": {"hash": sc},
                        "interventions": [{"turn": 2, "patch": {"narration": "x", "effects": []}}],
                    }
                ]
            },
            "invalid_turn",
            "arms[0].interventions[0].turn",
        ),
        (
            {
                "arms": [
                    {
                        "label": "a",
                        "scenario_ref": {"hash": sc},
                        "interventions": [
                            {"turn": 1, "patch": {"narration": "x", "effects": []}, "note": 5}
                        ],
                    }
                ]
            },
            "invalid_input",
            "arms[0].interventions[0].note",
        ),
        (
            {"arms": [{"label": "a", "scenario_ref": {"hash": sc}, "interventions": "x"}]},
            "invalid_interventions",
            "arms[0].interventions",
        ),
        (
            {
                "arms": [
                    {"label": "a", "scenario_ref": {"hash": sc}},
                    {"label": "a", "scenario_ref": {"hash": sc}},
                ]
            },
            "duplicate_arm",
            "arms[1].label",
        ),
        ({"control": "b"}, "invalid_control", "control"),
        ({"name": "\x00"}, "invalid_character", "name"),
        ({"description": 5}, "invalid_input", "description"),
        ({"seed": 2**70}, "invalid_seed", "seed"),
        ({"seed": 2**53}, "invalid_seed", "seed"),  # JSON clients would round it
        ({"slug": "estimate"}, "invalid_slug", "slug"),
        ({"replicates": 0}, "invalid_replicates", "replicates"),
        ({"replicates": 10_001}, "invalid_replicates", "replicates"),
        ({"turns": True}, "invalid_turns", "turns"),
        ({"metrics": "x"}, "invalid_metrics", "metrics"),
        ({"extra": 1}, "invalid_input", "extra"),
        (
            {"arms": [{"label": "a", "scenario_ref": {"name": "\x00"}}]},
            "invalid_name",
            "arms[0].scenario_ref.name",
        ),
    ]
    for url in ("/api/experiments/", "/api/experiments/estimate/"):
        for bad, code, field in bads:
            r = operator_client.post(url, {**base, **bad}, format="json")
            assert r.status_code == 400, (url, bad, r.status_code, r.content[:300])
            error = r.json()["error"]
            assert (error["code"], error["details"].get("field")) == (code, field), (
                url,
                bad,
                error,
            )
            assert field in error["message"], error
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
