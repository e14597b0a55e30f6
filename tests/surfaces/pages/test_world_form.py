"""Creating a world in the browser with every option of the API: seed, start time, branch,
replay and budget; errors shown on the form naming the field; readers told what they may not
do; the Worlds page and a turn page lead to the form."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scenarios_app.services import scenario_assemble
from tests.surfaces.pages.test_world_pages import run_turn
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO, _rule_world
from worlds_app.models import World, WorldBudget

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


def _form(**fields: str) -> dict[str, str]:
    return {"slug": "", "scenario": "", **fields}


def test_a_world_with_every_option_from_the_form(operator: Client) -> None:
    scenario = scenario_assemble(data=RULE_SCENARIO)["scenario_hash"]
    page = operator.get("/create-world/").content.decode()
    for name in ("seed", "start_time", "branch_world", "replay_world", "max_cost_total"):
        assert f'name="{name}"' in page
    answer = operator.post(
        "/create-world/",
        _form(
            scenario=scenario,
            slug="formed",
            name="Formed by hand",
            start_time="2026-05-01T08:00:00+00:00",
            seed="77",
            max_tokens_total="5000",
            max_cost_total="0.5",
        ),
    )
    assert answer.status_code == 302 and answer["Location"] == "/worlds/formed/"
    world = World.objects.get(slug="formed")
    assert (world.seed, world.name) == (77, "Formed by hand")
    budget = WorldBudget.objects.get(world=world)
    assert budget.max_tokens_total == 5000 and str(budget.max_cost_total).startswith("0.5")
    run_turn("formed")
    branch = operator.post(
        "/create-world/",
        _form(slug="formed-b", branch_world="formed", branch_turn="1", seed="78"),
    )
    assert branch.status_code == 302
    made = World.objects.get(slug="formed-b")
    assert (made.branched_from_slug, made.current_turn, made.seed) == ("formed", 1, 78)
    replay = operator.post(
        "/create-world/",
        _form(
            scenario=scenario, slug="formed-r", replay_world="formed", replay_mode="replay_strict"
        ),
    )
    assert replay.status_code == 302
    assert World.objects.get(slug="formed-r").seed == 77  # a replay takes its source's seed


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"seed": "-3"}, "seed"),
        ({"seed": "seven"}, "seed"),
        ({"branch_world": "base", "branch_turn": "x"}, "branch_from.turn"),
        ({"branch_world": "base", "branch_turn": "9"}, "branch_from.turn"),
        ({"start_time": "tomorrow"}, "start_time"),
        ({"max_tokens_total": "lots"}, "budget.max_tokens_total"),
    ],
)
def test_bad_fields_are_shown_on_the_form_and_nothing_is_written(
    operator: Client, fields: dict[str, str], field: str
) -> None:
    _rule_world("base", None)
    scenario = World.objects.get(slug="base").scenario_id
    before = World.objects.count()
    answer = operator.post("/create-world/", _form(scenario=scenario, slug="bad", **fields))
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "Cannot create the world" in page and field in page
    assert 'value="bad"' in page  # what was typed is kept
    assert World.objects.count() == before


def test_readers_are_told_creating_worlds_needs_operators(
    client: Client, reader_user: User
) -> None:
    client.force_login(reader_user)
    answer = client.get("/create-world/")
    assert answer.status_code == 403
    assert "Creating worlds requires membership of the operators group" in answer.content.decode()
    assert "New world" not in client.get("/worlds/").content.decode()


def test_the_worlds_page_and_a_turn_page_lead_to_the_form(operator: Client) -> None:
    _rule_world("base", None)
    run_turn("base")
    assert 'href="/create-world/"' in operator.get("/worlds/").content.decode()
    turn = operator.get("/worlds/base/turns/1/").content.decode()
    assert "/create-world/?branch_world=base&amp;branch_turn=1" in turn
