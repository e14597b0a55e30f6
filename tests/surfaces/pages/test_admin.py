"""The operator admin: every write goes through the services, stored rows stay immutable."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db import connection
from django.db.models import Model
from django.http import HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from chukwa_core import hashing
from chukwa_core.errors import ChukwaError
from scenarios_app import services
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    Entity,
    Environment,
    JsonSchema,
    ResponseSource,
    Scenario,
    ScenarioDerivationParent,
    ScenarioName,
    ScenarioNameHistory,
)
from surfaces.forms import pretty_json
from tests.conftest import HTTP_SOURCE, LLM_SOURCE

WEATHER_SCHEMA: dict[str, Any] = {
    "title": "Weather",
    "type": "object",
    "properties": {"temperature_c": {"type": "number"}},
    "required": ["temperature_c"],
}
ANT: dict[str, Any] = {
    "id": " Ant Alpha ",
    "name": "Ant",
    "state": "hungry",
    "environment": "kitchen_plate",
    "kind": {"agent": {"goal": "eat", "memory": "", "cognition_profile": "ant"}},
}
COMPONENT_MODELS: list[type[Model]] = [
    JsonSchema,
    ResponseSource,
    CognitionWorkflow,
    CognitionProfile,
    Environment,
    Entity,
]


def admin_url(model: type[Model], view: str, *args: str) -> str:
    # The admin quotes primary keys in its URLs ("_" becomes "_5F").
    return reverse(
        f"admin:scenarios_app_{model._meta.model_name}_{view}", args=[quote(a) for a in args]
    )


def staff_client(user: User) -> Client:
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ops(operator_user: User) -> Client:
    return staff_client(operator_user)


@pytest.fixture
def reader(reader_user: User) -> Client:
    return staff_client(reader_user)


def form_errors(response: HttpResponse) -> dict[str, list[str]]:
    assert response.status_code == 200, response.status_code
    return dict(response.context["form"].errors)


def flash(response: HttpResponse) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def service_error(call: Callable[[], Any]) -> str:
    """The message the admin must show for a service failure: the service's own."""
    with pytest.raises(ChukwaError) as caught:
        call()
    return f"{caught.value.message} [{caught.value.code}]"


def resolved_workflow(workflow: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a conftest workflow: its inline LLM source replaced by the hash."""
    resolved = copy.deepcopy(workflow)
    resolved["nodes"][0]["llm_source_ref"] = {"hash": hashing.response_source_hash(LLM_SOURCE)}
    return resolved


def assembly_input(
    workflow: dict[str, Any], *, slug: str = "ant_on_plate", name: str | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "scenario_slug": slug,
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
        "cognition_profiles": {"ant": {"inline": {"workflow": {"inline": workflow}}}},
        "environments": {"kitchen_plate": {"inline": "A small white plate under a lamp."}},
        "entities": [
            {"inline": ANT},
            {
                "inline": {
                    "id": "crumb",
                    "name": "Crumb",
                    "state": "a bread crumb 3cm east of centre",
                    "environment": "kitchen_plate",
                    "kind": "prop",
                }
            },
        ],
    }
    if name is not None:
        data["name"] = name
    return data


# --- components ----------------------------------------------------------------------------


def component_case(kind: str, make_workflow: Callable[..., dict[str, Any]]) -> tuple[Any, str, str]:
    """(model, submitted text, the hash the store computes for it)."""
    workflow = make_workflow()
    workflow_hash = hashing.cognition_workflow_hash(resolved_workflow(workflow))
    entity = {**ANT, "id": "ant_alpha"}
    cases: dict[str, tuple[Any, str, str]] = {
        "json_schema": (
            JsonSchema,
            json.dumps(WEATHER_SCHEMA, indent=2),
            hashing.json_schema_hash(WEATHER_SCHEMA),
        ),
        "response_source": (
            ResponseSource,
            json.dumps(HTTP_SOURCE),
            hashing.response_source_hash(HTTP_SOURCE),
        ),
        "cognition_workflow": (CognitionWorkflow, json.dumps(workflow), workflow_hash),
        "cognition_profile": (
            CognitionProfile,
            json.dumps({"workflow": {"inline": workflow}}),
            hashing.cognition_profile_hash(workflow_hash),
        ),
        "environment": (
            Environment,
            "A small white plate\nunder a lamp.",
            hashing.environment_hash("A small white plate\nunder a lamp."),
        ),
        "entity": (Entity, json.dumps(ANT), hashing.entity_hash(entity)),
    }
    return cases[kind]


@pytest.mark.parametrize(
    "kind",
    [
        "json_schema",
        "response_source",
        "cognition_workflow",
        "cognition_profile",
        "environment",
        "entity",
    ],
)
def test_add_form_stores_the_row_the_service_computes(
    ops: Client, make_workflow: Callable[..., dict[str, Any]], kind: str
) -> None:
    """Also proves the admin runs the services outside any atomic block of its own: their
    ``transaction.atomic(durable=True)`` raises RuntimeError when nested."""
    model, text, expected_hash = component_case(kind, make_workflow)
    assert not model.objects.filter(pk=expected_hash).exists()

    response = ops.post(admin_url(model, "add"), {"content": text})

    assert response.status_code == 302
    assert response["Location"] == admin_url(model, "change", expected_hash)
    assert model.objects.filter(pk=expected_hash).exists()
    assert any(m.startswith("stored new") and expected_hash in m for m in flash(response))

    again = ops.post(admin_url(model, "add"), {"content": text})
    assert again["Location"] == admin_url(model, "change", expected_hash)
    assert any("already stored, was_new false" in m for m in flash(again))
    assert ops.get(again["Location"]).status_code == 200


def test_add_forms_render_for_operators(ops: Client) -> None:
    for model in COMPONENT_MODELS:
        response = ops.get(admin_url(model, "add"))
        assert response.status_code == 200, model
        assert 'class="chukwa-' in response.content.decode()


def test_environment_text_keeps_spaces_but_not_browser_crlf(ops: Client) -> None:
    response = ops.post(admin_url(Environment, "add"), {"content": "  A plate.\r\nA lamp.  "})

    expected = hashing.environment_hash("  A plate.\nA lamp.  ")
    assert response["Location"] == admin_url(Environment, "change", expected)


def test_empty_environment_shows_the_service_error(ops: Client) -> None:
    expected = service_error(lambda: services.environment_put(content="   "))

    errors = form_errors(ops.post(admin_url(Environment, "add"), {"content": "   "}))

    assert errors == {"content": [expected]}
    assert Environment.objects.count() == 0


def test_invalid_json_schema_shows_the_validator_message_and_writes_nothing(ops: Client) -> None:
    bad = {"type": "nonsense"}
    expected = service_error(lambda: services.json_schema_put(content=bad))
    before = JsonSchema.objects.count()

    errors = form_errors(ops.post(admin_url(JsonSchema, "add"), {"content": json.dumps(bad)}))

    assert errors == {"content": [expected]}
    assert "is not a valid Draft 2020-12 schema" in expected
    assert JsonSchema.objects.count() == before


def test_invalid_response_source_shows_the_validator_message_and_writes_nothing(
    ops: Client,
) -> None:
    bad = {**LLM_SOURCE, "interface": {**LLM_SOURCE["interface"], "base_url_env": "HOME"}}
    expected = service_error(lambda: services.response_source_put(content=bad))

    response = ops.post(admin_url(ResponseSource, "add"), {"content": json.dumps(bad)})

    assert form_errors(response) == {"content": [expected]}
    assert "content.interface.base_url_env: 'HOME' is not an allowed URL variable name" in expected
    assert escape(expected) in response.content.decode()
    assert ResponseSource.objects.count() == 0


def test_invalid_workflow_rolls_back_its_inline_source(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    workflow = {**make_workflow(), "apply": {"from": "nowhere.final"}}
    expected = service_error(lambda: services.cognition_workflow_put(content=workflow))

    response = ops.post(admin_url(CognitionWorkflow, "add"), {"content": json.dumps(workflow)})

    assert form_errors(response) == {"content": [expected]}
    assert ResponseSource.objects.count() == 0
    assert CognitionWorkflow.objects.count() == 0


@pytest.mark.parametrize(
    "text",
    ['{"type": "object"', "{'type': 'object'}", '{"minimum": NaN}', "[" * 100_000],
)
def test_malformed_json_is_a_form_error(ops: Client, text: str) -> None:
    before = JsonSchema.objects.count()

    errors = form_errors(ops.post(admin_url(JsonSchema, "add"), {"content": text}))

    assert errors["content"][0].startswith("Malformed JSON: ")
    assert JsonSchema.objects.count() == before


def test_empty_json_object_is_content_not_a_blank(ops: Client) -> None:
    response = ops.post(admin_url(JsonSchema, "add"), {"content": "{}"})

    assert response["Location"] == admin_url(JsonSchema, "change", hashing.json_schema_hash({}))


def test_blank_json_is_required(ops: Client) -> None:
    errors = form_errors(ops.post(admin_url(Entity, "add"), {"content": "  \n"}))

    assert errors == {"content": ["This field is required."]}


def test_change_page_is_read_only_and_pretty(ops: Client) -> None:
    stored = services.json_schema_put(content=WEATHER_SCHEMA)["hash"]
    row = JsonSchema.objects.get(pk=stored)
    url = admin_url(JsonSchema, "change", stored)

    response = ops.get(url)

    assert response.status_code == 200
    html = response.content.decode()
    assert escape(pretty_json(row.content)) in html
    assert admin_url(JsonSchema, "save_as_new", stored) in html
    assert 'name="_save"' not in html
    assert ops.post(url, {"hash": "0" * 64}).status_code == 403
    assert ops.get(admin_url(JsonSchema, "delete", stored)).status_code == 403
    assert JsonSchema.objects.get(pk=stored).content == row.content


def test_scenarios_and_names_cannot_be_edited_or_deleted(
    ops: Client, two_scenarios: tuple[str, str]
) -> None:
    a, b = two_scenarios
    for model, pk in ((Scenario, a), (ScenarioName, "ant_on_plate")):
        assert ops.get(admin_url(model, "change", pk)).status_code == 200
        assert ops.post(admin_url(model, "change", pk), {"scenario": b}).status_code == 403
        assert ops.get(admin_url(model, "delete", pk)).status_code == 403
        assert ops.post(admin_url(model, "delete", pk), {"post": "yes"}).status_code == 403
    assert Scenario.objects.filter(pk=a).exists()
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == a


def test_superusers_write_without_the_group(db: Any) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-password-123"))

    response = client.post(admin_url(JsonSchema, "add"), {"content": json.dumps(WEATHER_SCHEMA)})

    assert response.status_code == 302
    assert JsonSchema.objects.filter(pk=hashing.json_schema_hash(WEATHER_SCHEMA)).exists()


def test_profile_page_links_its_workflow(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    result = services.cognition_profile_put(content={"workflow": {"inline": make_workflow()}})

    listing = ops.get(admin_url(CognitionProfile, "changelist")).content.decode()
    detail = ops.get(admin_url(CognitionProfile, "change", result["hash"])).content.decode()

    workflow_url = admin_url(CognitionWorkflow, "change", result["workflow_hash"])
    assert workflow_url in listing
    assert workflow_url in detail
    workflow_page = ops.get(workflow_url).content.decode()
    source_url = admin_url(ResponseSource, "change", hashing.response_source_hash(LLM_SOURCE))
    assert source_url in workflow_page
    assert admin_url(CognitionProfile, "change", result["hash"]) in workflow_page


def test_save_as_new_with_changed_content_keeps_the_old_row(ops: Client) -> None:
    old_hash = services.json_schema_put(content=WEATHER_SCHEMA)["hash"]
    old_content = JsonSchema.objects.get(pk=old_hash).content
    url = admin_url(JsonSchema, "save_as_new", old_hash)

    page = ops.get(url)
    assert page.status_code == 200
    assert page.context["form"]["content"].value() == pretty_json(old_content)

    changed = {**WEATHER_SCHEMA, "title": "Weather report"}
    response = ops.post(url, {"content": json.dumps(changed, indent=2)})

    new_hash = hashing.json_schema_hash(changed)
    assert new_hash != old_hash
    assert response["Location"] == admin_url(JsonSchema, "change", new_hash)
    assert any(m.startswith(f"stored new JSON schema {new_hash}") for m in flash(response))
    assert JsonSchema.objects.get(pk=old_hash).content == old_content
    assert JsonSchema.objects.get(pk=new_hash).content == changed


def test_save_as_new_unchanged_returns_the_same_row(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    profile = services.cognition_profile_put(content={"workflow": {"inline": make_workflow()}})
    url = admin_url(CognitionProfile, "save_as_new", profile["hash"])
    prefilled = ops.get(url).context["form"]["content"].value()
    assert json.loads(prefilled) == {"workflow": {"hash": profile["workflow_hash"]}}

    response = ops.post(url, {"content": prefilled})

    assert response["Location"] == admin_url(CognitionProfile, "change", profile["hash"])
    assert any("already stored, was_new false" in m for m in flash(response))
    assert CognitionProfile.objects.count() == 1


def test_save_as_new_shows_service_errors_inline(ops: Client) -> None:
    old_hash = services.response_source_put(content=HTTP_SOURCE)["hash"]
    bad = {**HTTP_SOURCE, "interface": {**HTTP_SOURCE["interface"], "url_env": "PATH"}}
    expected = service_error(lambda: services.response_source_put(content=bad))

    response = ops.post(
        admin_url(ResponseSource, "save_as_new", old_hash), {"content": json.dumps(bad)}
    )

    assert form_errors(response) == {"content": [expected]}
    assert list(ResponseSource.objects.values_list("pk", flat=True)) == [old_hash]


# --- scenarios -----------------------------------------------------------------------------


def test_assemble_from_json(ops: Client, make_workflow: Callable[..., dict[str, Any]]) -> None:
    data = assembly_input(make_workflow(), name="ant_on_plate")

    response = ops.post(admin_url(Scenario, "add"), {"data": json.dumps(data)})

    scenario = Scenario.objects.get()
    assert response["Location"] == admin_url(Scenario, "change", scenario.pk)
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == scenario.pk
    assert scenario.derivations.get().operator == "ops"
    assert any(m.startswith("assembled: stored new scenario") for m in flash(response))

    page = ops.get(response["Location"])
    assert page.status_code == 200
    html = page.content.decode()
    profile = scenario.profile_bindings.get(label="ant").profile
    assert admin_url(CognitionProfile, "change", profile.pk) in html
    assert admin_url(CognitionWorkflow, "change", profile.workflow_id) in html
    assert admin_url(Entity, "change", hashing.entity_hash({**ANT, "id": "ant_alpha"})) in html
    assert escape("A small white plate under a lamp.") in html
    assert admin_url(Scenario, "fork", scenario.pk) in html


def test_assemble_shows_the_service_error_and_writes_nothing(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    data = assembly_input(make_workflow())
    data["entities"][0]["inline"] = {**ANT, "environment": "garden"}
    expected = service_error(lambda: services.scenario_assemble(data=data))

    response = ops.post(admin_url(Scenario, "add"), {"data": json.dumps(data)})

    assert form_errors(response) == {"data": [expected]}
    assert "[unknown_environment_label]" in expected
    for model in (Scenario, Environment, Entity, CognitionProfile, ResponseSource):
        assert model.objects.count() == 0, model


def test_assemble_malformed_json_is_a_form_error(ops: Client) -> None:
    errors = form_errors(ops.post(admin_url(Scenario, "add"), {"data": '{"scenario_slug": }'}))

    assert errors["data"][0].startswith("Malformed JSON: ")


def test_assemble_body_must_be_an_object(ops: Client) -> None:
    expected = service_error(lambda: services.scenario_assemble(data=[]))

    errors = form_errors(ops.post(admin_url(Scenario, "add"), {"data": "[]"}))

    assert errors == {"data": [expected]}


def test_fork(ops: Client, make_workflow: Callable[..., dict[str, Any]]) -> None:
    parent = services.scenario_assemble(data=assembly_input(make_workflow()))["scenario_hash"]
    changes = {"environment_upserts": {"kitchen_plate": {"inline": "A chipped blue plate."}}}
    url = admin_url(Scenario, "fork", parent)
    assert ops.get(url).status_code == 200

    response = ops.post(
        url,
        {
            "changes": json.dumps(changes),
            "name": "blue_plate",
            "note": "bluer",
            "additional_parents": "",
        },
    )

    child = ScenarioName.objects.get(pk="blue_plate").scenario_id
    assert child != parent
    assert response["Location"] == admin_url(Scenario, "change", child)
    edge = ScenarioDerivationParent.objects.get(derivation__child_id=child)
    assert (edge.parent_id, edge.role) == (parent, "primary")
    assert edge.derivation.note == "bluer"
    assert edge.derivation.operator == "ops"
    assert Scenario.objects.count() == 2
    assert any(m.startswith("forked: stored new scenario") for m in flash(response))


def test_fork_errors_land_on_their_fields(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    parent = services.scenario_assemble(data=assembly_input(make_workflow()))["scenario_hash"]
    changes = {
        "environment_upserts": {"kitchen_plate": {"inline": "A blue plate."}},
        "environment_removals": ["kitchen_plate"],
    }
    url = admin_url(Scenario, "fork", parent)

    conflict = form_errors(ops.post(url, {"changes": json.dumps(changes)}))
    bad_parents = form_errors(
        ops.post(url, {"changes": "{}", "additional_parents": json.dumps([{"hash": "nope"}])})
    )
    bad_name = form_errors(ops.post(url, {"changes": "{}", "name": "Not A Label"}))

    assert list(conflict) == ["changes"]
    assert "[conflicting_label_ops]" in conflict["changes"][0]
    assert list(bad_parents) == ["additional_parents"]
    assert list(bad_name) == ["name"]
    assert Scenario.objects.count() == 1


def test_fork_action_opens_the_fork_form(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    parent = services.scenario_assemble(data=assembly_input(make_workflow()))["scenario_hash"]

    response = ops.post(
        admin_url(Scenario, "changelist"), {"action": "fork_selected", "_selected_action": [parent]}
    )

    assert response.status_code == 302
    assert response["Location"] == admin_url(Scenario, "fork", parent)


def test_scenario_list_shows_slug_hash_and_names_without_per_row_queries(
    ops: Client, make_workflow: Callable[..., dict[str, Any]]
) -> None:
    url = admin_url(Scenario, "changelist")
    ops.get(url)  # warm the session and content types

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert ops.get(url).status_code == 200
        return len(queries)

    first = services.scenario_assemble(data=assembly_input(make_workflow(), name="first"))
    one_row = count_queries()
    for index in range(3):
        services.scenario_assemble(
            data=assembly_input(make_workflow(), slug=f"plate_{index}", name=f"plate_{index}")
        )
    assert count_queries() == one_row

    html = ops.get(url).content.decode()
    assert first["scenario_hash"][:12] in html
    assert admin_url(ScenarioName, "change", "plate_2") in html
    assert "Assemble from JSON" in html


# --- names ---------------------------------------------------------------------------------


@pytest.fixture
def two_scenarios(make_workflow: Callable[..., dict[str, Any]]) -> tuple[str, str]:
    """(a, b) with the name "ant_on_plate" pointing to a."""
    a = services.scenario_assemble(data=assembly_input(make_workflow(), name="ant_on_plate"))
    b = services.scenario_assemble(data=assembly_input(make_workflow(), slug="other_plate"))
    return a["scenario_hash"], b["scenario_hash"]


def test_name_set_with_stale_expected_hash_is_cas_failed(
    ops: Client, two_scenarios: tuple[str, str]
) -> None:
    a, b = two_scenarios
    history_before = ScenarioNameHistory.objects.count()

    response = ops.post(
        admin_url(ScenarioName, "add"),
        {"name": "ant_on_plate", "scenario_hash": b, "expected_current_hash": b, "note": "move"},
    )

    errors = form_errors(response)
    assert list(errors) == ["expected_current_hash"]
    message = errors["expected_current_hash"][0]
    assert "[cas_failed]" in message
    assert a in message
    assert b in message
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == a
    assert ScenarioNameHistory.objects.count() == history_before


def test_name_set_expecting_unset_fails_on_a_set_name(
    ops: Client, two_scenarios: tuple[str, str]
) -> None:
    a, b = two_scenarios

    response = ops.post(
        admin_url(ScenarioName, "add"),
        {"name": "ant_on_plate", "scenario_hash": b, "expect_unset": "on"},
    )

    assert "[cas_failed]" in form_errors(response)["expected_current_hash"][0]
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == a


def test_name_move_with_current_hash_and_history(
    ops: Client, two_scenarios: tuple[str, str]
) -> None:
    a, b = two_scenarios
    move_link = ops.get(admin_url(ScenarioName, "change", "ant_on_plate")).content.decode()
    assert escape(f"?name=ant_on_plate&expected_current_hash={a}") in move_link
    prefilled = ops.get(
        admin_url(ScenarioName, "add") + f"?name=ant_on_plate&expected_current_hash={a}"
    ).context["form"]
    assert prefilled["expected_current_hash"].value() == a

    response = ops.post(
        admin_url(ScenarioName, "add"),
        {"name": "ant_on_plate", "scenario_hash": b, "expected_current_hash": a, "note": "move"},
    )

    assert response["Location"] == admin_url(ScenarioName, "change", "ant_on_plate")
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == b
    page = ops.get(response["Location"]).content.decode()
    assert admin_url(Scenario, "change", a) in page
    assert admin_url(Scenario, "change", b) in page
    assert "move" in page


def test_name_unset_leaves_a_tombstone(ops: Client, two_scenarios: tuple[str, str]) -> None:
    a, _b = two_scenarios
    url = admin_url(ScenarioName, "unset", "ant_on_plate")
    assert ops.get(url).context["form"]["expected_current_hash"].value() == a

    response = ops.post(url, {"expected_current_hash": a, "note": "retired"})

    assert not ScenarioName.objects.filter(pk="ant_on_plate").exists()
    tombstone = ScenarioNameHistory.objects.filter(name="ant_on_plate").first()
    assert tombstone is not None
    assert (tombstone.old_hash, tombstone.new_scenario_id, tombstone.note) == (a, None, "retired")
    history = ops.get(response["Location"])
    assert history.status_code == 200
    assert "unset (tombstone)" in history.content.decode()


def test_name_unset_with_stale_expected_hash_changes_nothing(
    ops: Client, two_scenarios: tuple[str, str]
) -> None:
    a, b = two_scenarios

    response = ops.post(
        admin_url(ScenarioName, "unset", "ant_on_plate"), {"expected_current_hash": b}
    )

    assert "[cas_failed]" in form_errors(response)["expected_current_hash"][0]
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == a


# --- readers -------------------------------------------------------------------------------


def test_readers_get_403_on_every_write_view(
    reader: Client, two_scenarios: tuple[str, str]
) -> None:
    a, _b = two_scenarios
    schema = services.json_schema_put(content=WEATHER_SCHEMA)["hash"]
    urls = [admin_url(model, "add") for model in COMPONENT_MODELS]
    urls += [
        admin_url(JsonSchema, "save_as_new", schema),
        admin_url(Scenario, "add"),
        admin_url(Scenario, "fork", a),
        admin_url(ScenarioName, "add"),
        admin_url(ScenarioName, "unset", "ant_on_plate"),
    ]
    counts = {model: model.objects.count() for model in (*COMPONENT_MODELS, Scenario)}

    for url in urls:
        assert reader.get(url).status_code == 403, url
        posted = reader.post(
            url,
            {
                "content": json.dumps({"type": "string"}),
                "changes": "{}",
                "name": "ant_on_plate",
                "scenario_hash": a,
            },
        )
        assert posted.status_code == 403, url

    assert counts == {model: model.objects.count() for model in counts}
    assert ScenarioName.objects.get(pk="ant_on_plate").scenario_id == a


def test_readers_may_look_but_see_no_write_links(
    reader: Client, two_scenarios: tuple[str, str]
) -> None:
    a, _b = two_scenarios
    schema = services.json_schema_put(content=WEATHER_SCHEMA)["hash"]

    pages = {
        admin_url(Scenario, "changelist"): "Assemble from JSON",
        admin_url(Scenario, "change", a): admin_url(Scenario, "fork", a),
        admin_url(JsonSchema, "change", schema): admin_url(JsonSchema, "save_as_new", schema),
        admin_url(ScenarioName, "change", "ant_on_plate"): "Unset…",
    }
    for url, write_link in pages.items():
        response = reader.get(url)
        assert response.status_code == 200, url
        assert write_link not in response.content.decode(), url

    index = reader.get(reverse("admin:index")).content.decode()
    assert admin_url(Scenario, "changelist") in index
    assert (
        reader.post(
            admin_url(Scenario, "changelist"), {"action": "fork_selected", "_selected_action": [a]}
        ).status_code
        == 200
    )
