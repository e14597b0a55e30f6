"""Annotations end to end through the API: any signed-in user scores an attempt, a
turn or an LLM call; the author or an operator changes or deletes it; anonymous callers cannot."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.test import APIClient

from cognition_app.models import LlmCall, SourceInvocation
from surfaces.permissions import is_operator
from tests.support.worlds import create_world, run_turn
from worlds_app.models import Annotation, TurnAttempt

pytestmark = pytest.mark.django_db


@pytest.fixture
def attempt() -> TurnAttempt:
    create_world("ant_on_plate_rules", "plate")
    done = run_turn("plate")
    assert done.status == "committed"
    return done


@pytest.fixture
def llm_call(attempt: TurnAttempt) -> LlmCall:
    # A trace row as the runner writes it, without running a model.
    invocation = SourceInvocation.objects.create(
        attempt=attempt,
        world=attempt.world,
        attempted_turn=1,
        seq=99,
        source_hash="0" * 64,
        kind="llm_generation",
        status="succeeded",
        started_at=timezone.now(),
    )
    return LlmCall.objects.create(
        invocation=invocation,
        base_url="http://127.0.0.1:1/v1",
        requested_model="m",
        status="succeeded",
        started_at=timezone.now(),
    )


@pytest.fixture
def other_reader_client(db: Any) -> APIClient:
    user = User.objects.create_user("other-reader", password="other-password-123")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def error_code(response: Response, status: int) -> str:
    assert response.status_code == status, response.content
    code: str = response.json()["error"]["code"]
    return code


def post(client: APIClient, **body: Any) -> Response:
    return client.post("/api/annotations/", body, format="json")


def turn_target(number: int = 1) -> dict[str, Any]:
    return {"turn": {"world": "plate", "number": number}}


def test_a_reader_annotates_and_the_round_trip_holds(
    reader_client: APIClient, reader_user: User, attempt: TurnAttempt, llm_call: LlmCall
) -> None:
    # A reviewer, not an operator: other writes are refused, annotations are not.
    assert not is_operator(reader_user)
    refused = reader_client.post("/api/worlds/plate/turns/", {}, format="json")
    assert error_code(refused, 403) == "permission_denied"
    created = post(
        reader_client,
        target={"attempt": str(attempt.pk)},
        name="helpfulness",
        value=4,
        comment="Found the crumb at once.",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["target"] == {
        "kind": "attempt",
        "attempt": str(attempt.pk),
        "turn": None,
        "llm_call": None,
    }
    assert (body["name"], body["value"], body["value_kind"]) == ("helpfulness", 4, "number")
    assert body["author"] == "reader"
    assert body["comment"] == "Found the crumb at once."

    on_turn = post(reader_client, target=turn_target(), name="verdict", value="plausible")
    assert on_turn.status_code == 201, on_turn.content
    assert on_turn.json()["target"]["turn"] == {"world": "plate", "number": 1}
    on_call = post(reader_client, target={"llm_call": str(llm_call.pk)}, name="ok", value=True)
    assert on_call.status_code == 201, on_call.content
    assert on_call.json()["value"] is True

    fetched = reader_client.get(f"/api/annotations/{body['id']}/")
    assert fetched.status_code == 200
    assert fetched.json() == body

    listed = reader_client.get("/api/annotations/").json()
    assert listed["count"] == 3
    assert [a["name"] for a in listed["results"]] == ["ok", "verdict", "helpfulness"]


def test_list_filters(
    reader_client: APIClient,
    other_reader_client: APIClient,
    attempt: TurnAttempt,
    llm_call: LlmCall,
) -> None:
    post(reader_client, target={"attempt": str(attempt.pk)}, name="helpfulness", value=4)
    post(other_reader_client, target={"attempt": str(attempt.pk)}, name="helpfulness", value=2.5)
    post(reader_client, target=turn_target(), name="verdict", value="wrong")
    post(reader_client, target=turn_target(0), name="verdict", value="plausible")
    post(reader_client, target={"llm_call": str(llm_call.pk)}, name="ok", value=False)

    def names(query: str) -> list[tuple[str, Any]]:
        response = reader_client.get(f"/api/annotations/?{query}")
        assert response.status_code == 200, response.content
        return sorted((a["name"], a["value"]) for a in response.json()["results"])

    assert names("name=helpfulness") == [("helpfulness", 2.5), ("helpfulness", 4)]
    assert names("name=helpfulness&value=4") == [("helpfulness", 4)]
    assert names("value=wrong") == [("verdict", "wrong")]
    assert names("value=false") == [("ok", False)]
    assert names("target_kind=turn") == [("verdict", "plausible"), ("verdict", "wrong")]
    assert names("world=plate&turn=1") == [("verdict", "wrong")]
    assert names(f"attempt={attempt.pk}") == [("helpfulness", 2.5), ("helpfulness", 4)]
    assert names(f"llm_call={llm_call.pk}") == [("ok", False)]
    assert names("author=other-reader") == [("helpfulness", 2.5)]
    page = reader_client.get("/api/annotations/?limit=2&offset=1").json()
    assert (page["count"], len(page["results"])) == (5, 2)
    assert error_code(reader_client.get("/api/annotations/?colour=red"), 400) == "invalid_query"
    assert error_code(reader_client.get("/api/annotations/?turn=1"), 400) == "invalid_query"
    assert error_code(reader_client.get("/api/annotations/?attempt=nope"), 400) == "invalid_id"


def test_author_updates_others_get_403_operator_may(
    reader_client: APIClient,
    other_reader_client: APIClient,
    operator_client: APIClient,
    attempt: TurnAttempt,
) -> None:
    created = post(reader_client, target={"attempt": str(attempt.pk)}, name="score", value=1)
    url = f"/api/annotations/{created.json()['id']}/"

    updated = reader_client.put(
        url, {"name": "score", "value": 3, "comment": "on reflection"}, format="json"
    )
    assert updated.status_code == 200, updated.content
    assert (updated.json()["value"], updated.json()["comment"]) == (3, "on reflection")
    assert updated.json()["target"]["attempt"] == str(attempt.pk)

    denied = other_reader_client.put(url, {"name": "score", "value": 0}, format="json")
    assert error_code(denied, 403) == "permission_denied"
    assert error_code(other_reader_client.delete(url), 403) == "permission_denied"
    assert Annotation.objects.get().value_number == 3

    by_operator = operator_client.put(url, {"name": "score", "value": 2}, format="json")
    assert by_operator.status_code == 200
    assert by_operator.json()["author"] == "reader"

    deleted = reader_client.delete(url)
    assert deleted.status_code == 200
    assert deleted.json() == {"deleted": created.json()["id"]}
    assert error_code(reader_client.get(url), 404) == "annotation_not_found"
    assert error_code(reader_client.delete(url), 404) == "annotation_not_found"


def test_anonymous_cannot_annotate_or_read(anon_client: APIClient, attempt: TurnAttempt) -> None:
    response = post(anon_client, target={"attempt": str(attempt.pk)}, name="score", value=1)
    assert error_code(response, 401) == "not_authenticated"
    assert error_code(anon_client.get("/api/annotations/"), 401) == "not_authenticated"
    assert not Annotation.objects.exists()


def test_targets_that_do_not_exist_are_404(reader_client: APIClient, attempt: TurnAttempt) -> None:
    missing = str(uuid.uuid4())
    cases = [
        ({"attempt": missing}, "attempt_not_found"),
        ({"llm_call": missing}, "llm_call_not_found"),
        (turn_target(7), "turn_not_found"),
        ({"turn": {"world": "nowhere", "number": 0}}, "turn_not_found"),
    ]
    for target, code in cases:
        assert error_code(post(reader_client, target=target, name="s", value=1), 404) == code
    assert not Annotation.objects.exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"value": 1}, "invalid_input"),  # no name
        ({"name": "Not A Label", "value": 1}, "invalid_name"),
        ({"name": "s", "value": None}, "invalid_value"),
        ({"name": "s", "value": [1]}, "invalid_value"),
        ({"name": "s", "value": "Not a label"}, "invalid_value"),
        ({"name": "s", "value": 10**400}, "invalid_value"),
        ({"name": "s", "value": 1, "comment": "x" * 4097}, "comment_too_large"),
        ({"name": "s", "value": 1, "comment": "é" * 2049}, "comment_too_large"),
        ({"name": "s", "value": 1, "comment": "a\x00b"}, "invalid_character"),
        ({"name": "s", "value": 1, "comment": 5}, "invalid_comment"),
        ({"name": "s", "value": 1, "extra": 1}, "invalid_input"),
    ],
)
def test_bad_values_are_400(
    reader_client: APIClient, attempt: TurnAttempt, body: dict[str, Any], code: str
) -> None:
    response = post(reader_client, target={"attempt": str(attempt.pk)}, **body)
    assert error_code(response, 400) == code
    assert not Annotation.objects.exists()


def test_bad_target_shapes_are_400(reader_client: APIClient, attempt: TurnAttempt) -> None:
    for target, code in [
        ({"attempt": "nope"}, "invalid_id"),
        ({"world": "plate"}, "invalid_target"),
        ({"turn": {"world": "plate"}}, "invalid_target"),
        ({"turn": {"world": "plate", "number": -1}}, "invalid_turn"),
        ({"attempt": str(attempt.pk), "llm_call": str(attempt.pk)}, "invalid_target"),
    ]:
        assert error_code(post(reader_client, target=target, name="s", value=1), 400) == code


def test_a_name_keeps_the_kind_of_its_first_value(
    reader_client: APIClient, attempt: TurnAttempt
) -> None:
    target = {"attempt": str(attempt.pk)}
    first = post(reader_client, target=target, name="score", value=3)
    assert first.status_code == 201
    assert error_code(post(reader_client, target=target, name="score", value="high"), 400) == (
        "invalid_value"
    )
    assert post(reader_client, target=target, name="score", value=0.5).status_code == 201
    # The only annotation of a name may change its kind: nothing else holds the name.
    lone = post(reader_client, target=target, name="mood", value=True).json()
    changed = reader_client.put(
        f"/api/annotations/{lone['id']}/", {"name": "mood", "value": "calm"}, format="json"
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["value_kind"] == "label"


def test_list_query_count_is_flat(
    reader_client: APIClient, attempt: TurnAttempt, django_assert_num_queries: Any
) -> None:
    def listed() -> int:
        # the token with its user and the sign-in throttle, the count, the page (authors,
        # turns joined)
        with django_assert_num_queries(3):
            response = reader_client.get("/api/annotations/")
        assert response.status_code == 200
        count: int = response.json()["count"]
        return count

    post(reader_client, target={"attempt": str(attempt.pk)}, name="s", value=1)
    assert listed() == 1
    for number in (0, 1, 1, 0):
        post(reader_client, target=turn_target(number), name="s", value=number)
    assert listed() == 5


def test_deleting_a_world_deletes_its_annotations(
    reader_client: APIClient, operator_client: APIClient, attempt: TurnAttempt, llm_call: LlmCall
) -> None:
    post(reader_client, target={"attempt": str(attempt.pk)}, name="s", value=1)
    post(reader_client, target=turn_target(), name="s", value=2)
    post(reader_client, target={"llm_call": str(llm_call.pk)}, name="s", value=3)
    assert Annotation.objects.count() == 3
    assert operator_client.delete("/api/worlds/plate/").status_code == 200
    assert not Annotation.objects.exists()
