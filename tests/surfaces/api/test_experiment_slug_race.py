"""Two creates of one experiment slug at the same moment: one 201 and one 409
``experiment_exists`` — the unique index decides the race — never a 500, and one experiment's
worlds written once."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.models import Experiment, World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_a_slug_race_gives_one_201_and_409s(live_server: Any, operator_user: User) -> None:
    scenario = scenario_assemble(data=fixture_body("picnic_rules"))["scenario_hash"]
    metric = metric_put(
        content={
            "version": 1,
            "label": "t",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    design = {
        "slug": "raced",
        "arms": [
            {"label": "a", "scenario_ref": {"hash": scenario}},
            {"label": "b", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 40,
        "turns": 1,
        "metrics": [{"hash": metric}],
    }
    token = Token.objects.get_or_create(user=operator_user)[0].key
    start = threading.Barrier(4)
    answers: list[tuple[int, dict[str, Any]]] = []

    def create() -> None:
        with httpx.Client(
            base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=60
        ) as http:
            start.wait()
            answer = http.post("/api/experiments/", json=design)
            answers.append((answer.status_code, answer.json()))

    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(status for status, _ in answers)
    assert statuses == [201, 409, 409, 409], answers
    for status, body in answers:
        if status == 409:
            assert body["error"]["code"] in ("experiment_exists", "world_exists"), body
            assert body["error"]["details"]["field"] == "slug"
    assert Experiment.objects.count() == 1
    assert World.objects.filter(experiment__slug="raced").count() == 80
