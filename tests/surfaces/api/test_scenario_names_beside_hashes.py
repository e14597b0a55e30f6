"""Names beside hashes: world reads carry ``scenario_names`` (the names pointing at the world's
scenario now), the experiment read ``arm_scenarios`` (per arm, its scenario's hash and names),
and the world list, world page and experiment page show the names beside the short hash."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scenarios_app.services import scenario_name_set, scenario_name_unset
from tests.surfaces.pages.test_experiment_pages import design, expression_metric, stored_scenario
from worlds_app.services import world_create
from worlds_app.services.experiments import experiment_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def named() -> dict[str, str]:
    """A scenario two names point at, another no name points at, a world of each and an
    experiment whose arms use one each."""
    picnic = stored_scenario()
    scenario_name_set(name="picnic", scenario_hash=picnic, note="")
    scenario_name_set(name="outing", scenario_hash=picnic, note="")
    world_create(data={"slug": "lunch", "scenario_ref": {"hash": picnic}})
    metric = expression_metric("patched", "length(patches)")
    experiment_create(data=design("breeze", picnic, [metric]), created_by="olga")
    return {"picnic": picnic}


def test_world_reads_carry_the_names_of_their_scenario(
    reader_client: APIClient, named: dict[str, str]
) -> None:
    world = reader_client.get("/api/worlds/lunch/").json()
    assert world["scenario_hash"] == named["picnic"]
    assert world["scenario_names"] == ["outing", "picnic"]
    listed = {w["slug"]: w for w in reader_client.get("/api/worlds/").json()["results"]}
    assert listed["lunch"]["scenario_names"] == ["outing", "picnic"]
    # the name moves: the read says so at once
    scenario_name_unset(name="outing", note="gone")
    assert reader_client.get("/api/worlds/lunch/").json()["scenario_names"] == ["picnic"]


def test_the_experiment_read_carries_each_arms_scenario_names(
    reader_client: APIClient, named: dict[str, str]
) -> None:
    read = reader_client.get("/api/experiments/breeze/").json()
    assert read["arm_scenarios"] == {
        arm: {"scenario_hash": named["picnic"], "scenario_names": ["outing", "picnic"]}
        for arm in ("control", "treated")
    }


def test_pages_show_the_names_beside_the_short_hash(
    client: Client, reader_user: Any, named: dict[str, str]
) -> None:
    client.force_login(reader_user)
    short = named["picnic"][:12]
    header = client.get("/worlds/lunch/").content.decode().split('id="world-scenario">')[1]
    header = header.split("</span>")[0]
    assert '<a class="scenario-name" href="/names/outing/">outing</a>' in header
    assert f"{short}…" in header
    arms = client.get("/experiments/breeze/").content.decode().split('class="arm-scenario">')
    assert len(arms) == 3
    assert all('href="/names/picnic/">picnic</a>' in cell.split("</td>")[0] for cell in arms[1:])
    listed = client.get("/worlds/").content.decode()
    assert 'href="/names/picnic/">picnic</a>' in listed
