"""World budgets through the API: set at creation, changed later, history kept."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.models import World, WorldBudget

pytestmark = pytest.mark.django_db

SCENARIO = "ant_on_plate_rules"


@pytest.fixture
def scenario(db: Any) -> str:
    return scenario_assemble(data=load_fixture(SCENARIO))["scenario_hash"]


def create(client: APIClient, **extra: Any) -> Any:
    return client.post(
        "/api/worlds/",
        {"slug": "plate", "scenario_ref": {"name": SCENARIO}, **extra},
        format="json",
    )


def test_budget_at_creation_then_changed_with_history(
    operator_client: APIClient, reader_client: APIClient, scenario: str
) -> None:
    response = create(
        operator_client, budget={"max_tokens_total": 5000, "max_cost_per_turn": "0.25"}
    )
    assert response.status_code == 201, response.content
    assert response.json()["budget"] == {
        "max_tokens_per_turn": None,
        "max_cost_per_turn": "0.2500000000",
        "max_tokens_total": 5000,
        "max_cost_total": None,
    }
    assert response.json()["cost"]["total"] is None  # nothing spent, nothing priced

    changed = operator_client.put(
        "/api/worlds/plate/budget/", {"max_tokens_per_turn": 900}, format="json"
    )
    assert changed.status_code == 200, changed.content
    body = reader_client.get("/api/worlds/plate/budget/").json()
    assert body["budget"]["max_tokens_per_turn"] == 900
    assert body["budget"]["max_tokens_total"] is None  # a limit left out is lifted
    assert [h["max_tokens_total"] for h in body["history"]] == [None, 5000]
    assert [h["set_by"] for h in body["history"]] == ["ops", "ops"]
    assert reader_client.get("/api/worlds/plate/").json()["budget"]["max_tokens_per_turn"] == 900


def test_readers_cannot_change_a_budget(
    operator_client: APIClient, reader_client: APIClient, scenario: str
) -> None:
    assert create(operator_client).status_code == 201
    response = reader_client.put(
        "/api/worlds/plate/budget/", {"max_tokens_total": 1}, format="json"
    )
    assert response.status_code == 403
    assert not WorldBudget.objects.exists()


@pytest.mark.parametrize(
    "budget",
    [
        {"max_tokens_total": 0},
        {"max_tokens_total": "100"},
        {"max_cost_total": "-1"},
        {"max_cost_total": "lots"},
        {"max_minutes": 3},
    ],
)
def test_bad_budgets_are_refused(
    operator_client: APIClient, scenario: str, budget: dict[str, Any]
) -> None:
    response = create(operator_client, budget=budget)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] in ("invalid_budget", "invalid_input")
    assert not World.objects.exists()
