"""The workflow authoring page: live validation that writes nothing, a preview that calls no
source, save as a new version, and fork in one step."""

from __future__ import annotations

import copy
import html
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import strip_tags

from cognition_app.models import SourceInvocation
from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import (
    CognitionWorkflow,
    JsonSchema,
    ResponseSource,
    ScenarioCognitionProfile,
    ScenarioDerivationParent,
)
from scenarios_app.services import scenario_assemble
from tests.conftest import tool_loop_workflow
from worlds_app.services import world_create

AUTHOR = "/workflows/author/"
VALIDATE = "/workflows/author/validate"
PREVIEW = "/workflows/author/preview"
SAVE = "/workflows/author/save"
FORK = "/workflows/author/fork"
HTMX = {"HTTP_HX_REQUEST": "true"}

pytestmark = pytest.mark.django_db


def _counts() -> tuple[int, int, int]:
    return (
        CognitionWorkflow.objects.count(),
        ResponseSource.objects.count(),
        JsonSchema.objects.count(),
    )


def _text(response: Any) -> str:
    return html.unescape(response.content.decode())


def _plain(response: Any) -> str:
    """The response as a reader sees it: tags stripped, entities decoded."""
    return html.unescape(strip_tags(response.content.decode()))


def _fixture_body(name: str) -> dict[str, Any]:
    return {k: v for k, v in copy.deepcopy(load_fixture(name)).items() if k not in ("name", "note")}


def _world(fixture: str, slug: str) -> tuple[str, dict[str, Any]]:
    """(scenario hash, the fixture's assembly input) after creating a world named ``slug``."""
    body = _fixture_body(fixture)
    scenario_hash = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario_hash}})
    return scenario_hash, body


def _workflow_of(body: dict[str, Any], profile: str) -> dict[str, Any]:
    return body["cognition_profiles"][profile]["inline"]["workflow"]["inline"]


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


def test_operator_sees_the_editor(operator: Client) -> None:
    response = operator.get(AUTHOR)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="content"' in page
    assert "keyup changed delay:500ms" in page
    assert "per_subject_ordered" in page  # a skeleton to start from


def test_reader_is_forbidden(client: Client, reader_user: User) -> None:
    client.force_login(reader_user)
    assert client.get(AUTHOR).status_code == 403
    assert client.post(VALIDATE, {"content": "{}"}).status_code == 403
    before = _counts()
    assert client.post(SAVE, {"content": "{}"}).status_code == 403
    assert _counts() == before


def test_anonymous_is_sent_to_sign_in(client: Client) -> None:
    response = client.get(AUTHOR)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_editor_prefills_a_stored_workflow(operator: Client, world_patch_hash: str) -> None:
    workflow = tool_loop_workflow(world_patch_hash, prompt="Prefilled prompt text")
    response = operator.post(SAVE, {"content": json.dumps(workflow)})
    workflow_hash = response["Location"].rstrip("/").rsplit("/", 1)[-1]
    page = _text(operator.get(AUTHOR, {"workflow": workflow_hash}))
    assert "Prefilled prompt text" in page
    assert operator.get(AUTHOR, {"workflow": "0" * 64}).status_code == 404


def test_validate_valid_workflow_writes_nothing(operator: Client, world_patch_hash: str) -> None:
    workflow = tool_loop_workflow(world_patch_hash)  # its LLM source is inline: a new row if put
    before = _counts()
    response = operator.post(VALIDATE, {"content": json.dumps(workflow)}, **HTMX)
    assert response.status_code == 200
    assert "valid" in response.content.decode()
    assert "invalid" not in response.content.decode()
    assert "<html" not in response.content.decode()  # the partial alone
    assert _counts() == before

    data = operator.post(f"{VALIDATE}?format=json", {"content": json.dumps(workflow)}).json()
    assert data["valid"] is True
    assert data["would_be_new"] is True
    assert _counts() == before


def test_a_concurrent_workflow_is_saved_from_the_editor(
    operator: Client, world_patch_hash: str
) -> None:
    workflow = {**tool_loop_workflow(world_patch_hash), "execution": "concurrent"}
    data = operator.post(f"{VALIDATE}?format=json", {"content": json.dumps(workflow)}).json()
    assert data["valid"] is True
    response = operator.post(SAVE, {"content": json.dumps(workflow)})
    assert response.status_code == 302
    workflow_hash = response["Location"].rstrip("/").rsplit("/", 1)[-1]
    assert "execution <code>concurrent</code>" in _text(operator.get(response["Location"]))
    assert CognitionWorkflow.objects.get(pk=workflow_hash).content["execution"] == "concurrent"


def test_validate_invalid_workflow_names_code_and_field(
    operator: Client, world_patch_hash: str
) -> None:
    workflow = tool_loop_workflow(world_patch_hash)
    workflow["nodes"][0]["max_generation_attempts"] = 0
    before = _counts()
    response = operator.post(VALIDATE, {"content": json.dumps(workflow)}, **HTMX)
    assert response.status_code == 200
    text = _text(response)
    assert "invalid" in text
    data = operator.post(f"{VALIDATE}?format=json", {"content": json.dumps(workflow)}).json()
    assert data["valid"] is False
    assert data["error"]["field"] == "content.nodes[0].max_generation_attempts"
    assert data["error"]["code"] in text
    assert data["error"]["field"] in text
    assert _counts() == before


def test_validate_malformed_json_is_a_clear_error(operator: Client) -> None:
    before = _counts()
    for raw in ('{"version": 1,', "", "[" * 5000):
        response = operator.post(VALIDATE, {"content": raw}, **HTMX)
        assert response.status_code == 200
        assert "invalid_json" in response.content.decode()
    # the no-JavaScript fallback: the full page, the text kept
    response = operator.post(VALIDATE, {"content": '{"version": 1,'})
    assert response.status_code == 200
    page = _text(response)
    assert "<html" in page and "invalid_json" in page and '{"version": 1,' in page
    assert _counts() == before


def test_preview_ant_on_plate_renders_messages_and_calls_nothing(operator: Client) -> None:
    _scenario, body = _world("ant_on_plate", "plate")
    workflow = _workflow_of(body, "ant")
    before = _counts()
    response = operator.post(
        PREVIEW,
        {"content": json.dumps(workflow), "world": "plate", "subject": "ant"},
        **HTMX,
    )
    assert response.status_code == 200
    text = _text(response)
    assert "- ant (Ant, agent): at the center of the plate, feeling hungry." in text
    assert "goal: find and eat food." in text
    assert "kitchen_plate:\nA small circular white plate" in text  # the scoped view
    assert "- crumb (Crumb, prop)" in text
    assert "{{" not in text
    assert SourceInvocation.objects.count() == 0
    assert _counts() == before


def test_preview_park_lists_ambient_requests_without_calling(operator: Client) -> None:
    _scenario, body = _world("park", "park-preview")
    workflow = _workflow_of(body, "walker")
    response = operator.post(
        f"{PREVIEW}?format=json",
        {"content": json.dumps(workflow), "world": "park-preview", "subject": "bob"},
    )
    data = response.json()
    by_id = {a["id"]: a for a in data["ambient"]}
    assert by_id["park_pa"]["request_body"] == {"turn": 1}
    assert by_id["bob_phone"]["request_body"] == {"turn": 1, "subject": "bob"}
    assert by_id["park_weather"]["request_body"]["turn"] == 1

    response = operator.post(
        PREVIEW,
        {"content": json.dumps(workflow), "world": "park-preview", "subject": "bob"},
        **HTMX,
    )
    text = _plain(response)
    assert 'would be called with {"turn": 1, "simulation_time": ' in text
    assert 'would be called with {"turn": 1, "subject": "bob"}' in text
    assert "(ambient results are not fetched in a preview)" in text
    assert SourceInvocation.objects.count() == 0


def test_preview_shows_earlier_node_outputs_as_placeholders(operator: Client) -> None:
    _scenario, body = _world("locked_vending_room", "room")
    profile = next(iter(body["cognition_profiles"]))
    workflow = _workflow_of(body, profile)
    subject = next(
        e["inline"]["id"] for e in body["entities"] if isinstance(e["inline"]["kind"], dict)
    )
    data = operator.post(
        f"{PREVIEW}?format=json",
        {"content": json.dumps(workflow), "world": "room", "subject": subject},
    ).json()
    first = data["nodes"][0]["id"]
    later = " ".join(m["content"] for n in data["nodes"][1:] for m in n["messages"] or [])
    assert f"(output of node {first})" in later
    assert SourceInvocation.objects.count() == 0


def test_preview_errors_are_shown_not_raised(operator: Client, world_patch_hash: str) -> None:
    _world("ant_on_plate", "plate")
    workflow = json.dumps(tool_loop_workflow(world_patch_hash))
    response = operator.post(PREVIEW, {"content": workflow, "world": "plate", "subject": "crumb"})
    assert response.status_code == 200
    assert "unknown_subject" in response.content.decode()
    response = operator.post(PREVIEW, {"content": workflow, "world": "nowhere", "subject": "ant"})
    assert "world_not_found" in response.content.decode()


def test_save_stores_one_new_workflow(operator: Client, world_patch_hash: str) -> None:
    workflow = tool_loop_workflow(world_patch_hash, prompt="Saved from the editor")
    before = CognitionWorkflow.objects.count()
    response = operator.post(SAVE, {"content": json.dumps(workflow)})
    assert response.status_code == 302
    assert CognitionWorkflow.objects.count() == before + 1
    stored = CognitionWorkflow.objects.latest("created_at")
    assert response["Location"] == f"/store/cognition-workflows/{stored.hash}/"
    assert stored.content["nodes"][0]["prompt_template"]["messages"][0]["content"] == (
        "Saved from the editor"
    )


def test_save_invalid_workflow_keeps_the_text(operator: Client, world_patch_hash: str) -> None:
    workflow = tool_loop_workflow(world_patch_hash)
    workflow["nodes"][0]["max_generation_attempts"] = 0
    before = _counts()
    response = operator.post(SAVE, {"content": json.dumps(workflow)})
    assert response.status_code == 400
    assert "max_generation_attempts" in response.content.decode()
    assert _counts() == before


def test_fork_creates_child_with_new_workflow(operator: Client, world_patch_hash: str) -> None:
    parent_hash, _body = _world("ant_on_plate", "plate")
    workflow = tool_loop_workflow(world_patch_hash, prompt="A forked ant mind")
    response = operator.post(
        FORK,
        {
            "content": json.dumps(workflow),
            "scenario": parent_hash,
            "label": "ant",
            "name": "forked-ant",
            "note": "trying a new prompt",
        },
    )
    assert response.status_code == 302
    child_hash = response["Location"].strip("/").rsplit("/", 1)[-1]
    assert response["Location"] == f"/scenarios/{child_hash}/"
    assert child_hash != parent_hash
    edge = ScenarioDerivationParent.objects.get(derivation__child_id=child_hash, position=0)
    assert edge.parent_id == parent_hash
    binding = ScenarioCognitionProfile.objects.select_related("profile__workflow").get(
        scenario_id=child_hash, label="ant"
    )
    new_workflow = binding.profile.workflow
    assert new_workflow.content["nodes"][0]["prompt_template"]["messages"][0]["content"] == (
        "A forked ant mind"
    )


def test_fork_with_bad_scenario_stores_nothing(operator: Client, world_patch_hash: str) -> None:
    workflow = tool_loop_workflow(world_patch_hash, prompt="never stored")
    before = _counts()
    response = operator.post(
        FORK, {"content": json.dumps(workflow), "scenario": "not-a-hash", "label": "ant"}
    )
    assert response.status_code == 400
    assert "invalid_hash" in response.content.decode()
    assert _counts() == before
