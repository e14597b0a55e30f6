"""The cross-world indexes — attempts, LLM calls, source invocations — filtered by experiment
(slug) and arm (label), through the API and the pages; a world outside the experiment is never
listed, and a bad filter is a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import ScriptedLLM
from tests.surfaces.pages.test_experiment_pages import expression_metric
from tests.surfaces.pages.test_world_pages import ANT_OK, _body, make_world, run_turn
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_run
from worlds_app.services.experiments import experiment_create

pytestmark = pytest.mark.django_db

INDEXES = ("/api/attempts/", "/api/llm-calls/", "/api/source-invocations/")


@pytest.fixture
def ants(scripted_llm: ScriptedLLM, toy_sources: str) -> None:
    """An experiment "ants" (arms control and treated, two replicates, one turn each: one LLM
    call per world) and a world "loner" outside it, one turn run."""
    scripted_llm.script(*([ANT_OK] * 5))
    scenario = scenario_assemble(data=_body("ant_on_plate"))["scenario_hash"]
    experiment_create(
        data={
            "slug": "ants",
            "arms": [
                {"label": "control", "scenario_ref": {"hash": scenario}},
                {"label": "treated", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 2,
            "turns": 1,
            "metrics": [{"hash": expression_metric("patched", "length(patches)")}],
        },
        created_by="olga",
    )
    for attempt_id in TurnAttempt.objects.filter(world__experiment__slug="ants").values_list(
        "id", flat=True
    ):
        assert turn_attempt_run(attempt_id=str(attempt_id), owner="test") == "committed"
    make_world("ant_on_plate", "loner")
    assert run_turn("loner").status == AttemptStatus.COMMITTED


def _count(client: APIClient, url: str, **params: str) -> int:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return int(response.json()["count"])


def _worlds(client: APIClient, url: str, **params: str) -> set[str]:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return {row["world"] for row in response.json()["results"]}


@pytest.mark.parametrize("url", INDEXES)
def test_each_index_filters_by_experiment_and_arm(
    reader_client: APIClient, ants: None, url: str
) -> None:
    everything = _count(reader_client, url)
    inside = _count(reader_client, url, experiment="ants")
    assert inside >= 4 and inside + _count(reader_client, url, world="loner") == everything
    assert _worlds(reader_client, url, experiment="ants") == {
        f"ants--{arm}--{i}" for arm in ("control", "treated") for i in (1, 2)
    }
    assert _worlds(reader_client, url, experiment="ants", arm="treated") == {
        "ants--treated--1",
        "ants--treated--2",
    }
    treated = _count(reader_client, url, experiment="ants", arm="treated")
    assert 2 <= treated < inside
    assert _count(reader_client, url, experiment="nothing") == 0
    assert _count(reader_client, url, arm="nothing") == 0
    assert _count(reader_client, url, world="loner", experiment="ants") == 0
    bad = reader_client.get(url, {"arm": "Not An Arm"})
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["field"] == "arm"


@pytest.mark.parametrize("path", ["/attempts/", "/llm-calls/", "/invocations/"])
def test_each_index_page_filters_by_experiment_and_arm(
    client: Client, reader_user: Any, ants: None, path: str
) -> None:
    client.force_login(reader_user)
    page = client.get(path, {"experiment": "ants", "arm": "treated"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="experiment" value="ants"' in html and 'name="arm" value="treated"' in html
    assert "ants--treated--1" in html and "ants--treated--2" in html
    assert "ants--control--1" not in html and "loner" not in html
    everything = client.get(path).content.decode()
    assert "ants--control--1" in everything and "loner" in everything
