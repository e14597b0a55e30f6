"""The worlds REST API end to end through the client.

Bad input is never a 500: every rejection is a 4xx with {"error": {"code", "message",
"details"}} and writes no world, turn or attempt row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.response import Response
from rest_framework.test import APIClient

from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import Scenario
from scenarios_app.services import scenario_assemble
from worlds_app.models import AttemptStatus, DeletedWorld, Turn, TurnAttempt, World
from worlds_app.services import turn_attempt_run

pytestmark = pytest.mark.django_db

SCENARIO = "ant_on_plate_rules"


@pytest.fixture
def scenario_hash(db: Any) -> str:
    return scenario_assemble(data=load_fixture(SCENARIO))["scenario_hash"]


@pytest.fixture
def world(operator_client: APIClient, scenario_hash: str) -> str:
    response = operator_client.post(
        "/api/worlds/", {"slug": "plate", "scenario_ref": {"name": SCENARIO}}, format="json"
    )
    assert response.status_code == 201, response.content
    return "plate"


def row_counts() -> dict[str, int]:
    return {
        "worlds": World.objects.count(),
        "turns": Turn.objects.count(),
        "attempts": TurnAttempt.objects.count(),
        "scenarios": Scenario.objects.count(),
    }


@contextmanager
def writes_nothing() -> Iterator[None]:
    before = row_counts()
    yield
    assert row_counts() == before


def assert_error(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


def create_body(**changes: Any) -> dict[str, Any]:
    return {"slug": "w1", "scenario_ref": {"name": SCENARIO}} | changes


# --- create, list, detail ---------------------------------------------------------------------


def test_create_world_returns_201_with_its_detail(
    operator_client: APIClient, scenario_hash: str
) -> None:
    response = operator_client.post(
        "/api/worlds/",
        create_body(name="First plate", start_time="2030-01-01T00:00:00Z"),
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slug"] == "w1"
    assert body["name"] == "First plate"
    assert body["label"] == SCENARIO
    assert body["scenario_hash"] == scenario_hash
    assert body["scenario_ref"] == {"name": SCENARIO, "resolved_hash": scenario_hash}
    assert body["current_turn"] == 0
    assert body["chronon_seconds"] == 60
    assert body["simulation_time"].startswith("2030-01-01T00:00:00")
    assert [e["id"] for e in body["state"]["entities"]] == [
        "ant",
        "crumb",
        "sugar_grain",
        "sesame_seed",
    ]
    assert body["recent_attempts"] == []
    assert World.objects.get(slug="w1").name == "First plate"
    assert Turn.objects.filter(world__slug="w1", number=0).count() == 1


def test_create_world_by_hash_and_by_data(operator_client: APIClient, scenario_hash: str) -> None:
    by_hash = operator_client.post(
        "/api/worlds/", create_body(slug="h", scenario_ref={"hash": scenario_hash}), format="json"
    )
    assert by_hash.status_code == 201, by_hash.content
    assert by_hash.json()["name"] == f"{SCENARIO} #h"
    data = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    by_data = operator_client.post(
        "/api/worlds/", create_body(slug="d", scenario_ref={"data": data}), format="json"
    )
    assert by_data.status_code == 201, by_data.content
    assert by_data.json()["label"] == "picnic_rules"
    assert by_data.json()["scenario_ref"]["data"] == "assembled"


def test_list_and_detail(reader_client: APIClient, world: str) -> None:
    listing = reader_client.get("/api/worlds/")
    assert listing.status_code == 200
    body = listing.json()
    assert body["count"] == 1
    assert (body["limit"], body["offset"]) == (50, 0)
    (summary,) = body["results"]
    assert summary["slug"] == world
    assert summary["name"] == f"{SCENARIO} #{world}"
    assert (summary["attempts_queued"], summary["attempts_running"]) == (0, 0)
    detail = reader_client.get(f"/api/worlds/{world}/")
    assert detail.status_code == 200
    assert detail.json()["slug"] == world
    assert detail.json()["scenario_snapshot"]["scenario_slug"] == SCENARIO


def test_list_query_count_does_not_grow_with_worlds(
    operator_client: APIClient, scenario_hash: str, django_assert_num_queries: Any
) -> None:
    def make(slug: str) -> None:
        response = operator_client.post("/api/worlds/", create_body(slug=slug), format="json")
        assert response.status_code == 201
        operator_client.post(f"/api/worlds/{slug}/turns/", {"count": 2}, format="json")

    make("a")
    with CaptureQueriesContext(connection) as few:
        small = operator_client.get("/api/worlds/")
    # Read now: captured_queries is a view of the connection's log, which the next request
    # clears (request_started → reset_queries).
    baseline = len(few.captured_queries)
    # the token with its user and the sign-in throttle, one page with the count and attempt counts,
    # the names pointing at the page's scenarios
    assert baseline == 3
    for index in range(5):
        make(f"b{index}")
    with django_assert_num_queries(baseline):
        large = operator_client.get("/api/worlds/")
    assert (small.json()["count"], large.json()["count"]) == (1, 6)
    assert {r["attempts_queued"] for r in large.json()["results"]} == {2}


def test_list_paging(operator_client: APIClient, scenario_hash: str) -> None:
    for slug in ("p1", "p2", "p3"):
        operator_client.post("/api/worlds/", create_body(slug=slug), format="json")
    page = operator_client.get("/api/worlds/?limit=2&offset=2").json()
    assert page["count"] == 3
    assert len(page["results"]) == 1
    assert_error(operator_client.get("/api/worlds/?limit=abc"), 400, "invalid_query")
    assert_error(operator_client.get("/api/worlds/?limit=0"), 400, "invalid_query")


# --- create: bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (create_body(scenario_ref={"name": "no_such_scenario"}), 404, "name_not_found"),
        (create_body(scenario_ref={"hash": "f" * 64}), 404, "scenario_not_found"),
        (create_body(slug="Bad Slug"), 400, "invalid_slug"),
        (create_body(slug="-plate"), 400, "invalid_slug"),
        (create_body(slug="x" * 65), 400, "invalid_slug"),
        (create_body(slug=7), 400, "invalid_slug"),
        (create_body(owner="me"), 400, "invalid_input"),
        ({"scenario_ref": {"name": SCENARIO}}, 400, "invalid_input"),
        (create_body(scenario_ref="ant_on_plate_rules"), 400, "invalid_scenario_ref"),
        (create_body(scenario_ref={}), 400, "invalid_scenario_ref"),
        (create_body(scenario_ref={"file": "x.json"}), 400, "invalid_scenario_ref"),
        (
            create_body(scenario_ref={"name": SCENARIO, "hash": "f" * 64}),
            400,
            "invalid_scenario_ref",
        ),
        (create_body(scenario_ref={"hash": "ABC"}), 400, "invalid_hash"),
        (create_body(scenario_ref={"name": "Bad Name"}), 400, "invalid_name"),
        (create_body(scenario_ref={"data": "scenario"}), 400, "invalid_input"),
        (create_body(scenario_ref={"data": {"scenario_slug": "x"}}), 400, "invalid_input"),
        (create_body(start_time="yesterday"), 400, "invalid_start_time"),
        (create_body(start_time="2030-01-01T00:00:00"), 400, "invalid_start_time"),
        (create_body(start_time=1893456000), 400, "invalid_start_time"),
        (create_body(name=""), 400, "invalid_input"),
        (create_body(name=["x"]), 400, "invalid_input"),
        ([create_body()], 400, "invalid_input"),
    ],
)
def test_bad_create_input_is_a_4xx_and_writes_nothing(
    operator_client: APIClient, scenario_hash: str, body: Any, status: int, code: str
) -> None:
    with writes_nothing():
        response = operator_client.post("/api/worlds/", body, format="json")
    assert_error(response, status, code)


def test_out_of_range_start_time_is_a_400_not_a_500(
    operator_client: APIClient, scenario_hash: str
) -> None:
    # BUG (worlds_app/services/worlds.py::_parse_start_time): django.utils.dateparse.
    # parse_datetime raises ValueError for well-formed but impossible datetimes, which escapes
    # as a 500 instead of invalid_start_time.
    operator_client.raise_request_exception = False
    with writes_nothing():
        response = operator_client.post(
            "/api/worlds/", create_body(start_time="2030-13-45T00:00:00Z"), format="json"
        )
    assert response.status_code == 400
    assert_error(response, 400, "invalid_start_time")


def test_nul_in_the_world_name_is_a_400_not_a_500(
    operator_client: APIClient, scenario_hash: str
) -> None:
    # BUG (worlds_app/services/worlds.py::world_create): the name is stored in a PostgreSQL
    # text column, which cannot hold U+0000; psycopg raises DataError and the client gets a
    # 500. The scenario store rejects NUL with reject_nul (invalid_character); worlds do not.
    operator_client.raise_request_exception = False
    with writes_nothing():
        response = operator_client.post(
            "/api/worlds/", create_body(name="Plate\u0000one"), format="json"
        )
    assert response.status_code == 400
    assert_error(response, 400, "invalid_character")


def test_invalid_scenario_data_is_a_400_and_writes_no_scenario_either(
    operator_client: APIClient,
) -> None:
    data = {k: v for k, v in load_fixture(SCENARIO).items() if k not in ("name", "note")}
    data["entities"] = [e for e in data["entities"] if e["inline"]["id"] != "crumb"]
    with writes_nothing():
        response = operator_client.post(
            "/api/worlds/", create_body(scenario_ref={"data": data}), format="json"
        )
    error = assert_error(response, 400, "unknown_entity_reference")
    assert error["details"]["field"].startswith("cognition_profiles.ant.workflow.")


def test_duplicate_slug_is_409(operator_client: APIClient, world: str) -> None:
    with writes_nothing():
        response = operator_client.post("/api/worlds/", create_body(slug=world), format="json")
    assert_error(response, 409, "world_exists")


def test_malformed_json_is_400(operator_client: APIClient, scenario_hash: str) -> None:
    with writes_nothing():
        response = operator_client.post(
            "/api/worlds/", '{"slug": "w1",', content_type="application/json"
        )
    assert_error(response, 400, "malformed_json")


# --- turns --------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 101, -3, "3", True, 2.5, None, [3]])
def test_bad_count_is_400_and_queues_nothing(
    operator_client: APIClient, world: str, count: Any
) -> None:
    with writes_nothing():
        response = operator_client.post(
            f"/api/worlds/{world}/turns/", {"count": count}, format="json"
        )
    error = assert_error(response, 400, "invalid_count")
    assert error["details"]["field"] == "count"


def test_unknown_field_in_enqueue_body_is_400(operator_client: APIClient, world: str) -> None:
    with writes_nothing():
        response = operator_client.post(
            f"/api/worlds/{world}/turns/", {"count": 2, "priority": 1}, format="json"
        )
    assert_error(response, 400, "invalid_input")


def test_enqueue_body_that_is_not_an_object_is_400(operator_client: APIClient, world: str) -> None:
    # BUG (worlds_app/api.py::TurnEnqueueApi.post): `body_object(request) if request.data
    # else {}` treats any falsy JSON body ([], null, false, 0, "") as "no body" and queues one
    # turn. DRF already gives an absent body as {}, so `data = body_object(request)` suffices.
    statuses = {}
    with writes_nothing():
        for raw in ("[3]", "[]", "null", "false", "0", '""'):
            response = operator_client.post(
                f"/api/worlds/{world}/turns/", raw, content_type="application/json"
            )
            statuses[raw] = (response.status_code, response.json().get("error", {}).get("code"))
    assert statuses == dict.fromkeys(statuses, (400, "invalid_input"))


def test_enqueue_three_returns_202_with_three_attempt_ids(
    operator_client: APIClient, world: str
) -> None:
    response = operator_client.post(f"/api/worlds/{world}/turns/", {"count": 3}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == {"batch_id", "attempt_ids"}
    assert len(body["attempt_ids"]) == 3
    attempts = list(TurnAttempt.objects.order_by("seq"))
    assert [str(a.id) for a in attempts] == body["attempt_ids"]
    assert {str(a.batch_id) for a in attempts} == {body["batch_id"]}
    assert [a.batch_index for a in attempts] == [0, 1, 2]
    assert {a.status for a in attempts} == {AttemptStatus.QUEUED}
    assert {a.requested_by for a in attempts} == {"ops"}
    detail = operator_client.get(f"/api/worlds/{world}/").json()
    assert detail["attempts_queued"] == 3
    assert [a["seq"] for a in detail["recent_attempts"]] == [3, 2, 1]


def test_enqueue_without_a_body_queues_one(operator_client: APIClient, world: str) -> None:
    response = operator_client.post(f"/api/worlds/{world}/turns/", format="json")
    assert response.status_code == 202, response.content
    assert len(response.json()["attempt_ids"]) == 1
    empty = operator_client.post(f"/api/worlds/{world}/turns/", {}, format="json")
    assert empty.status_code == 202
    assert TurnAttempt.objects.count() == 2


def test_enqueue_for_unknown_world_is_404(operator_client: APIClient, scenario_hash: str) -> None:
    with writes_nothing():
        response = operator_client.post("/api/worlds/nowhere/turns/", {"count": 1}, format="json")
    assert_error(response, 404, "world_not_found")


def test_turn_detail_and_attempt_after_a_run(operator_client: APIClient, world: str) -> None:
    (attempt_id,) = operator_client.post(f"/api/worlds/{world}/turns/", format="json").json()[
        "attempt_ids"
    ]
    assert turn_attempt_run(attempt_id=attempt_id, owner="test") == AttemptStatus.COMMITTED
    turn = operator_client.get(f"/api/worlds/{world}/turns/1/")
    assert turn.status_code == 200
    body = turn.json()
    assert (body["world"], body["number"], body["attempt_id"]) == (world, 1, attempt_id)
    assert [p["subject_id"] for p in body["patches"]] == ["ant"]
    assert [t["target_id"] for t in body["transitions"]] == ["ant", "ant"]
    attempt = operator_client.get(f"/api/attempts/{attempt_id}/")
    assert attempt.status_code == 200
    assert attempt.json()["status"] == "committed"
    assert attempt.json()["produced_turn"] == 1
    assert [e["kind"] for e in attempt.json()["events"]][-1] == "turn_committed"
    diff = operator_client.get(f"/api/worlds/{world}/diff/?from=0&to=1")
    assert diff.status_code == 200
    assert [(c["target_kind"], c["target_id"]) for c in diff.json()["changes"]] == [
        ("entity_state", "ant"),
        ("entity_memory", "ant"),
    ]
    assert operator_client.get(f"/api/worlds/{world}/").json()["current_turn"] == 1


def test_missing_turn_is_404(operator_client: APIClient, world: str) -> None:
    error = assert_error(
        operator_client.get(f"/api/worlds/{world}/turns/1/"), 404, "turn_not_found"
    )
    assert error["details"]["field"] == "number"
    assert_error(operator_client.get("/api/worlds/nowhere/turns/0/"), 404, "world_not_found")


def test_turn_number_beyond_the_integer_column_is_404(
    operator_client: APIClient, world: str
) -> None:
    operator_client.raise_request_exception = False
    response = operator_client.get(f"/api/worlds/{world}/turns/99999999999/")
    assert_error(response, 404, "turn_not_found")


def test_attempt_id_must_be_a_uuid(operator_client: APIClient, world: str) -> None:
    error = assert_error(operator_client.get("/api/attempts/not-a-uuid/"), 400, "invalid_id")
    assert error["details"]["field"] == "attempt_id"
    assert_error(operator_client.get(f"/api/attempts/{uuid.uuid4()}/"), 404, "attempt_not_found")


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("", 400, "invalid_query"),
        ("?from=0", 400, "invalid_query"),
        ("?to=0", 400, "invalid_query"),
        ("?from=&to=0", 400, "invalid_query"),
        ("?from=a&to=0", 400, "invalid_query"),
        ("?from=-1&to=0", 400, "invalid_query"),
        ("?from=0&to=1", 404, "turn_not_found"),
    ],
)
def test_diff_bad_query(
    operator_client: APIClient, world: str, query: str, status: int, code: str
) -> None:
    assert_error(operator_client.get(f"/api/worlds/{world}/diff/{query}"), status, code)


def test_diff_of_unknown_world_is_404(operator_client: APIClient, scenario_hash: str) -> None:
    assert_error(
        operator_client.get("/api/worlds/nowhere/diff/?from=0&to=0"), 404, "world_not_found"
    )


# --- permissions --------------------------------------------------------------------------------


def test_reader_can_read_but_not_write(reader_client: APIClient, world: str) -> None:
    assert reader_client.get("/api/worlds/").status_code == 200
    assert reader_client.get(f"/api/worlds/{world}/turns/0/").status_code == 200
    with writes_nothing():
        assert_error(
            reader_client.post("/api/worlds/", create_body(slug="mine"), format="json"),
            403,
            "permission_denied",
        )
        assert_error(
            reader_client.post(f"/api/worlds/{world}/turns/", {"count": 1}, format="json"),
            403,
            "permission_denied",
        )
        assert_error(reader_client.delete(f"/api/worlds/{world}/"), 403, "permission_denied")


def test_anonymous_gets_401(anon_client: APIClient, world: str) -> None:
    with writes_nothing():
        for response in (
            anon_client.get("/api/worlds/"),
            anon_client.get(f"/api/worlds/{world}/"),
            anon_client.get(f"/api/worlds/{world}/turns/0/"),
            anon_client.get(f"/api/attempts/{uuid.uuid4()}/"),
            anon_client.post("/api/worlds/", create_body(slug="mine"), format="json"),
            anon_client.post(f"/api/worlds/{world}/turns/", {"count": 1}, format="json"),
            anon_client.delete(f"/api/worlds/{world}/"),
        ):
            assert_error(response, 401, "not_authenticated")
            assert response["WWW-Authenticate"] == 'Token realm="api"'


# --- delete ---------------------------------------------------------------------------------------


def test_delete_then_delete_again(
    operator_client: APIClient, world: str, scenario_hash: str
) -> None:
    operator_client.post(f"/api/worlds/{world}/turns/", {"count": 2}, format="json")
    response = operator_client.delete(f"/api/worlds/{world}/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["deleted"] == world
    assert body["label"] == SCENARIO
    assert body["scenario_hash"] == scenario_hash
    assert body["final_turn"] == 0
    assert DeletedWorld.objects.get().deleted_by == "ops"
    assert row_counts() == {"worlds": 0, "turns": 0, "attempts": 0, "scenarios": 1}
    assert_error(operator_client.delete(f"/api/worlds/{world}/"), 404, "world_not_found")
    assert_error(operator_client.get(f"/api/worlds/{world}/"), 404, "world_not_found")
    assert DeletedWorld.objects.count() == 1
