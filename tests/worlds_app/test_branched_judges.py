"""A branched experiment's judge (docs/experiments.md, "Experiments from a branch"): the turns
its worlds share before the branch point are the parent's rows, judged once as the parent's
(not once per world), counted once in the estimate, and read by every world as its own history;
its progress and index count the worlds' own turns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from cognition_app.sources.retry import RATE_LIMITED_TRIES
from scenarios_app.services import metric_put, response_source_put, scenario_assemble
from tests.cognition_app.test_rule_tools import _scenario as rule_tool_scenario
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import ScriptedLLM
from tests.worlds_app.test_measurements import buyers_world, judge
from worlds_app.measurement_selectors import turn_measurements
from worlds_app.models import AttemptStatus, Measurement, TurnAttempt, World
from worlds_app.services import turn_attempt_run
from worlds_app.services.measurements import world_measure

pytestmark = pytest.mark.django_db


def _design(scenario: str, metric: str) -> dict[str, Any]:
    return {
        "slug": "limb",
        "arms": [
            {"label": "a", "scenario_ref": {"hash": scenario}},
            {"label": "b", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 2,
        "turns": 1,
        "metrics": [{"hash": metric}],
        "branch_from": {"world": "trunk", "turn": 2},
        # every judge request sent, so the count shows what is measured once (with reuse, the
        # worlds' identical branch-point turns would share one reply; tests/worlds_app/test_reuse)
        "reuse": "off",
    }


def test_the_shared_turns_are_judged_once_and_counted_once(
    scripted_llm: ScriptedLLM, toy_sources: str, operator_client: APIClient
) -> None:
    buyers_world("trunk", 2)  # turns 0, 1, 2: the experiment branches from turn 2
    scenario = scenario_assemble(data=rule_tool_scenario({"item": "candy_bar"}))["scenario_hash"]
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    metric = metric_put(content=judge(source))["hash"]
    scripted_llm.route(lambda body: json.dumps({"score": 3, "rationale": "plausible"}))

    design = _design(scenario, metric)
    estimate = operator_client.post("/api/experiments/estimate/", design, format="json")
    assert estimate.status_code == 200, estimate.json()
    # 4 worlds by their own measured turns (2, the branch point, and 3), plus the 2 shared turns
    # (0 and 1) once; each call as often as a 429 allows
    own, shared = 4 * 2, 2
    assert estimate.json()["calls"]["judges"] == (own + shared) * RATE_LIMITED_TRIES

    created = operator_client.post("/api/experiments/", design, format="json")
    assert created.status_code == 201, created.json()
    queued = TurnAttempt.objects.filter(status=AttemptStatus.QUEUED, world__experiment__slug="limb")
    for attempt_id in queued.order_by("world_id", "seq").values_list("id", flat=True):
        assert turn_attempt_run(attempt_id=str(attempt_id), owner="test") == "committed"
    worlds = list(World.objects.filter(experiment__slug="limb").values_list("pk", flat=True))
    for _ in range(2):  # measuring again asks nothing
        for world_id in worlds:
            world_measure(world_id=world_id, metric_hashes=[metric])
    assert len(scripted_llm.requests) == own + shared
    judged = sorted(
        Measurement.objects.filter(metric_id=metric).values_list("world__slug", "turn_number")
    )
    assert [row for row in judged if row[0] == "trunk"] == [("trunk", 0), ("trunk", 1)]
    assert len([row for row in judged if row[0] != "trunk"]) == own
    assert {turn for slug, turn in judged if slug != "trunk"} == {2, 3}

    # every world reads the shared turns as its history's
    listed = operator_client.get("/api/worlds/limb--b--2/measurements/").json()["results"]
    assert [m["turn"] for m in listed] == [0, 1, 2, 3]
    (shared_turn,) = turn_measurements(slug="limb--a--1", number=1)
    assert (shared_turn["turn"], shared_turn["value"]) == (1, 3.0)

    detail = operator_client.get("/api/experiments/limb/").json()
    (row,) = operator_client.get("/api/experiments/").json()["results"]
    expected = {
        "worlds": 4,
        "turns_committed": 4,
        "turns_planned": 4,
        "measurements_done": own,
        "measurements_planned": own,
    }
    assert {k: detail["progress"][k] for k in expected} == expected
    assert row["progress"] == expected
    assert detail["status"] == row["status"] == "completed"
    assert row["failed_worlds"] == 0
