"""Every path and query parameter is checked before it reaches the database:
a bad form is a 400 naming the field, an absent thing a 404, never a 500 — through the test
client and, for a few cases, over real HTTP against a live server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.services import world_create

pytestmark = pytest.mark.django_db

BEYOND_BIGINT = "9" * 30
LONG = "a" * 5000


@pytest.fixture
def world(db: Any) -> str:
    scenario_assemble(data=load_fixture("ant_on_plate_rules"))
    world_create(data={"slug": "plate", "scenario_ref": {"name": "ant_on_plate_rules"}})
    return "plate"


def assert_error(response: Any, status: int, code: str, field: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == code, error
    if field is not None:
        assert error["details"]["field"] == field, error
        assert error["message"].startswith(f"{field}:"), error
    return error


# --- API path parameters ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "status", "code", "field"),
    [
        ("get", "/api/worlds/%00/", 400, "invalid_slug", "slug"),
        ("get", f"/api/worlds/{LONG}/", 400, "invalid_slug", "slug"),
        ("get", "/api/worlds/Plate!/", 400, "invalid_slug", "slug"),
        ("get", "/api/worlds/nowhere/", 404, "world_not_found", "slug"),
        ("delete", "/api/worlds/%00/", 400, "invalid_slug", "slug"),
        ("post", "/api/worlds/a%00b/turns/", 400, "invalid_slug", "slug"),
        ("get", f"/api/worlds/plate/turns/{BEYOND_BIGINT}/", 404, "turn_not_found", "number"),
        ("get", "/api/worlds/plate/turns/2147483648/", 404, "turn_not_found", "number"),
        ("get", "/api/worlds/nowhere/turns/2147483648/", 404, "turn_not_found", "number"),
        ("get", "/api/worlds/plate/turns/7/", 404, "turn_not_found", "number"),
        ("get", "/api/worlds/%00/turns/0/", 400, "invalid_slug", "slug"),
        ("get", f"/api/worlds/plate/diff/?from=0&to={BEYOND_BIGINT}", 404, "turn_not_found", "to"),
        ("get", "/api/worlds/plate/diff/?from=-1&to=0", 400, "invalid_query", "from"),
        ("get", "/api/attempts/not-a-uuid/", 400, "invalid_id", "attempt_id"),
        ("get", "/api/attempts/%00/", 400, "invalid_id", "attempt_id"),
        ("get", f"/api/attempts/{uuid.uuid4()}/", 404, "attempt_not_found", "attempt_id"),
        ("get", "/api/source-invocations/123/", 400, "invalid_id", "invocation_id"),
        ("get", f"/api/source-invocations/{uuid.uuid4()}/", 404, "invocation_not_found", None),
        ("get", f"/api/llm-calls/{LONG}/", 400, "invalid_id", "call_id"),
        ("get", f"/api/llm-calls/{uuid.uuid4()}/", 404, "llm_call_not_found", None),
        ("get", "/api/json-schemas/abc/", 400, "invalid_hash", "hash"),
        ("get", f"/api/entities/{'A' * 64}/uses/", 400, "invalid_hash", "hash"),
        ("get", f"/api/environments/{'0' * 64}/", 404, "component_not_found", "hash"),
        ("get", "/api/scenarios/%00/", 400, "invalid_reference", "scenario"),
        ("get", f"/api/scenarios/{LONG}/lineage/", 400, "invalid_reference", "scenario"),
        ("get", "/api/scenario-names/Not%20A%20Name/", 400, "invalid_name", "name"),
        ("get", "/api/scenario-names/%00/", 400, "invalid_name", "name"),
    ],
)
def test_api_path_parameters(
    operator_client: APIClient,
    world: str,
    method: str,
    url: str,
    status: int,
    code: str,
    field: str | None,
) -> None:
    if method == "post":
        response = operator_client.post(url, {}, format="json")
    else:
        response = getattr(operator_client, method)(url)
    assert_error(response, status, code, field)


# --- API query parameters -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "field", "code"),
    [
        (f"/api/worlds/?limit={BEYOND_BIGINT}", "limit", "invalid_query"),
        (f"/api/worlds/?offset={BEYOND_BIGINT}", "offset", "invalid_query"),
        ("/api/worlds/?limit=%00", "limit", "invalid_query"),
        ("/api/worlds/?scenario=%00", "scenario", "invalid_hash"),
        ("/api/json-schemas/?offset=-1", "offset", "invalid_query"),
        ("/api/scenarios/?created_after=%00", "created_after", "invalid_query"),
        ("/api/scenarios/?created_before=2030-01-01T00:00:00", "created_before", "invalid_query"),
        ("/api/scenarios/?created_after=2016-12-31T23:59:60Z", "created_after", "invalid_query"),
        (
            "/api/scenarios/?created_after=2030-01-01T00:00:00%2B24:00",
            "created_after",
            "invalid_query",
        ),
        (f"/api/scenarios/?created_after={LONG}", "created_after", "invalid_query"),
        ("/api/scenarios/?has_name=maybe", "has_name", "invalid_query"),
        ("/api/scenarios/?uses_entity_hash=%00", "uses_entity_hash", "invalid_hash"),
    ],
)
def test_api_query_parameters(operator_client: APIClient, url: str, field: str, code: str) -> None:
    assert_error(operator_client.get(url), 400, code, field)


def test_calendar_edge_filters_are_accepted(operator_client: APIClient) -> None:
    for url in (
        "/api/scenarios/?created_after=0001-01-01T00:00:00-05:00",
        "/api/scenarios/?created_before=9999-12-31T23:59:59%2B00:00",
    ):
        response = operator_client.get(url)
        assert response.status_code == 200, response.content


def test_created_filter_outside_the_calendar_in_utc_is_a_400(operator_client: APIClient) -> None:
    # Year 1 at +01:00 is year 0 in UTC: not representable, so a 400 rather than a crash.
    response = operator_client.get("/api/scenarios/?created_after=0001-01-01T00:00:00%2B01:00")
    assert_error(response, 400, "invalid_query", "created_after")


# --- unknown paths and methods --------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "post", "put", "delete", "patch"])
def test_unknown_api_path_is_a_json_404(anon_client: APIClient, method: str) -> None:
    response = getattr(anon_client, method)("/api/no/such/thing/")
    error = assert_error(response, 404, "not_found", "path")
    assert "/api/no/such/thing/" in error["message"]


def test_api_path_without_its_slash_is_a_json_404_with_a_hint(operator_client: APIClient) -> None:
    error = assert_error(operator_client.get("/api/worlds"), 404, "not_found", "path")
    assert "did you mean /api/worlds/" in error["message"]


def test_wrong_method_on_an_api_path_is_a_json_405(operator_client: APIClient) -> None:
    response = operator_client.patch("/api/worlds/", {}, format="json")
    assert_error(response, 405, "method_not_allowed", None)


def test_unknown_page_path_keeps_the_html_404(client: Client) -> None:
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


# --- HTML pages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/worlds/%00/", 400),
        (f"/worlds/{LONG}/", 400),
        ("/worlds/nowhere/", 404),
        (f"/worlds/plate/turns/{BEYOND_BIGINT}/", 404),
        ("/worlds/plate/turns/5/", 404),
        (f"/worlds/plate/diff/?to={BEYOND_BIGINT}", 404),
        ("/worlds/plate/diff/?from=-3", 400),
        ("/worlds/plate/diff/?to=%00", 400),
        ("/worlds/%00/entities/ant/", 400),
        ("/worlds/plate/entities/%00/", 404),
        ("/worlds/plate/environments/%00/", 404),
        ("/attempts/%00/", 400),
        ("/invocations/nope/", 400),
        (f"/llm-calls/{uuid.uuid4()}/", 404),
        ("/store/json-schemas/%00/", 400),
        ("/store/no-such-kind/", 404),
        ("/scenarios/%00/", 400),
        (f"/scenarios/?created_after={BEYOND_BIGINT}", 400),
        ("/names/%00/", 400),
        (f"/worlds/?offset={BEYOND_BIGINT}", 400),
    ],
)
def test_pages_with_bad_parameters(
    client: Client, operator_user: User, world: str, url: str, status: int
) -> None:
    client.force_login(operator_user)
    response = client.get(url)
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("text/html")
    json_response = client.get(url + ("&" if "?" in url else "?") + "format=json")
    assert json_response.status_code == status
    assert json_response.json()["error"]["code"]


def test_workflow_author_page_with_a_bad_world_picker(client: Client, operator_user: User) -> None:
    client.force_login(operator_user)
    for url in ("/workflows/author/?world=%00", f"/workflows/author/subjects?world={LONG}"):
        response = client.get(url)
        assert response.status_code < 500, (url, response.status_code)


# --- over real HTTP -----------------------------------------------------------------------


def _http(method: str, url: str, token: str | None = None) -> tuple[int, str, dict[str, Any]]:
    request = urllib.request.Request(url, method=method)  # noqa: S310 - the live test server
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, response.headers["Content-Type"], json.loads(response.read())
    except urllib.error.HTTPError as exc:
        content_type = exc.headers["Content-Type"]
        body = exc.read()
        return exc.code, content_type, json.loads(body) if "json" in content_type else {}


@pytest.mark.django_db(transaction=True)
def test_live_server_answers_bad_paths_with_json_errors(live_server: Any) -> None:
    user = User.objects.create_user("live-ops", password="live-ops-password-1")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    token = Token.objects.create(user=user).key
    base = live_server.url
    cases = [
        ("GET", "/api/nothing-here/", None, 404, "not_found"),
        ("POST", "/api/nothing-here", None, 404, "not_found"),
        ("GET", "/api/worlds/%00/", token, 400, "invalid_slug"),
        ("GET", "/api/worlds/a%00b/turns/1/", token, 400, "invalid_slug"),
        ("GET", f"/api/worlds/some-world/turns/{BEYOND_BIGINT}/", token, 404, "turn_not_found"),
        ("GET", "/api/worlds/some-world/", token, 404, "world_not_found"),
        ("GET", "/api/attempts/not-a-uuid/", token, 400, "invalid_id"),
        ("GET", "/api/scenarios/%00/", token, 400, "invalid_reference"),
        ("PATCH", "/api/worlds/", token, 405, "method_not_allowed"),
    ]
    for method, path, auth, status, code in cases:
        got_status, content_type, body = _http(method, base + path, auth)
        assert (got_status, content_type) == (status, "application/json"), (method, path)
        assert body["error"]["code"] == code, (method, path, body)
    status, content_type, _ = _http("GET", base + "/no/such/page/")
    assert status == 404
    assert content_type.startswith("text/html")


@pytest.mark.parametrize(
    "url",
    [
        "/admin/scenarios_app/jsonschema/%00/change/",
        "/admin/scenarios_app/entity/%00/history/",
        "/admin/scenarios_app/environment/%00/save-as-new/",
        "/admin/scenarios_app/scenario/%00/fork/",
        "/admin/scenarios_app/scenarioname/%00/change/",
        "/admin/scenarios_app/scenarioname/%00/unset/",
        f"/admin/scenarios_app/scenario/{LONG}/change/",
    ],
)
def test_admin_object_pages_with_an_impossible_key_redirect(
    client: Client, operator_user: User, url: str
) -> None:
    operator_user.is_staff = True
    operator_user.save()
    client.force_login(operator_user)
    response = client.get(url)
    assert response.status_code == 302, response.content[:300]
    assert response["Location"] == "/admin/"
