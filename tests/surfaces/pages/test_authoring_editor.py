"""The editor around the workflow authoring page: JSON syntax errors carry their line, pickers
offer stored components instead of hashes, a review shows the difference before anything is
saved, saved versions keep "derived from", and a world can be created from a scenario."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import (
    CognitionWorkflow,
    ScenarioCognitionProfile,
    WorkflowDerivation,
)
from scenarios_app.services import (
    cognition_workflow_derive,
    cognition_workflow_put,
    scenario_assemble,
)
from surfaces.pages.authoring.review import flatten
from tests.conftest import tool_loop_workflow
from worlds_app.models import World

AUTHOR = "/workflows/author/"
VALIDATE = "/workflows/author/validate"
REVIEW = "/workflows/author/review"
SAVE = "/workflows/author/save"
PROFILES = "/workflows/author/profiles"
CREATE_WORLD = "/create-world/"
HTMX = {"HTTP_HX_REQUEST": "true"}

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


@pytest.fixture
def stored(world_patch_hash: str) -> tuple[str, dict[str, Any]]:
    """A stored workflow and its authoring content."""
    workflow = tool_loop_workflow(world_patch_hash, prompt="You are an ant.\nBe brief.")
    return cognition_workflow_put(content=workflow)["hash"], workflow


def _scenario() -> str:
    body = {k: v for k, v in copy.deepcopy(load_fixture("ant_on_plate")).items() if k != "note"}
    body.pop("name", None)
    return scenario_assemble(data=body)["scenario_hash"]


def test_a_json_syntax_error_names_its_line_and_column(operator: Client) -> None:
    raw = '{\n  "version": 1,\n  "nodes": [,]\n}'
    data = operator.post(f"{VALIDATE}?format=json", {"content": raw}).json()
    assert data["valid"] is False
    assert (data["error"]["line"], data["error"]["column"]) == (3, 13)
    assert "line 3, column 13" in operator.post(VALIDATE, {"content": raw}, **HTMX).content.decode()


def test_the_editor_offers_stored_components_by_kind(
    operator: Client, stored: tuple[str, dict[str, Any]], world_patch_hash: str
) -> None:
    workflow_hash, _ = stored
    data = operator.get(f"{AUTHOR}?format=json").json()
    components = data["components"]
    assert components["schemas"][0]["hash"] == world_patch_hash  # the WorldPatch schema first
    assert components["schemas"][0]["label"].startswith("WorldPatch")
    assert [s["detail"] for s in components["llm_sources"]] == ["llm_chat_completions"]
    assert all(s["detail"] != "llm_chat_completions" for s in components["tool_sources"])
    page = operator.get(AUTHOR).content.decode()
    assert f'<option value="{workflow_hash}">' in page  # "start from" is a picker
    assert 'id="author-components"' in page  # the completion data for the editor
    assert "codemirror-" in page and "/static/chukwa/author.js" in page


def test_review_shows_the_difference_and_writes_nothing(
    operator: Client, stored: tuple[str, dict[str, Any]]
) -> None:
    parent, workflow = stored
    edited = copy.deepcopy(workflow)
    edited["nodes"][0]["prompt_template"]["messages"][0]["content"] = "You are an ant.\nBe bold."
    edited["nodes"][0]["max_tool_calls"] = 2
    before = CognitionWorkflow.objects.count()
    data = operator.post(
        f"{REVIEW}?format=json", {"content": json.dumps(edited), "derived_from": parent}
    ).json()
    assert CognitionWorkflow.objects.count() == before
    assert data["derived_from"] == parent and data["would_be_new"] is True
    changed = [(r["kind"], r["text"]) for r in data["diff"] if r["kind"] in ("add", "del")]
    # one line per changed prompt line and per changed value, not whole JSON strings
    assert changed == [
        ("del", "/nodes/0/max_tool_calls = 0"),
        ("add", "/nodes/0/max_tool_calls = 2"),
        ("del", "    Be brief."),
        ("add", "    Be bold."),
    ]
    partial = operator.post(
        REVIEW, {"content": json.dumps(edited), "derived_from": parent}, **HTMX
    ).content.decode()
    assert "Save this version" in partial
    # the changed word is marked within its line
    assert 'Be <mark class="w-del">brief.</mark>' in partial
    assert 'Be <mark class="w-add">bold.</mark>' in partial

    same = operator.post(
        f"{REVIEW}?format=json", {"content": json.dumps(workflow), "derived_from": parent}
    ).json()
    assert same["unchanged"] is True and same["diff"] == []
    bad = operator.post(REVIEW, {"content": "{", "derived_from": parent}, **HTMX)
    assert "cannot save" in bad.content.decode()
    assert operator.post(REVIEW, {"content": "{}", "derived_from": "nope"}).status_code == 400


def test_saving_keeps_derived_from_and_the_author_page_links_versions(
    operator: Client, stored: tuple[str, dict[str, Any]]
) -> None:
    parent, workflow = stored
    edited = copy.deepcopy(workflow)
    edited["nodes"][0]["max_tool_calls"] = 1
    response = operator.post(
        SAVE, {"content": json.dumps(edited), "derived_from": parent, "save_note": "one tool"}
    )
    assert response.status_code == 302
    child = response["Location"].strip("/").rsplit("/", 1)[-1]
    edge = WorkflowDerivation.objects.get(child_id=child)
    assert edge.parent_id == parent and edge.note == "one tool"
    assert edge.operator  # who saved it
    versions = operator.get(f"{AUTHOR}?workflow={child}&format=json").json()["versions"]
    assert [v["hash"] for v in versions["derived_from"]] == [parent]
    page = operator.get(f"{AUTHOR}?workflow={parent}").content.decode()
    assert f"{AUTHOR}?workflow={child}" in page  # later versions are linked
    # saving the parent unchanged derives nothing, and a bad parent stores nothing
    assert cognition_workflow_derive(content=workflow, parent_hash=parent)["derived_from"] is None
    before = CognitionWorkflow.objects.count()
    edited["nodes"][0]["max_tool_calls"] = 3
    bad = operator.post(SAVE, {"content": json.dumps(edited), "derived_from": "0" * 64})
    assert bad.status_code == 404
    assert CognitionWorkflow.objects.count() == before


def test_profile_labels_are_picked_for_the_chosen_scenario(operator: Client) -> None:
    scenario = _scenario()
    data = operator.get(f"{PROFILES}?scenario={scenario}&format=json").json()
    assert data["labels"] == ["ant"]
    partial = operator.get(f"{PROFILES}?scenario={scenario}", **HTMX).content.decode()
    assert '<select name="label">' in partial and '<option value="ant"' in partial
    assert operator.get(f"{PROFILES}?scenario=zz").status_code == 400


def test_operators_create_a_world_from_a_scenario(
    operator: Client, client: Client, reader_user: User
) -> None:
    scenario = _scenario()
    page = operator.get(f"{CREATE_WORLD}?scenario={scenario}").content.decode()
    assert f'<option value="{scenario}" selected>' in page
    response = operator.post(CREATE_WORLD, {"scenario": scenario, "slug": "fresh", "name": "Fresh"})
    assert response.status_code == 302 and response["Location"] == "/worlds/fresh/"
    assert World.objects.get(slug="fresh").name == "Fresh"
    again = operator.post(CREATE_WORLD, {"scenario": scenario, "slug": "fresh"})
    assert again.status_code == 409 and "fresh" in again.content.decode()
    bad = operator.post(f"{CREATE_WORLD}?format=json", {"scenario": scenario, "slug": "Bad Slug"})
    assert bad.status_code == 400 and bad.json()["error"]["code"]
    assert World.objects.count() == 1
    client.force_login(reader_user)
    assert client.post(CREATE_WORLD, {"scenario": scenario, "slug": "x"}).status_code == 403


def test_flatten_shows_multi_line_strings_line_by_line() -> None:
    assert flatten({"b": [1, {"c": "x\ny"}], "a~/": {}}) == [
        "/a~0~1 = {}",
        "/b/0 = 1",
        "/b/1/c =",
        "    x",
        "    y",
    ]


def test_the_fork_preselects_the_profile_of_the_workflow_loaded(operator: Client) -> None:
    """The park runs two profiles, ant and walker (ant first by label): loading the walker's
    workflow preselects the park and walker for the fork, on the page and when the scenario
    picker asks for the park's labels again."""
    body = {k: v for k, v in copy.deepcopy(load_fixture("park")).items() if k != "note"}
    body.pop("name", None)
    park = scenario_assemble(data=body)["scenario_hash"]
    walker = (
        ScenarioCognitionProfile.objects.select_related("profile")
        .get(scenario_id=park, label="walker")
        .profile.workflow_id
    )
    assert operator.get(f"{PROFILES}?scenario={park}&format=json").json()["labels"] == [
        "ant",
        "walker",
    ]
    page = operator.get(f"{AUTHOR}?workflow={walker}").content.decode()
    assert f'<option value="{park}" selected>' in page
    assert '<option value="walker" selected>' in page
    assert '<option value="ant" selected>' not in page
    partial = operator.get(f"{PROFILES}?scenario={park}&derived_from={walker}", **HTMX)
    labels = partial.content.decode()
    assert '<option value="walker" selected>' in labels
    assert '<option value="ant" selected>' not in labels
    # the picker sends the version being edited along with the scenario
    assert "hx-include=\"this, [name='derived_from']\"" in page
    # an explicit choice still wins
    chosen = operator.get(f"{PROFILES}?scenario={park}&derived_from={walker}&label=ant", **HTMX)
    assert '<option value="ant" selected>' in chosen.content.decode()
