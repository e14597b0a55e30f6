"""The population author page (docs/populations.md, "Populations in the browser"): sign-in to
read, operators to write; the live check previews the hash, coverage, marginals and agents the
API gives for the same content; a bad field is named beside it and nothing is stored; storing
opens the population's page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from scenarios_app.models import Population

URL = "/populations/new/"


def _form(**change: str) -> dict[str, str]:
    """The fixture's park visitors as typed into the form."""
    fields = {
        "label": "park_walkers",
        "size": "32",
        "sampler": "sobol",
        "seed": "7",
        "axis_count": "2",
        "axis-0-name": "thirst",
        "axis-0-kind": "categorical",
        "axis-0-categories": "barely thirsty: 2\nthirsty: 2\nvery thirsty: 1",
        "axis-1-name": "age",
        "axis-1-kind": "numeric",
        "axis-1-low": "16",
        "axis-1-high": "80",
        "axis-1-integer": "1",
        "axis-1-marginal": "16, 40, 0.5\n40, 80, 0.5",
        "tpl-id": "walker_{{index}}",
        "tpl-name": "Walker {{index}}",
        "tpl-state": "{{axes.thirst}}, aged {{axes.age}}",
        "tpl-goal": "walk",
        "tpl-memory": "",
    }
    return {**fields, **change}


def _content() -> dict[str, Any]:
    return {
        "version": 1,
        "label": "park_walkers",
        "size": 32,
        "sampler": "sobol",
        "seed": 7,
        "axes": [
            {
                "name": "thirst",
                "categories": [
                    {"value": "barely thirsty", "weight": 2},
                    {"value": "thirsty", "weight": 2},
                    {"value": "very thirsty", "weight": 1},
                ],
            },
            {
                "name": "age",
                "range": [16, 80],
                "integer": True,
                "marginal": [
                    {"low": 16, "high": 40, "share": 0.5},
                    {"low": 40, "high": 80, "share": 0.5},
                ],
            },
        ],
        "entity_template": {
            "id": "walker_{{index}}",
            "name": "Walker {{index}}",
            "state": "{{axes.thirst}}, aged {{axes.age}}",
            "goal": "walk",
            "memory": "",
        },
    }


@pytest.fixture
def operator_browser(operator_user: User) -> Client:
    client = Client()
    client.force_login(operator_user)
    return client


@pytest.mark.django_db
def test_sign_in_to_read_operators_to_write(reader_user: User) -> None:
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    reader = Client()
    reader.force_login(reader_user)
    assert reader.get(URL).status_code == 403
    assert reader.post(URL, {**_form(), "action": "save"}).status_code == 403
    assert not Population.objects.exists()


@pytest.mark.django_db
def test_the_check_previews_what_the_api_computes(
    operator_browser: Client, operator_client: APIClient
) -> None:
    page = operator_browser.get(URL)
    assert page.status_code == 200 and b"Make a population" in page.content
    checked = operator_browser.post(f"{URL}?format=json", {**_form(), "action": "check"}).json()
    assert checked["error"] is None
    assert not Population.objects.exists()  # a check stores nothing
    stored = operator_client.post("/api/populations/", {"content": _content()}, format="json")
    assert stored.status_code == 201, stored.json()
    preview = checked["preview"]
    assert preview["hash"] == stored.json()["hash"]
    api = operator_client.get(f"/api/populations/{preview['hash']}/coverage/").json()
    assert preview["coverage"] == api["coverage"]
    assert preview["marginals"] == api["marginals"]
    shown = [
        {k: a[k] for k in ("index", "id", "name", "state", "values")} for a in preview["agents"]
    ]
    assert shown == [
        {k: a[k] for k in ("index", "id", "name", "state", "values")} for a in api["agents"][:10]
    ]
    # the HTMX partial shows the same figures
    partial = operator_browser.post(URL, {**_form(), "action": "check"}, HTTP_HX_REQUEST="true")
    assert b'id="preview-coverage"' in partial.content and b"<html" not in partial.content
    assert preview["hash"][:12].encode() in partial.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "field", "key"),
    [
        (
            {"axis-0-categories": "barely thirsty: 2\nthirsty: -1"},
            "content.axes[0].categories[1].weight",
            "axis-0",
        ),
        ({"axis-0-categories": "barely thirsty"}, "content.axes[0].categories[0].weight", "axis-0"),
        ({"axis-1-high": "ten"}, "content.axes[1].range[1]", "axis-1"),
        ({"axis-1-marginal": "16, 40, 0.5\n40, 80, 0.6"}, "content.axes[1].marginal", "axis-1"),
        ({"size": "0"}, "content.size", "size"),
        ({"seed": "x"}, "content.seed", "seed"),
        ({"tpl-state": "{{axes.mood}}"}, "content.entity_template.state", "tpl-state"),
        ({"tpl-goal": "{{biography}}"}, "content.entity_template.goal", "tpl-goal"),
        ({"tpl-id": "walker"}, "content.entity_template.id", "tpl-id"),
    ],
)
def test_a_bad_field_is_named_beside_it_and_nothing_is_stored(
    operator_browser: Client, change: dict[str, str], field: str, key: str
) -> None:
    answer = operator_browser.post(f"{URL}?format=json", {**_form(**change), "action": "check"})
    error = answer.json()["error"]
    assert (error["field"], error["key"]) == (field, key)
    saved = operator_browser.post(URL, {**_form(**change), "action": "save"})
    assert saved.status_code == 400
    beside = f'id="pf-{key}-error" class="inline-error field-error" role="alert">'
    assert beside in saved.content.decode()
    assert f"<code>{field}</code>" in saved.content.decode()
    assert not Population.objects.exists()


@pytest.mark.django_db
def test_axes_are_added_and_removed_and_storing_opens_its_page(operator_browser: Client) -> None:
    added = operator_browser.post(URL, {**_form(), "action": "add"}).content.decode()
    assert 'name="axis_count" value="3"' in added and 'id="pf-axis-2-name"' in added
    removed = operator_browser.post(URL, {**_form(), "action": "remove-0"}).content.decode()
    assert 'name="axis_count" value="1"' in removed
    assert 'name="axis-0-name" value="age"' in removed
    saved = operator_browser.post(URL, {**_form(), "action": "save"})
    assert saved.status_code == 302
    population = Population.objects.get()
    assert saved["Location"] == f"/store/populations/{population.pk}/"
    assert population.content == _content()
    assert operator_browser.get(saved["Location"]).status_code == 200


@pytest.mark.django_db
def test_a_stored_population_starts_the_form_and_storing_unchanged_gives_its_hash(
    operator_browser: Client, operator_client: APIClient
) -> None:
    from tests.support.worlds import fixture_body

    fixture = fixture_body("park_visitors_rules")["populations"][0]["ref"]["inline"]
    stored = operator_client.post("/api/populations/", {"content": fixture}, format="json")
    h = stored.json()["hash"]
    detail = operator_browser.get(f"/store/populations/{h}/").content.decode()
    assert f'href="/populations/new/?from={h}"' in detail
    page = operator_browser.get(f"{URL}?from={h}")
    assert page.status_code == 200 and b'id="starting"' in page.content
    fields = operator_browser.get(f"{URL}?from={h}&format=json").json()["form"]
    assert [a["name"] for a in fields["axes"]] == ["age", "thirst", "patience"]
    # the form's fields as posted give back the same content, hence the same hash
    posted = {
        "label": fields["label"],
        "size": fields["size"],
        "sampler": fields["sampler"],
        "seed": fields["seed"],
        "axis_count": str(len(fields["axes"])),
        **{
            f"axis-{i}-{k}": v
            for i, row in enumerate(fields["axes"])
            for k, v in row.items()
            if k != "key"
        },
        **{f"tpl-{k}": v for k, v in fields["template"].items()},
    }
    checked = operator_browser.post(f"{URL}?format=json", {**posted, "action": "check"}).json()
    assert checked["error"] is None and checked["preview"]["hash"] == h
    assert operator_browser.get(f"{URL}?from={'0' * 64}").status_code == 404
