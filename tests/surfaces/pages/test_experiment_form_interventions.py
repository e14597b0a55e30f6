"""Interventions per arm in the launch form (docs/experiments.md, "Launching from the browser"):
an arm's intervention (turn, note, patch JSON) reaches the design as the API takes it, so the
design's rules check it; a bad one is a form error next to its field (naming
``arms[i].interventions[0].<field>``) with nothing written; a good one is planned on that arm's
worlds only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from tests.surfaces.pages.test_experiment_pages import TREATED, expression_metric, stored_scenario
from worlds_app.models import Experiment, Intervention, World

pytestmark = pytest.mark.django_db
PATCH = {
    "narration": "A breeze crosses the plate.",
    "effects": [
        {
            "op": "set_environment_content",
            "environment_label": "picnic_plate",
            "content": "A paper picnic plate in a breeze.",
        }
    ],
}


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


def _form(scenario: str, metric: str, **iv: str) -> dict[str, Any]:
    """Two arms; the second ("treated") with the intervention fields given (the first empty)."""
    return {
        "slug": "breezy",
        "arm_label": ["control", "treated"],
        "arm_scenario": [scenario, scenario],
        "arm_iv_turn": ["", iv.get("turn", "")],
        "arm_iv_note": ["", iv.get("note", "")],
        "arm_iv_patch": ["", iv.get("patch", "")],
        "control": "0",
        "replicates": "2",
        "turns": "2",
        "metrics": [metric],
        "action": "launch",
    }


@pytest.mark.parametrize(
    ("typed", "field", "code"),
    [
        # a turn outside the design's turns 1…2
        (
            {"turn": "3", "patch": json.dumps(PATCH)},
            "arms[1].interventions[0].turn",
            "invalid_turn",
        ),
        (
            {"turn": "0", "patch": json.dumps(PATCH)},
            "arms[1].interventions[0].turn",
            "invalid_turn",
        ),
        ({"turn": "soon", "patch": json.dumps(PATCH)}, "arms[1].interventions[0].turn", ""),
        # a patch that is not JSON, one of the wrong shape, none at all
        ({"turn": "1", "patch": "{not json"}, "arms[1].interventions[0].patch", "invalid_patch"),
        (
            {"turn": "1", "patch": json.dumps({"effects": [{"op": "explode"}]})},
            "arms[1].interventions[0].patch",
            "invalid_patch",
        ),
        ({"turn": "1", "note": "no patch"}, "arms[1].interventions[0].patch", ""),
        # no turn (a planned intervention needs one)
        ({"patch": json.dumps(PATCH)}, "arms[1].interventions[0].turn", ""),
    ],
)
def test_a_bad_arm_intervention_is_a_form_error_at_its_field_and_writes_nothing(
    operator: Client, typed: dict[str, str], field: str, code: str
) -> None:
    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    answer = operator.post("/experiments/new/", _form(scenario, metric, **typed))
    assert answer.status_code == 400
    text = answer.content.decode()
    assert f'<code class="author-field">{field}</code>' in text, text[:3000]
    if code:
        assert f"<code>{code}</code>" in text
    # the message is shown next to the field, in the treated arm's intervention, opened
    key = "arm-1-iv-" + field.rsplit(".", 1)[1]
    assert f'id="{key}-error"' in text
    assert '<details class="arm-iv" id="arm-1-iv" open>' in text
    assert '<details class="arm-iv" id="arm-0-iv">' in text
    # what was typed is kept
    if typed.get("turn"):
        assert f'name="arm_iv_turn" value="{typed["turn"]}"' in text
    assert not Experiment.objects.exists() and not World.objects.exists()
    assert not Intervention.objects.exists()


def test_the_form_and_the_api_give_the_same_error(
    operator: Client, operator_client: APIClient
) -> None:
    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    form = _form(scenario, metric, turn="3", patch=json.dumps(PATCH))
    page = operator.post("/experiments/new/?format=json", form)
    design = {
        "slug": "breezy",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {
                "label": "treated",
                "scenario_ref": {"hash": scenario},
                "interventions": [{"turn": 3, "patch": PATCH}],
            },
        ],
        "replicates": 2,
        "turns": 2,
        "metrics": [{"hash": metric}],
    }
    api = operator_client.post("/api/experiments/", design, format="json")
    assert page.status_code == api.status_code == 400
    expected = api.json()["error"]
    assert (expected["code"], expected["details"]["field"]) == (
        "invalid_turn",
        "arms[1].interventions[0].turn",
    )
    assert page.json()["error"] == expected
    assert not Experiment.objects.exists()


def test_an_arm_intervention_is_planned_on_that_arms_worlds(operator: Client) -> None:
    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    form = _form(scenario, metric, turn="1", note="a breeze", patch=json.dumps(PATCH))
    answer = operator.post("/experiments/new/", form)
    assert answer.status_code == 302 and answer["Location"] == "/experiments/breezy/"
    arms = Experiment.objects.get(slug="breezy").design["arms"]
    assert arms[0].get("interventions", []) == []
    assert arms[1]["interventions"] == [{"turn": 1, "patch": PATCH, "note": "a breeze"}]
    planned = Intervention.objects.order_by("world__slug")
    assert [(i.world.slug, i.turn, i.note, i.patch) for i in planned] == [
        ("breezy--treated--1", 1, "a breeze", PATCH),
        ("breezy--treated--2", 1, "a breeze", PATCH),
    ]
