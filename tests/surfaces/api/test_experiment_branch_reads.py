"""A branched experiment read everywhere the same (docs/experiments.md, "Experiments from a
branch"): its worlds start at the parent's turn 2, so its progress, its failed-world count and
its index row count turns 3…4 — one ``ExperimentDesign.progress`` for the detail, the index,
the pages and the CLI. Before the design was typed, the index summed the worlds' absolute turns
(16 of 8 committed) and compared them with the number of turns (no world counted failed), and
the page said "turns 1…2"."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.models import AttemptStatus, TurnAttempt, World
from worlds_app.services import turn_attempt_run, world_create
from worlds_app.services.experiments import experiment_create
from worlds_app.services.measurements import world_measure

pytestmark = pytest.mark.django_db


def _run_queued(world: str | None = None, experiment: str | None = None) -> None:
    attempts = TurnAttempt.objects.filter(status=AttemptStatus.QUEUED)
    if world is not None:
        attempts = attempts.filter(world__slug=world)
    if experiment is not None:
        attempts = attempts.filter(world__experiment__slug=experiment)
    for attempt_id in attempts.order_by("world_id", "seq").values_list("id", flat=True):
        assert turn_attempt_run(attempt_id=str(attempt_id), owner="test") == "committed"


@pytest.fixture
def branched() -> dict[str, Any]:
    """A parent run to turn 2, then a 2 x 2 experiment of 2 turns from its turn 2; one world's
    last turn is cancelled, so it stops at turn 3 of 4 (failed)."""
    scenario = str(scenario_assemble(data=fixture_body("picnic_rules"))["scenario_hash"])
    world_create(data={"slug": "trunk", "scenario_ref": {"hash": scenario}})
    from worlds_app.services import turn_attempt_enqueue

    turn_attempt_enqueue(slug="trunk", count=2)
    _run_queued(world="trunk")
    metric = metric_put(
        content={
            "version": 1,
            "label": "turn_number",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    experiment_create(
        data={
            "slug": "limb",
            "arms": [
                {"label": "a", "scenario_ref": {"hash": scenario}},
                {"label": "b", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 2,
            "turns": 2,
            "metrics": [{"hash": metric}],
            "branch_from": {"world": "trunk", "turn": 2},
        },
        created_by="olga",
    )
    short = TurnAttempt.objects.filter(world__slug="limb--b--2").order_by("seq").last()
    assert short is not None
    TurnAttempt.objects.filter(pk=short.pk).update(status=AttemptStatus.CANCELLED)
    _run_queued(experiment="limb")
    for world_id in World.objects.filter(experiment__slug="limb").values_list("pk", flat=True):
        world_measure(world_id=world_id, metric_hashes=[metric])
    return {"metric": metric}


def test_a_branched_experiment_counts_its_own_turns_in_detail_and_index(
    branched: dict[str, Any], operator_client: APIClient
) -> None:
    detail = operator_client.get("/api/experiments/limb/").json()
    (row,) = operator_client.get("/api/experiments/").json()["results"]
    # 3 worlds ran turns 3 and 4, one only turn 3: 7 of 8; measured turns 2, 3 and 4
    expected = {
        "worlds": 4,
        "turns_committed": 7,
        "turns_planned": 8,
        "measurements_done": 11,
        "measurements_planned": 12,
    }
    assert {k: detail["progress"][k] for k in expected} == expected
    assert row["progress"] == expected
    assert detail["status"] == row["status"] == "failed"
    assert [w["slug"] for w in detail["failed_worlds"]] == ["limb--b--2"]
    assert row["failed_worlds"] == 1
    assert detail["design"]["first_turn"] == row["first_turn"] == 2
    assert detail["design"]["branch_from"] == {"world": "trunk", "turn": 2}


def test_the_pages_say_the_branched_turns(
    branched: dict[str, Any], client: Client, operator_user: User
) -> None:
    client.force_login(operator_user)
    index = client.get("/experiments/").content.decode()
    assert "1 world failed" in index
    page = client.get("/experiments/limb/").content.decode()
    assert "of its turns 3…4" in page
    assert "turns 3…4" in page and "turns 1…2" not in page
    assert "3/4" in page and "4/4" in page  # each world's turn of its last
    data = client.get("/experiments/limb/?format=json").json()
    assert data["progress"]["turns_committed"] == 7
    assert data["design"]["first_turn"] == 2
