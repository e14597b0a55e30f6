"""The scenario store's REST API end to end through the client.

Bad input must never be a 500: every rejection is a 4xx with {"error": {"code", "message",
"details"}} and writes no row anywhere in the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.response import Response
from rest_framework.test import APIClient

from chukwa_core import hashing
from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA
from scenarios_app import services
from scenarios_app.models import Environment, ScenarioName
from tests.conftest import HTTP_SOURCE, LLM_SOURCE

pytestmark = pytest.mark.django_db

WorkflowFactory = Callable[..., dict[str, Any]]

DANGLING = hashlib.sha256(b"nothing is stored under this hash").hexdigest()
MiB = 1024 * 1024


# --- helpers -------------------------------------------------------------------------------


def row_counts() -> dict[str, int]:
    return {
        m.__name__: m.objects.count() for m in apps.get_app_config("scenarios_app").get_models()
    }


def agent(entity_id: str = "ant", **changes: Any) -> dict[str, Any]:
    entity = {
        "id": entity_id,
        "name": "Ant",
        "state": "hungry",
        "environment": "room",
        "kind": {"agent": {"goal": "eat", "memory": "", "cognition_profile": "p"}},
    }
    entity.update(changes)
    return entity


def prop(entity_id: str = "crumb") -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": "Crumb",
        "state": "a bread crumb",
        "environment": "room",
        "kind": "prop",
    }


def assemble_body(make_workflow: WorkflowFactory, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scenario_slug": "ant_on_plate",
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
        "cognition_profiles": {"p": {"inline": {"workflow": {"inline": make_workflow()}}}},
        "environments": {"room": {"inline": "A small white plate under a lamp."}},
        "entities": [{"inline": agent()}, {"inline": prop()}],
    }
    body.update(overrides)
    return body


def post_raw(client: APIClient, path: str, raw: bytes) -> Response:
    return client.post(path, data=raw, content_type="application/json")


def ascii_json(value: Any) -> bytes:
    """JSON with \\u escapes, so lone surrogates and NULs reach the server as the client sent them."""
    return json.dumps(value, ensure_ascii=True).encode()


def assert_error(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:500]
    error = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], dict)
    return error


@pytest.fixture
def base(operator_client: APIClient, make_workflow: WorkflowFactory) -> str:
    """A scenario named "base" (profile p, environment room, ant and crumb), via the API."""
    response = operator_client.post(
        "/api/scenarios/assemble/", assemble_body(make_workflow, name="base"), format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()["scenario_hash"]


# --- authentication and permissions --------------------------------------------------------


def test_anonymous_requests_are_401(anon_client: APIClient) -> None:
    for path in ("/api/scenarios/", "/api/environments/", "/api/schema/?format=json"):
        response = anon_client.get(path)
        assert_error(response, 401, "not_authenticated")
        assert response["WWW-Authenticate"].startswith("Token")
    response = anon_client.post("/api/environments/", {"content": "A room."}, format="json")
    assert_error(response, 401, "not_authenticated")
    assert Environment.objects.count() == 0


def test_a_bad_token_is_401(anon_client: APIClient) -> None:
    anon_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert_error(anon_client.get("/api/scenarios/"), 401, "not_authenticated")


def test_readers_read_but_cannot_write(
    reader_client: APIClient, operator_client: APIClient, base: str, make_workflow: WorkflowFactory
) -> None:
    assert reader_client.get("/api/scenarios/").status_code == 200
    assert reader_client.get(f"/api/scenarios/{base}/").status_code == 200
    assert reader_client.get("/api/scenario-names/base/").status_code == 200
    before = row_counts()
    writes = [
        reader_client.post("/api/environments/", {"content": "A room."}, format="json"),
        reader_client.post(
            "/api/scenarios/assemble/",
            assemble_body(make_workflow, description="Reader's."),
            format="json",
        ),
        reader_client.post(
            "/api/scenarios/fork/",
            {"primary_parent": {"name": "base"}, "changes": {"description": "Reader's."}},
            format="json",
        ),
        reader_client.put("/api/scenario-names/mine/", {"hash": base}, format="json"),
        reader_client.delete("/api/scenario-names/base/"),
    ]
    for response in writes:
        assert_error(response, 403, "permission_denied")
    assert row_counts() == before
    assert ScenarioName.objects.get(pk="base").scenario_id == base
    # the operator may do the same
    response = operator_client.post("/api/environments/", {"content": "A room."}, format="json")
    assert response.status_code == 201


def test_session_auth_works_for_reads(reader_user: User, operator_user: User) -> None:
    api = APIClient()
    api.force_login(reader_user)
    response = api.get("/api/scenarios/")
    assert response.status_code == 200
    assert response.json()["count"] == 0

    plain = Client()
    plain.force_login(reader_user)
    response = plain.get("/api/world-patch-schema/")
    assert response.status_code == 200
    assert response.json()["schema"]["title"] == "WorldPatch"
    assert_error(
        plain.post("/api/environments/", {"content": "A room."}, content_type="application/json"),
        403,
        "permission_denied",
    )

    # session writes need the CSRF token, even for operators
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator_user)
    response = strict.post(
        "/api/environments/", {"content": "A room."}, content_type="application/json"
    )
    assert_error(response, 403, "permission_denied")
    assert Environment.objects.count() == 0


# --- components ----------------------------------------------------------------------------

COLLECTIONS: dict[str, tuple[str, Callable[[WorkflowFactory], Any]]] = {
    "json-schemas": ("json_schema", lambda wf: {"type": "object", "title": "Args"}),
    "response-sources": ("response_source", lambda wf: HTTP_SOURCE),
    "cognition-workflows": ("cognition_workflow", lambda wf: wf()),
    "cognition-profiles": ("cognition_profile", lambda wf: {"workflow": {"inline": wf()}}),
    "environments": ("environment", lambda wf: "A windowless room."),
    "entities": ("entity", lambda wf: agent("The Ant")),
    "metrics": (
        "metric",
        lambda wf: {
            "version": 1,
            "label": "drank",
            "kind": "expression",
            "aggregate": "any",
            "expression": "length(calls[?source=='use_drinking_fountain']) > `0`",
        },
    ),
}
# What "uses" adds for some kinds: a source's judge metrics, a metric's measured worlds.
USES_EXTRA = {"response_source": {"metrics"}, "metric": {"worlds"}}


@pytest.mark.parametrize("collection", list(COLLECTIONS))
def test_component_collection_round_trip(
    collection: str, operator_client: APIClient, make_workflow: WorkflowFactory
) -> None:
    kind, content = COLLECTIONS[collection]
    url = f"/api/{collection}/"
    first = operator_client.post(url, {"content": content(make_workflow)}, format="json")
    assert first.status_code == 201, first.content
    created = first.json()
    assert created["was_new"] is True
    component = created["hash"]
    before = row_counts()
    second = operator_client.post(url, {"content": content(make_workflow)}, format="json")
    assert second.status_code == 200
    assert second.json()["hash"] == component
    assert second.json()["was_new"] is False
    assert row_counts() == before
    if kind in ("cognition_workflow", "cognition_profile"):
        assert created["new_components"]["cognition_workflows"] == 1
        assert second.json()["new_components"]["cognition_workflows"] == 0

    detail = operator_client.get(f"{url}{component}/")
    assert detail.status_code == 200
    data = detail.json()
    assert (data["kind"], data["hash"]) == (kind, component)
    assert data["created_at"]
    if kind == "entity":
        assert data["content"]["id"] == "the_ant"
    elif kind == "cognition_profile":
        assert data["content"] == {"workflow_hash": created["workflow_hash"]}
    elif kind != "cognition_workflow":
        assert data["content"] == content(make_workflow)

    listing = operator_client.get(url).json()
    assert component in [row["hash"] for row in listing["results"]]
    assert (listing["limit"], listing["offset"]) == (50, 0)

    uses = operator_client.get(f"{url}{component}/uses/")
    assert uses.status_code == 200
    assert set(uses.json()) == {
        "kind",
        "hash",
        "workflows",
        "cognition_profiles",
        "scenarios",
        *USES_EXTRA.get(kind, ()),
    }
    assert uses.json()["scenarios"] == []


def test_component_list_paging(operator_client: APIClient) -> None:
    made = set()
    for i in range(3):
        response = operator_client.post(
            "/api/environments/", {"content": f"Room {i}."}, format="json"
        )
        made.add(response.json()["hash"])
    first = operator_client.get("/api/environments/?limit=2").json()
    rest = operator_client.get("/api/environments/?limit=2&offset=2").json()
    assert first["count"] == rest["count"] == 3
    assert len(first["results"]) == 2
    assert len(rest["results"]) == 1
    assert {r["hash"] for r in first["results"] + rest["results"]} == made


def test_component_uses_through_the_api(operator_client: APIClient, base: str) -> None:
    scenario = operator_client.get(f"/api/scenarios/{base}/").json()
    room = scenario["environments"]["room"]
    uses = operator_client.get(f"/api/environments/{room}/uses/").json()
    assert [s["hash"] for s in uses["scenarios"]] == [base]
    assert uses["scenarios"][0]["names"] == ["base"]
    source = hashing.response_source_hash(LLM_SOURCE)
    uses = operator_client.get(f"/api/response-sources/{source}/uses/").json()
    assert [w["paths"] for w in uses["workflows"]] == [["nodes[0].llm_source_ref"]]
    assert [s["hash"] for s in uses["scenarios"]] == [base]


# --- scenarios -----------------------------------------------------------------------------

RESULT_KEYS = {
    "scenario_hash",
    "was_new_scenario",
    "cognition_profiles",
    "environments",
    "entities",
    "new_components",
    "derivation_id",
    "name",
}


def test_assemble_endpoint(operator_client: APIClient, make_workflow: WorkflowFactory) -> None:
    response = operator_client.post(
        "/api/scenarios/assemble/",
        assemble_body(make_workflow, name="first", note="first draft", metadata={"k": 1}),
        format="json",
    )
    assert response.status_code == 201
    result = response.json()
    assert set(result) == RESULT_KEYS
    assert result["was_new_scenario"] is True
    assert result["name"] == "first"
    assert result["new_components"] == {
        "json_schemas": 0,
        "response_sources": 1,
        "cognition_workflows": 1,
        "cognition_profiles": 1,
        "environments": 1,
        "entities": 2,
    }
    again = operator_client.post(
        "/api/scenarios/assemble/", assemble_body(make_workflow), format="json"
    )
    assert again.status_code == 200
    assert again.json()["scenario_hash"] == result["scenario_hash"]
    assert again.json()["was_new_scenario"] is False
    assert set(again.json()["new_components"].values()) == {0}

    detail = operator_client.get(f"/api/scenarios/{result['scenario_hash']}/").json()
    first, second = detail["derivations"]
    assert (first["operator"], first["note"], first["metadata"]) == ("ops", "first draft", {"k": 1})
    assert first["parents"] == second["parents"] == []
    assert detail["has_parents"] is False


def test_fork_detail_and_lineage_endpoints(
    operator_client: APIClient, base: str, make_workflow: WorkflowFactory
) -> None:
    response = operator_client.post(
        "/api/scenarios/fork/",
        {
            "primary_parent": {"name": "base"},
            "changes": {
                "cognition_profile_upserts": {
                    "p": {"inline": {"workflow": {"inline": make_workflow("A new prompt.")}}}
                }
            },
            "name": "child",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    fork = response.json()
    assert set(fork) == RESULT_KEYS
    child = fork["scenario_hash"]
    assert fork["new_components"]["cognition_workflows"] == 1
    assert fork["new_components"]["cognition_profiles"] == 1

    detail = operator_client.get("/api/scenarios/child/")
    assert detail.status_code == 200
    data = detail.json()
    assert data["hash"] == child
    assert data["names"] == ["child"]
    assert data["has_parents"] is True
    assert data["child_count"] == 0
    assert data["world_count"] == 0
    assert data["cognition_profiles"] == fork["cognition_profiles"]
    assert data["scenario"]["entities"][0]["id"] == "ant"
    assert data["scenario"]["environments"] == {"room": "A small white plate under a lamp."}
    prompt = data["scenario"]["cognition_profiles"]["p"]["workflow"]["nodes"][0]["prompt_template"]
    assert prompt["messages"][0]["content"] == "A new prompt."
    (derivation,) = data["derivations"]
    assert derivation["parents"] == [{"hash": base, "role": "primary"}]
    assert [t["label"] for t in derivation["metadata"]["touched_components"]] == ["p"]
    assert operator_client.get(f"/api/scenarios/{base}/").json()["child_count"] == 1

    lineage = operator_client.get(f"/api/scenarios/{child}/lineage/")
    assert lineage.status_code == 200
    graph = lineage.json()
    assert graph["root"] == child
    assert {(n["hash"], n["relation"]) for n in graph["nodes"]} == {
        (base, "ancestor"),
        (child, "self"),
    }
    assert [(e["parent"], e["child"], e["role"]) for e in graph["edges"]] == [
        (base, child, "primary")
    ]
    by_name = operator_client.get("/api/scenarios/base/lineage/").json()
    assert {n["relation"] for n in by_name["nodes"]} == {"self", "descendant"}


def test_scenario_list_endpoint(operator_client: APIClient, base: str) -> None:
    response = operator_client.get("/api/scenarios/?has_name=true&limit=10")
    assert response.status_code == 200
    page = response.json()
    assert (page["count"], page["limit"], page["offset"]) == (1, 10, 0)
    (row,) = page["results"]
    assert row["hash"] == base
    assert row["names"] == ["base"]
    assert operator_client.get("/api/scenarios/?has_parents=true").json()["count"] == 0
    room = operator_client.get(f"/api/scenarios/{base}/").json()["environments"]["room"]
    assert operator_client.get(f"/api/scenarios/?uses_environment_hash={room}").json()["count"] == 1


def test_names_endpoint(
    operator_client: APIClient, base: str, make_workflow: WorkflowFactory
) -> None:
    other = operator_client.post(
        "/api/scenarios/assemble/",
        assemble_body(make_workflow, description="Another."),
        format="json",
    ).json()["scenario_hash"]
    url = "/api/scenario-names/base/"

    current = operator_client.get(url).json()
    assert set(current) == {"name", "hash", "updated_at", "scenario", "history"}
    assert (current["name"], current["hash"], current["scenario"]["hash"]) == ("base", base, base)
    assert [(h["old_hash"], h["new_hash"]) for h in current["history"]] == [(None, base)]

    before = row_counts()
    stale = operator_client.put(
        url, {"hash": other, "expected_current_hash": other, "note": "stale"}, format="json"
    )
    error = assert_error(stale, 409, "cas_failed")
    assert (error["details"]["expected"], error["details"]["current"]) == (other, base)
    assert row_counts() == before

    moved = operator_client.put(
        url, {"hash": other, "expected_current_hash": base, "note": "move"}, format="json"
    )
    assert moved.status_code == 200
    assert moved.json()["hash"] == other
    assert moved.json()["history"][0] == {
        **moved.json()["history"][0],
        "old_hash": base,
        "new_hash": other,
        "note": "move",
        "operator": "ops",
    }

    deleted = operator_client.delete(
        url, {"expected_current_hash": other, "note": "retired"}, format="json"
    )
    assert deleted.status_code == 200
    assert deleted.json()["hash"] is None
    assert deleted.json()["scenario"] is None
    assert [(h["old_hash"], h["new_hash"], h["note"]) for h in deleted.json()["history"]] == [
        (other, None, "retired"),
        (base, other, "move"),
        (None, base, ""),
    ]
    assert_error(operator_client.delete(url), 404, "name_not_found")
    assert_error(operator_client.get("/api/scenarios/base/"), 404, "name_not_found")
    # a first set with "must be unset" CAS
    created = operator_client.put(
        "/api/scenario-names/fresh/", {"hash": base, "expected_current_hash": None}, format="json"
    )
    assert created.status_code == 200
    assert created.json()["hash"] == base


def test_world_patch_schema_endpoint(operator_client: APIClient, world_patch_hash: str) -> None:
    response = operator_client.get("/api/world-patch-schema/")
    assert response.status_code == 200
    assert response.json() == {"hash": world_patch_hash, "schema": WORLD_PATCH_SCHEMA}
    assert hashing.json_schema_hash(response.json()["schema"]) == world_patch_hash
    stored = operator_client.get(f"/api/json-schemas/{world_patch_hash}/")
    assert stored.json()["content"] == WORLD_PATCH_SCHEMA


def test_openapi_schema(operator_client: APIClient, reader_client: APIClient) -> None:
    as_json = reader_client.get("/api/schema/?format=json")
    assert as_json.status_code == 200
    paths = json.loads(as_json.content)["paths"]
    assert "/api/scenarios/assemble/" in paths
    assert "/api/json-schemas/" in paths
    assert "post" in paths["/api/scenarios/fork/"]
    assert "put" in paths["/api/scenario-names/{name}/"]
    # without a format, drf-spectacular answers YAML
    as_yaml = operator_client.get("/api/schema/")
    assert as_yaml.status_code == 200
    assert as_yaml["Content-Type"].startswith("application/vnd.oai.openapi")
    assert b"/api/scenarios/assemble/:" in as_yaml.content


def _make_scenarios(make_workflow: WorkflowFactory, start: int, stop: int) -> None:
    for i in range(start, stop):
        made = services.scenario_assemble(
            data=assemble_body(make_workflow, description=f"Scenario {i}.", name=f"s{i}")
        )
        if i % 4 == 0:
            services.scenario_fork(
                data={
                    "primary_parent": {"hash": made["scenario_hash"]},
                    "changes": {"description": f"Fork of {i}."},
                }
            )


def test_scenario_list_endpoint_query_count_is_constant(
    operator_client: APIClient, make_workflow: WorkflowFactory, django_assert_num_queries: Any
) -> None:
    _make_scenarios(make_workflow, 0, 4)
    with CaptureQueriesContext(connection) as few:
        small = operator_client.get("/api/scenarios/?limit=200")
    _make_scenarios(make_workflow, 4, 24)
    with django_assert_num_queries(len(few.captured_queries)):
        large = operator_client.get("/api/scenarios/?limit=200")
    assert (small.json()["count"], large.json()["count"]) == (5, 30)
    assert len(large.json()["results"]) == 30


# --- bad input: always a 4xx with an error code, never a write -----------------------------

Call = Callable[[APIClient, str, WorkflowFactory], Response]


def _assemble(**overrides: Any) -> Call:
    def call(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
        return client.post(
            "/api/scenarios/assemble/", assemble_body(make_workflow, **overrides), format="json"
        )

    return call


def _assemble_raw(**overrides: Any) -> Call:
    def call(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
        return post_raw(
            client,
            "/api/scenarios/assemble/",
            ascii_json(assemble_body(make_workflow, **overrides)),
        )

    return call


def _post(path: str, body: Any) -> Call:
    def call(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
        return client.post(path, body, format="json")

    return call


def _raw(path: str, raw: bytes) -> Call:
    def call(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
        return post_raw(client, path, raw)

    return call


def _get(path: str) -> Call:
    def call(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
        return client.get(path)

    return call


def _fork(**body: Any) -> Call:
    def call(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
        data = {"primary_parent": {"hash": base}, "changes": {"description": "Forked."}, **body}
        return client.post("/api/scenarios/fork/", data, format="json")

    return call


def _too_large_scenario(client: APIClient, base: str, make_workflow: WorkflowFactory) -> Response:
    environments = {f"room{i}": {"inline": chr(ord("a") + i) * (60 * 1024)} for i in range(5)}
    body = assemble_body(
        make_workflow, environments=environments, entities=[{"inline": agent(environment="room0")}]
    )
    return client.post("/api/scenarios/assemble/", body, format="json")


def _fork_with_nul_in_role(
    client: APIClient, base: str, make_workflow: WorkflowFactory
) -> Response:
    additional = [{"hash": base, "role": "donor\x00"}]
    return _fork(additional_parents=additional)(client, base, make_workflow)


def _deep(depth: int) -> bytes:
    return b'{"content": ' + b"[" * depth + b"]" * depth + b"}"


BAD_INPUT: dict[str, tuple[Call, int, str]] = {
    # malformed and mistyped bodies
    "malformed_json": (_raw("/api/environments/", b'{"content": '), 400, "malformed_json"),
    "malformed_json_assemble": (
        _raw("/api/scenarios/assemble/", b'{"scenario_slug": }'),
        400,
        "malformed_json",
    ),
    "nan_is_not_json": (
        _raw("/api/json-schemas/", b'{"content": {"maximum": NaN}}'),
        400,
        "malformed_json",
    ),
    "list_body_component": (_post("/api/environments/", ["A room."]), 400, "invalid_input"),
    "list_body_assemble": (_post("/api/scenarios/assemble/", [1, 2]), 400, "invalid_input"),
    "string_body_fork": (_raw("/api/scenarios/fork/", b'"base"'), 400, "invalid_input"),
    "form_encoded": (
        lambda c, b, wf: c.post("/api/environments/", {"content": "A room."}, format="multipart"),
        415,
        "unsupported_media_type",
    ),
    "chronon_string": (_assemble(chronon_seconds="60"), 400, "invalid_chronon"),
    "entities_object": (_assemble(entities={"ant": {"inline": agent()}}), 400, "invalid_input"),
    "profiles_list": (_assemble(cognition_profiles=[]), 400, "invalid_input"),
    "unknown_top_level_field": (_assemble(cognition={"perceive": "x"}), 400, "invalid_input"),
    "unknown_field_in_content_body": (
        _post("/api/environments/", {"content": "A room.", "label": "room"}),
        400,
        "invalid_input",
    ),
    "missing_content": (_post("/api/environments/", {}), 400, "invalid_input"),
    "fork_unknown_change": (
        _fork(changes={"environment": "A room."}),
        400,
        "invalid_input",
    ),
    # sizes
    "scenario_too_large": (_too_large_scenario, 400, "scenario_too_large"),
    "body_beyond_upload_limit": (
        _raw("/api/environments/", b'{"content": "' + b"x" * (4 * MiB + 1) + b'"}'),
        413,
        "request_too_large",
    ),
    "environment_too_large": (
        _post("/api/environments/", {"content": "x" * (64 * 1024 + 1)}),
        400,
        "environment_too_large",
    ),
    # identifiers and hashes
    "invalid_entity_id": (
        _post("/api/entities/", {"content": agent("first ant!")}),
        400,
        "invalid_entity_id",
    ),
    "invalid_entity_id_inline": (
        _assemble(entities=[{"inline": agent("first ant!")}]),
        400,
        "invalid_entity_id",
    ),
    "invalid_hash_in_path": (_get("/api/entities/xyz/"), 400, "invalid_hash"),
    "invalid_hash_in_uses_path": (_get("/api/environments/XYZ/uses/"), 400, "invalid_hash"),
    "unknown_hash": (_get(f"/api/entities/{DANGLING}/"), 404, "component_not_found"),
    "unknown_hash_uses": (
        _get(f"/api/cognition-profiles/{DANGLING}/uses/"),
        404,
        "component_not_found",
    ),
    "unknown_scenario_hash": (_get(f"/api/scenarios/{DANGLING}/"), 404, "scenario_not_found"),
    "invalid_scenario_ref": (_get("/api/scenarios/Not%20A%20Name/"), 400, "invalid_reference"),
    "unknown_scenario_name": (_get("/api/scenarios/nobody/"), 404, "name_not_found"),
    "unknown_scenario_name_lineage": (
        _get("/api/scenarios/nobody/lineage/"),
        404,
        "name_not_found",
    ),
    "unknown_name": (_get("/api/scenario-names/nobody/"), 404, "name_not_found"),
    "invalid_name": (_get("/api/scenario-names/No%20Such/"), 400, "invalid_name"),
    "fork_unknown_parent_name": (_fork(primary_parent={"name": "nobody"}), 404, "name_not_found"),
    "fork_unknown_parent_hash": (
        _fork(primary_parent={"hash": DANGLING}),
        404,
        "scenario_not_found",
    ),
    # references
    "dangling_entity": (
        _assemble(entities=[{"inline": agent()}, {"hash": DANGLING}]),
        400,
        "unresolved_reference",
    ),
    "dangling_profile_workflow": (
        _post("/api/cognition-profiles/", {"content": {"workflow": {"hash": DANGLING}}}),
        400,
        "unresolved_reference",
    ),
    "dangling_workflow_source": (
        lambda c, b, wf: c.post(
            "/api/cognition-workflows/",
            {
                "content": {
                    **wf(),
                    "nodes": [{**wf()["nodes"][0], "llm_source_ref": {"hash": DANGLING}}],
                }
            },
            format="json",
        ),
        400,
        "unresolved_reference",
    ),
    "invalid_reference_shape": (
        _assemble(environments={"room": "A room."}),
        400,
        "invalid_reference",
    ),
    "conflicting_label_ops": (
        _fork(
            changes={
                "environment_upserts": {"room": {"inline": "Never stored."}},
                "environment_removals": ["room"],
            }
        ),
        409,
        "conflicting_label_ops",
    ),
    # characters and numbers PostgreSQL or JCS cannot hold
    "nul_in_environment": (
        _post("/api/environments/", {"content": "a\x00b"}),
        400,
        "invalid_character",
    ),
    "nul_in_entity_name": (
        _post("/api/entities/", {"content": agent(name="A\x00nt")}),
        400,
        "invalid_character",
    ),
    "nul_in_description": (_assemble(description="An ant\x00."), 400, "invalid_character"),
    "nul_in_metadata": (_assemble(metadata={"k\x00": "v"}), 400, "invalid_character"),
    "nul_in_name_note": (
        lambda c, b, wf: c.put(
            "/api/scenario-names/x/", {"hash": b, "note": "\x00"}, format="json"
        ),
        400,
        "invalid_character",
    ),
    "integer_beyond_2_53": (
        _post("/api/json-schemas/", {"content": {"type": "integer", "maximum": 2**60}}),
        400,
        "not_canonicalizable",
    ),
    "integer_beyond_2_53_in_source_params": (
        _post(
            "/api/response-sources/",
            {
                "content": {
                    **LLM_SOURCE,
                    "interface": {**LLM_SOURCE["interface"], "params": {"seed": 2**53 + 1}},
                }
            },
        ),
        400,
        "not_canonicalizable",
    ),
    "lone_surrogate_in_environment": (
        _raw("/api/environments/", b'{"content": "A room \\ud800."}'),
        400,
        "invalid_character",
    ),
    # query strings
    "unknown_list_filter": (_get("/api/scenarios/?colour=red"), 400, "invalid_query"),
    "limit_zero": (_get("/api/scenarios/?limit=0"), 400, "invalid_query"),
    "limit_201": (_get("/api/scenarios/?limit=201"), 400, "invalid_query"),
    "offset_negative": (_get("/api/scenarios/?offset=-1"), 400, "invalid_query"),
    "component_limit_zero": (_get("/api/entities/?limit=0"), 400, "invalid_query"),
    "component_offset_negative": (_get("/api/entities/?offset=-1"), 400, "invalid_query"),
    "bad_datetime": (_get("/api/scenarios/?created_after=yesterday"), 400, "invalid_query"),
    "bad_uses_hash": (_get("/api/scenarios/?uses_entity_hash=xyz"), 400, "invalid_hash"),
    # ---- each case below fails today: a 500, or wrong input accepted (bugs; see the report) ----
    "regression_note_of_the_wrong_type": (_assemble(note=[]), 400, "invalid_input"),
    "regression_operator_of_the_wrong_type": (_assemble(operator=False), 400, "invalid_input"),
    "regression_nul_in_note": (_assemble(note="first\x00draft"), 400, "invalid_character"),
    "regression_nul_in_operator": (_assemble(operator="ops\x00"), 400, "invalid_character"),
    "regression_nul_in_parent_role": (_fork_with_nul_in_role, 400, "invalid_character"),
    "regression_lone_surrogate_in_note": (
        _assemble_raw(note="draft \ud800"),
        400,
        "invalid_character",
    ),
    "regression_lone_surrogate_in_metadata": (
        _assemble_raw(metadata={"k": "\udc00"}),
        400,
        "invalid_character",
    ),
    "regression_entity_id_longer_than_its_column": (
        _post("/api/entities/", {"content": agent("a" * 201)}),
        400,
        "invalid_entity_id",
    ),
    "regression_offset_beyond_bigint": (
        _get("/api/scenarios/?offset=" + "9" * 20),
        400,
        "invalid_query",
    ),
    "regression_component_offset_beyond_bigint": (
        _get("/api/entities/?offset=" + "9" * 20),
        400,
        "invalid_query",
    ),
    "regression_deeply_nested_json": (
        _raw("/api/json-schemas/", _deep(5000)),
        400,
        "malformed_json",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_4xx_that_writes_nothing(
    case: str, operator_client: APIClient, base: str, make_workflow: WorkflowFactory
) -> None:
    call, status, code = BAD_INPUT[case]
    # A 500 must show up as a failed assertion on the status, not as a raised exception.
    operator_client.raise_request_exception = False
    before = row_counts()
    response = call(operator_client, base, make_workflow)
    assert response.status_code < 500, f"{case}: {response.status_code}"
    assert_error(response, status, code)
    assert row_counts() == before


def test_reference_keys_inside_a_request_template_are_data(
    operator_client: APIClient, make_workflow: WorkflowFactory
) -> None:
    # request_template is authored JSON sent to the source, so a "*_ref" key inside it is not a
    # component reference: it is stored verbatim and gets no reference edge.
    workflow = make_workflow()
    workflow["ambient_sources"] = [
        {
            "id": "weather",
            "source_ref": {"inline": HTTP_SOURCE},
            "run": "once_per_turn",
            "scope": "world",
            "visible_to": "world",
            "request_template": {"query": {"source_ref": "nope"}},
            "inject_as": "/ambient/weather",
        }
    ]
    response = operator_client.post(
        "/api/cognition-workflows/", {"content": workflow}, format="json"
    )
    assert response.status_code == 201, response.content
    stored = operator_client.get(f"/api/cognition-workflows/{response.json()['hash']}/").json()
    ambient = stored["content"]["ambient_sources"][0]
    assert ambient["request_template"] == {"query": {"source_ref": "nope"}}
    assert ambient["source_ref"] == {"hash": hashing.response_source_hash(HTTP_SOURCE)}
    uses = operator_client.get(
        f"/api/response-sources/{hashing.response_source_hash(HTTP_SOURCE)}/uses/"
    ).json()
    assert [w["paths"] for w in uses["workflows"]] == [["ambient_sources[0].source_ref"]]


@pytest.mark.django_db
def test_name_delete_with_a_non_object_body_is_400_and_unsets_nothing(
    operator_client: APIClient,
) -> None:
    from scenarios_app.fixture_files import load_fixture
    from scenarios_app.models import ScenarioName
    from scenarios_app.services import scenario_assemble

    scenario_assemble(data=load_fixture("ant_on_plate_rules"))
    response = operator_client.delete(
        "/api/scenario-names/ant_on_plate_rules/", data=b"[]", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"
    assert ScenarioName.objects.filter(pk="ant_on_plate_rules").exists()
    # no body at all still unsets
    assert operator_client.delete("/api/scenario-names/ant_on_plate_rules/").status_code == 200
    assert not ScenarioName.objects.filter(pk="ant_on_plate_rules").exists()
