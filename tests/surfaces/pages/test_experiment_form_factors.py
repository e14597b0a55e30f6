"""Factors in the launch form (docs/designs.md, "Designing a factorial experiment"): a base,
factors whose levels fork it as JSON and an optional half fraction reach the design as the API
takes them, so the arms are the ones the API makes from the same body; a bad level is a form
error next to that level (naming ``factors[i].levels[j]…``) with nothing written; factors and
levels are added and removed on the form."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from scenarios_app.models import Scenario
from tests.surfaces.pages.test_experiment_pages import expression_metric, stored_scenario
from worlds_app.models import Experiment, World

pytestmark = pytest.mark.django_db
THIRST = {"changes": {"description": "A thirsty ant."}}
FOUNTAIN = {"changes": {"chronon_seconds": 120}}
RAIN = {"changes": {"description": "Rain on the plate."}}


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


def _form(
    base: str, metric: str, *factors: tuple[str, dict[str, Any] | str], **extra: str
) -> dict[str, Any]:
    """A factorial launch: each factor "no" (the base) and "yes" (the fork given, JSON text
    when a string)."""
    data: dict[str, Any] = {
        "action": "launch",
        "design_kind": "factors",
        "slug": "grid",
        "base": base,
        "replicates": "3",
        "turns": "1",
        "metrics": [metric],
        "factor_name": [name for name, _ in factors],
    }
    for i, (_, fork) in enumerate(factors):
        data[f"factor_{i}_label"] = ["no", "yes"]
        data[f"factor_{i}_fork"] = ["", fork if isinstance(fork, str) else json.dumps(fork)]
    data.update(extra)
    return data


def _api_body(
    base: str, metric: str, *factors: tuple[str, dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "slug": "grid-api",
        "base": {"hash": base},
        "factors": [
            {"name": name, "levels": [{"label": "no"}, {"label": "yes", "fork": fork}]}
            for name, fork in factors
        ],
        "replicates": 3,
        "turns": 1,
        "metrics": [{"hash": metric}],
        **extra,
    }


def test_a_two_by_two_from_the_form_makes_the_arms_the_api_makes(
    operator: Client, operator_client: APIClient
) -> None:
    base, metric = stored_scenario(), expression_metric("any", "`true`")
    answer = operator.post(
        "/experiments/new/", _form(base, metric, ("thirst", THIRST), ("fountain", FOUNTAIN))
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert answer["Location"] == "/experiments/grid/"
    design = Experiment.objects.get(slug="grid").typed_design
    assert design.factorial is not None
    by_api = operator_client.post(
        "/api/experiments/",
        _api_body(base, metric, ("thirst", THIRST), ("fountain", FOUNTAIN)),
        format="json",
    )
    assert by_api.status_code == 201, by_api.json()
    api_arms = [(a["label"], a["scenario_ref"]["hash"]) for a in by_api.json()["design"]["arms"]]
    form_arms = [(a.label, a.scenario_hash) for a in design.arms]
    assert form_arms == api_arms and len(form_arms) == 4
    assert design.control == "thirst-no--fountain-no"
    assert World.objects.filter(experiment__slug="grid").count() == 4 * 3


def test_a_half_fraction_from_the_form_runs_four_of_eight_arms(operator: Client) -> None:
    base, metric = stored_scenario(), expression_metric("any", "`true`")
    factors = (("thirst", THIRST), ("fountain", FOUNTAIN), ("rain", RAIN))
    answer = operator.post("/experiments/new/", _form(base, metric, *factors, fraction="1/2"))
    assert answer.status_code == 302, answer.content.decode()[:2000]
    design = Experiment.objects.get(slug="grid").typed_design
    assert len(design.arms) == 4
    assert design.factorial is not None and design.factorial.fraction == "1/2"
    page = operator.get("/experiments/grid/").content.decode()
    assert "I = -ABC" in page


@pytest.mark.parametrize(
    ("fork", "field", "key"),
    [
        ("{not json", "factors[1].levels[1].fork", "factor-1-level-1-fork"),
        (
            {"changes": {"environment_removals": ["no_such_environment"]}},
            "factors[1].levels[1].fork.changes.environment_removals[0]",
            "factor-1-level-1-fork",
        ),
    ],
)
def test_a_bad_level_is_shown_next_to_it_and_nothing_is_written(
    operator: Client, fork: Any, field: str, key: str
) -> None:
    base, metric = stored_scenario(), expression_metric("any", "`true`")
    stored = Scenario.objects.count()
    answer = operator.post(
        "/experiments/new/", _form(base, metric, ("thirst", THIRST), ("fountain", fork))
    )
    assert answer.status_code == 400
    page = answer.content.decode()
    assert f'<code class="author-field">{field}</code>' in page
    assert f'id="{key}-error"' in page
    # what was typed is still there, and the factors half is the one shown
    assert 'id="kind-factors" checked' in page
    assert "A thirsty ant." in page
    assert not Experiment.objects.exists() and not World.objects.exists()
    assert Scenario.objects.count() == stored


def test_a_missing_base_and_a_bad_name_name_their_fields(operator: Client) -> None:
    metric = expression_metric("any", "`true`")
    answer = operator.post("/experiments/new/", _form("", metric, ("thirst", THIRST), ("b", {})))
    assert answer.status_code == 400
    assert 'id="base-error"' in answer.content.decode()
    answer = operator.post(
        "/experiments/new/",
        _form(stored_scenario(), metric, ("Thirst!", THIRST), ("fountain", FOUNTAIN)),
    )
    assert answer.status_code == 400
    assert 'id="factor-0-name-error"' in answer.content.decode()
    assert not Experiment.objects.exists()


def test_factors_and_levels_are_added_and_removed_on_the_form(operator: Client) -> None:
    base, metric = stored_scenario(), expression_metric("any", "`true`")
    typed = _form(base, metric, ("thirst", THIRST), ("fountain", FOUNTAIN))

    def rows(page: str) -> tuple[int, list[int]]:
        factors = len(re.findall(r'data-factor-row="\d+"', page))
        levels = [len(re.findall(rf'name="factor_{i}_label"', page)) for i in range(factors)]
        return factors, levels

    page = operator.post("/experiments/new/", {**typed, "action": "add_factor"}).content.decode()
    assert rows(page) == (3, [2, 2, 2])
    page = operator.post("/experiments/new/", {**typed, "action": "add_level_1"}).content.decode()
    assert rows(page) == (2, [2, 3])
    assert "A thirsty ant." in page  # what was typed is kept
    three = {**typed, "factor_1_label": ["no", "yes", "more"], "factor_1_fork": ["", "{}", "{}"]}
    page = operator.post(
        "/experiments/new/", {**three, "action": "remove_level_1_1"}
    ).content.decode()
    assert rows(page) == (2, [2, 2])
    assert 'value="more"' in page and 'value="yes"' not in page.split("factor-1-name")[1]
    # two factors and two levels are the least: no button removes below them
    page = operator.post("/experiments/new/", {**typed, "action": "remove_factor_0"}).content
    assert rows(page.decode()) == (2, [2, 2])
    assert not Experiment.objects.exists()


def test_reuse_is_chosen_on_the_form_and_a_bad_value_names_the_field(operator: Client) -> None:
    """The form's Replies choice (reuse exact by default, or off) reaches the design; anything
    else is refused naming ``reuse``, nothing written."""
    page = operator.get("/experiments/new/").content.decode()
    assert 'name="reuse" value="exact" checked' in page
    base, metric = stored_scenario(), expression_metric("any", "`true`")
    typed = _form(base, metric, ("thirst", THIRST), ("fountain", FOUNTAIN))
    answer = operator.post("/experiments/new/", {**typed, "reuse": "sometimes"})
    assert answer.status_code == 400
    assert 'id="reuse-error"' in answer.content.decode()
    assert not Experiment.objects.exists()
    answer = operator.post("/experiments/new/", {**typed, "reuse": "off"})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert Experiment.objects.get(slug="grid").typed_design.reuse == "off"


def test_batch_mode_is_chosen_on_the_form_and_a_bad_value_names_the_field(
    operator: Client,
) -> None:
    """The form's Sending choice (online by default, or batch) reaches the design; anything
    else is refused naming ``mode``, nothing written; a batch-mode experiment's page shows its
    ticks, parked attempts and pending requests."""
    page = operator.get("/experiments/new/").content.decode()
    assert 'name="mode" value="online" checked' in page
    base, metric = stored_scenario(), expression_metric("any", "`true`")
    typed = _form(base, metric, ("thirst", THIRST), ("fountain", FOUNTAIN))
    answer = operator.post("/experiments/new/", {**typed, "mode": "later"})
    assert answer.status_code == 400
    assert 'id="mode-error"' in answer.content.decode()
    assert not Experiment.objects.exists()
    answer = operator.post("/experiments/new/", {**typed, "mode": "batch"})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert Experiment.objects.get(slug="grid").typed_design.mode == "batch"
    page = operator.get("/experiments/grid/").content.decode()
    assert 'id="batch-ticks">0<' in page and 'id="batch-waiting">0<' in page
    assert operator.get("/experiments/grid/?format=json").json()["design"]["mode"] == "batch"
