"""Two worlds side by side : the API, the page and the selector.

The worlds are rule-policy worlds (no model), one from ``ant_on_plate_rules`` and one from a fork
of it that changes one entity's state, so they differ from turn 0 in that entity only — and then
wherever the ant's rules read it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scenarios_app.services import metric_put, scenario_assemble, scenario_fork
from tests.support.worlds import create_world, entity_of, fixture_body, run_turn
from worlds_app.comparison import MAX_VALUE_CHARS, _memory, world_compare
from worlds_app.models import World
from worlds_app.services import world_create
from worlds_app.services.measurements import world_measure

pytestmark = pytest.mark.django_db

SCENARIO = "ant_on_plate_rules"
FAR_CRUMB = "a small bread crumb that rolled off the plate, out of reach."


def _fork_with_crumb_state(state: str) -> str:
    base = fixture_body(SCENARIO)
    parent = scenario_assemble(data=base)["scenario_hash"]
    entities = base["entities"]
    entity_of(base, "crumb")["state"] = state
    return scenario_fork(
        data={"primary_parent": {"hash": parent}, "changes": {"entities": entities}}
    )["scenario_hash"]


@pytest.fixture
def twins() -> tuple[str, str]:
    """Two worlds of the same scenario, two turns each: identical."""
    for slug in ("left", "right"):
        create_world(SCENARIO, slug)
        for _ in range(2):
            assert run_turn(slug).status == "committed"
    return "left", "right"


@pytest.fixture
def diverged() -> tuple[str, str]:
    """A world and a fork's world whose crumb differs; the fork's world has one turn more."""
    create_world(SCENARIO, "base")
    fork_hash = _fork_with_crumb_state(FAR_CRUMB)
    world_create(data={"slug": "fork", "scenario_ref": {"hash": fork_hash}})
    for _ in range(2):
        assert run_turn("base").status == "committed"
    for _ in range(3):
        assert run_turn("fork").status == "committed"
    return "base", "fork"


def test_compare_names_the_differing_entity_and_the_first_divergent_turn(
    reader_client: APIClient, diverged: tuple[str, str]
) -> None:
    response = reader_client.get("/api/worlds/base/compare/fork/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["first_divergent_turn"] == 0
    assert body["common_turns"] == 3
    assert (body["world_current_turn"], body["other_current_turn"]) == (2, 3)
    assert body["longer"] == "other"
    assert [t["number"] for t in body["turns"]] == [0, 1, 2]
    turn0 = body["turns"][0]
    assert turn0["identical"] is False
    assert turn0["left_state_hash"] != turn0["right_state_hash"]
    (crumb,) = [e for e in turn0["entities"] if e["id"] == "crumb"]
    assert crumb["present_in"] == "both"
    assert crumb["state"]["left"].startswith("a small bread crumb resting")
    assert crumb["state"]["right"] == FAR_CRUMB
    assert crumb["memory"] is None
    assert turn0["environments"] == []
    # Only the crumb differs at turn 0: the rest of the plate is the same.
    assert [e["id"] for e in turn0["entities"]] == ["crumb"]


def test_identical_worlds_have_no_divergent_turn(
    reader_client: APIClient, twins: tuple[str, str]
) -> None:
    body = reader_client.get("/api/worlds/left/compare/right/").json()
    assert body["first_divergent_turn"] is None
    assert body["longer"] is None
    assert [t["identical"] for t in body["turns"]] == [True, True, True]
    assert all(t["entities"] == [] and t["environments"] == [] for t in body["turns"])


def test_compare_pages_over_turns(reader_client: APIClient, diverged: tuple[str, str]) -> None:
    body = reader_client.get("/api/worlds/base/compare/fork/?limit=1&offset=2").json()
    assert (body["count"], body["limit"], body["offset"]) == (3, 1, 2)
    assert [t["number"] for t in body["turns"]] == [2]
    # The first divergent turn is over the whole common range, not the page.
    assert body["first_divergent_turn"] == 0
    past = reader_client.get("/api/worlds/base/compare/fork/?offset=10").json()
    assert past["turns"] == []


def test_compare_query_count_does_not_grow_with_turns(
    diverged: tuple[str, str], django_assert_max_num_queries: Any
) -> None:
    # two worlds, the hashes, the page's states, the page's tool calls, and each world's metric
    # series (its row, its measurements, their metrics): whatever the number of turns.
    with django_assert_max_num_queries(11):
        result = world_compare(slug="base", other="fork", params={})
    assert len(result["turns"]) == 3
    for _ in range(3):
        run_turn("base")
    with django_assert_max_num_queries(11):
        assert len(world_compare(slug="base", other="fork", params={})["turns"]) == 4


def test_compare_unknown_world_is_404_and_bad_slug_400(
    reader_client: APIClient, twins: tuple[str, str]
) -> None:
    missing = reader_client.get("/api/worlds/left/compare/nope/")
    assert missing.status_code == 404
    assert missing.json()["error"]["details"]["field"] == "other"
    bad = reader_client.get("/api/worlds/left/compare/Not_A_Label/")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_slug"
    assert reader_client.get("/api/worlds/left/compare/right/?limit=0").status_code == 400


def test_compare_page_answers_json_with_the_same_data(
    reader_user: Any, reader_client: APIClient, diverged: tuple[str, str]
) -> None:
    client = Client()
    client.force_login(reader_user)
    page = client.get("/worlds/base/compare/fork/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "First divergence at turn 0.</strong>" in text
    assert FAR_CRUMB in text
    data = client.get("/worlds/base/compare/fork/?format=json").json()
    assert data["first_divergent_turn"] == 0
    assert data == reader_client.get("/api/worlds/base/compare/fork/").json()


def test_memory_difference_is_the_lines_after_the_shared_ones() -> None:
    diff = _memory("saw a crumb\nate it", "saw a crumb\nwalked west\nslept")
    assert diff["left"] == "ate it"
    assert diff["right"] == "walked west\nslept"
    assert diff["common_prefix_chars"] == len("saw a crumb\n")
    appended = _memory("one", "one\ntwo")
    assert (appended["left"], appended["right"]) == ("", "two")
    trailing = _memory("a\nb", "a\nb\n")
    assert (trailing["left"], trailing["right"]) == ("a\nb", "a\nb\n")
    long = _memory("", "x" * (MAX_VALUE_CHARS + 5))
    assert long["truncated"] is True
    assert len(long["right"] or "") == MAX_VALUE_CHARS


def _expression(label: str, text: str, aggregate: str) -> dict[str, Any]:
    return {
        "version": 1,
        "label": label,
        "kind": "expression",
        "aggregate": aggregate,
        "expression": text,
    }


def test_the_comparison_shows_each_metric_on_both_worlds(
    reader_user: Any, reader_client: APIClient, diverged: tuple[str, str]
) -> None:
    """A metric measured on both worlds (as an experiment measures its paired worlds): each
    turn's value and each world's aggregate, side by side, in the API and on the page; a metric
    measured on one world only is not compared."""
    far = metric_put(
        content=_expression("crumb_far", f"entities.crumb.state == '{FAR_CRUMB}'", "mean")
    )["hash"]
    turns = metric_put(content=_expression("turn_no", "turn", "max"))["hash"]
    only_base = metric_put(content=_expression("only_base", "turn", "sum"))["hash"]
    world_measure(world_id=World.objects.get(slug="base").pk, metric_hashes=[far, turns, only_base])
    world_measure(world_id=World.objects.get(slug="fork").pk, metric_hashes=[far, turns])

    body = reader_client.get("/api/worlds/base/compare/fork/").json()
    by_label = {m["label"]: m for m in body["metrics"]}
    assert set(by_label) == {"crumb_far", "turn_no"}
    crumb = by_label["crumb_far"]
    assert crumb["hash"] == far and crumb["aggregate"] == "mean"
    # base's crumb is never far; the fork's is far until its ant's rules move it (turn 2)
    assert [(t["turn"], t["world"], t["other"]) for t in crumb["turns"]] == [
        (0, 0.0, 1.0),
        (1, 0.0, 1.0),
        (2, 0.0, 0.0),
        (3, None, 0.0),  # the fork ran one turn more
    ]
    # the aggregates leave turn 0 (the baseline) out: base's mean 0, the fork's 1/3
    assert crumb["world_value"] == 0.0 and crumb["other_value"] == pytest.approx(1 / 3)
    assert (by_label["turn_no"]["world_value"], by_label["turn_no"]["other_value"]) == (2.0, 3.0)

    client = Client()
    client.force_login(reader_user)
    page = client.get("/worlds/base/compare/fork/")
    assert page.status_code == 200
    text = page.content.decode()
    section = text[text.index('id="compare-metrics"') :]
    section = section[: section.index("</section>")]
    assert "<code>crumb_far</code>" in section and "<code>turn_no</code>" in section
    assert "only_base" not in section
    # the aggregates side by side, then each turn's row
    both = '<strong class="mono">0</strong></td>\n      <td><strong class="mono">0.3333</strong>'
    assert both in section
    assert '<td class="num">1</td><td class="mono">0</td><td class="mono">1</td>' in section
    assert '<td class="num">3</td><td class="mono">—</td><td class="mono">0</td>' in section
    data = client.get("/worlds/base/compare/fork/?format=json").json()
    assert data["metrics"] == body["metrics"]
