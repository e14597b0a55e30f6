"""The health endpoint, sign-in redirects and the operator/fixture management commands."""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token

from chukwa_core.patch_schema import world_patch_schema_hash
from scenarios_app.fixture_files import fixture_names, load_fixture
from scenarios_app.models import Scenario, ScenarioName
from tests.support.worker import worker_process


@pytest.fixture(scope="module")
def celery_worker_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker on the embedded Redis, for the health check's worker probe."""
    with worker_process(f"health-test-{os.getpid()}") as proc:
        yield proc


@pytest.mark.django_db
def test_healthz_reports_each_service_and_the_worker(
    client: Client, celery_worker_process: subprocess.Popen[bytes]
) -> None:
    # The detail is for signed-in users; anonymous callers get {"ok": …} alone.
    client.force_login(User.objects.create_user("health-reader"))
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["ok"] is True
    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is True
    assert any(f"health-test-{os.getpid()}" in w for w in body["worker"]["workers"])


@pytest.mark.django_db
def test_anonymous_pages_redirect_to_sign_in(client: Client) -> None:
    for url in ("/", "/admin/"):
        response = client.get(url)
        assert response.status_code == 302
        assert "login" in response["Location"]


@pytest.mark.django_db
def test_sign_in_page_renders_and_signs_in(client: Client) -> None:
    User.objects.create_user("alice", password="a-long-password-1")
    assert client.get("/accounts/login/").status_code == 200
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "a-long-password-1", "next": "/"}
    )
    assert response.status_code == 302
    page = client.get("/")
    assert page.status_code == 200
    assert b"Scenario store" in page.content


@pytest.mark.django_db
def test_create_operator_prints_a_working_token(client: Client) -> None:
    out = io.StringIO()
    call_command("create_operator", "carol", stdout=out)
    text = out.getvalue()
    user = User.objects.get(username="carol")
    token = Token.objects.get(user=user)
    assert token.key in text
    assert user.groups.filter(name="operators").exists()
    response = client.post(
        "/api/environments/",
        {"content": "A quiet hallway."},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token.key}",
    )
    assert response.status_code == 201, response.json()


def test_fixture_files_name_the_kernel_world_patch_schema() -> None:
    assert fixture_names() == [
        "ant_on_plate",
        "ant_on_plate_rules",
        "locked_vending_room",
        "park",
        "park_concurrent",
        "park_mcp",
        "park_visitors_rules",
        "picnic_rules",
    ]
    for name in ("ant_on_plate", "locked_vending_room", "park", "park_concurrent", "park_mcp"):
        assert world_patch_schema_hash() in str(load_fixture(name))
    for name in fixture_names():
        assert load_fixture(name)["name"] == name


@pytest.mark.django_db
def test_load_demo_scenarios_is_idempotent() -> None:
    first = io.StringIO()
    call_command("load_demo_scenarios", stdout=first)
    assert first.getvalue().count("stored (new)") == len(fixture_names())
    assert set(ScenarioName.objects.values_list("name", flat=True)) == set(fixture_names())
    count = Scenario.objects.count()
    second = io.StringIO()
    call_command("load_demo_scenarios", stdout=second)
    assert second.getvalue().count("already stored") == len(fixture_names())
    assert "new rows: none" in second.getvalue()
    assert Scenario.objects.count() == count


@pytest.mark.django_db
def test_load_demo_scenarios_unknown_name_is_a_cli_error() -> None:
    with pytest.raises(CommandError, match="no fixture scenario 'nope'"):
        call_command("load_demo_scenarios", "nope")


def test_fixture_shapes_are_the_spec_ones() -> None:
    ant: dict[str, Any] = load_fixture("ant_on_plate")
    assert list(ant["environments"]) == ["kitchen_plate"]
    assert list(ant["cognition_profiles"]) == ["ant"]
    ids = [e["inline"]["id"] for e in ant["entities"]]
    assert ids == ["ant", "crumb", "sugar_grain", "sesame_seed"]
    vend: dict[str, Any] = load_fixture("locked_vending_room")
    assert list(vend["environments"]) == ["vending_room"]
    assert list(vend["cognition_profiles"]) == ["subject"]
    workflow = vend["cognition_profiles"]["subject"]["inline"]["workflow"]["inline"]
    assert [(n["id"], n["type"]) for n in workflow["nodes"]] == [
        ("perceive", "llm_text"),
        ("intend", "llm_text"),
        ("act", "llm_tool_loop"),
    ]
    assert "director-only" in workflow["nodes"][2]["prompt_template"]["messages"][0]["content"]
