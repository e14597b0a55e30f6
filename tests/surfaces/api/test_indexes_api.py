"""The cross-world indexes (``GET /api/attempts/``, ``GET /api/llm-calls/``) and a
world's paged turn list (``GET /api/worlds/<slug>/turns/``): filters, paging, the 400 that
names a bad filter, and query counts that do not grow with the page."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from cognition_app.models import LlmCall
from tests.support.worlds import backend_checked
from tests.surfaces.pages.test_world_pages import ANT_OK, BAD_REPLY, make_world, run_turn
from worlds_app.models import AttemptStatus, TurnAttempt, World

pytestmark = pytest.mark.django_db


def failed_attempt(world: World, *, seq: int, subject: str = "ant") -> TurnAttempt:
    now = timezone.now()
    return TurnAttempt.objects.create(
        world=world,
        seq=seq,
        batch_id=uuid.uuid4(),
        batch_index=0,
        batch_size=1,
        status=AttemptStatus.FAILED,
        attempted_turn=world.current_turn + 1,
        started_at=now,
        ended_at=now,
        duration_ms=3,
        failure_step="subject",
        failure_subject=subject,
        failure_reason="the model never produced a valid patch",
    )


@pytest.fixture
def two_worlds(db: Any) -> tuple[World, World]:
    make_world("ant_on_plate_rules", "alpha")
    make_world("ant_on_plate_rules", "beta")
    for _ in range(2):
        run_turn("alpha")
    run_turn("beta")
    alpha, beta = World.objects.get(slug="alpha"), World.objects.get(slug="beta")
    failed_attempt(beta, seq=50, subject="ghost")
    return alpha, beta


def get(client: APIClient, url: str, **params: Any) -> Any:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return response.json()


def test_attempt_index_filters(reader_client: APIClient, two_worlds: Any) -> None:
    data = get(reader_client, "/api/attempts/")
    assert data["count"] == 4
    # newest first: the failed attempt was queued last
    first = data["results"][0]
    assert first["status"] == "failed" and first["world"] == "beta"
    assert first["failure"]["reason"].startswith("the model never")
    assert first["cost"]["calls"] == 0
    assert get(reader_client, "/api/attempts/", status="failed")["count"] == 1
    assert get(reader_client, "/api/attempts/", status="committed")["count"] == 3
    assert get(reader_client, "/api/attempts/", world="alpha")["count"] == 2
    # a subject matches the entities that thought in the attempt, and the failing one
    assert get(reader_client, "/api/attempts/", subject="ant")["count"] == 3
    assert get(reader_client, "/api/attempts/", subject="ghost")["count"] == 1
    assert get(reader_client, "/api/attempts/", model="gpt-4o-mini")["count"] == 0
    page = get(reader_client, "/api/attempts/", limit=2, offset=1)
    assert (page["count"], page["limit"], page["offset"], len(page["results"])) == (4, 2, 1, 2)
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    assert get(reader_client, "/api/attempts/", since=since)["count"] == 4
    assert get(reader_client, "/api/attempts/", until=since)["count"] == 0
    # a blank filter (a form field left empty) is no filter
    assert get(reader_client, "/api/attempts/", status="", world="")["count"] == 4


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "exploded"}, "status"),
        ({"world": "Not A Slug"}, "world"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2030-01-01T00:00:00"}, "until"),  # no offset
        ({"since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"}, "until"),
        ({"limit": "0"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"subject": "a\x00b"}, "subject"),
        ({"model": "m" * 201}, "model"),
        ({"colour": "red"}, "colour"),
    ],
)
@pytest.mark.parametrize("url", ["/api/attempts/", "/api/llm-calls/"])
def test_bad_filters_are_400_naming_the_field(
    reader_client: APIClient, url: str, params: dict[str, str], field: str
) -> None:
    response = reader_client.get(url, params)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_query"
    assert error["details"]["field"] == field
    assert error["message"].startswith(f"{field}: ")


def test_indexes_need_sign_in(anon_client: APIClient) -> None:
    for url in ("/api/attempts/", "/api/llm-calls/"):
        assert anon_client.get(url).status_code in (401, 403)


def test_llm_call_index_outcomes(
    reader_client: APIClient, scripted_llm: Any, toy_sources: str
) -> None:
    # the two generations' calls (a conformance check is an LLM call too: the backend is
    # already checked here, so none runs)
    backend_checked(scripted_llm.base_url, "gpt-4o-mini")
    make_world("ant_on_plate", "llm")
    scripted_llm.script(BAD_REPLY, ANT_OK)
    attempt = run_turn("llm")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    data = get(reader_client, "/api/llm-calls/", world="llm")
    assert data["count"] == 2
    newest, oldest = data["results"]
    # the refused reply reads "rejected", never "succeeded"
    assert oldest["outcome"] == "rejected" and oldest["status"] == "succeeded"
    assert oldest["problem"].startswith("parse error: ")
    assert newest["outcome"] == "accepted" and newest["problem"] == ""
    assert newest["attempt_id"] == str(attempt.pk)
    assert newest["subject_id"] == "ant"
    assert newest["prompt_tokens"] is not None
    rejected = get(reader_client, "/api/llm-calls/", status="rejected")
    assert [r["id"] for r in rejected["results"]] == [oldest["id"]]
    assert get(reader_client, "/api/llm-calls/", status="accepted")["count"] == 1
    assert get(reader_client, "/api/llm-calls/", status="failed")["count"] == 0
    model = LlmCall.objects.get(pk=newest["id"]).requested_model
    assert get(reader_client, "/api/llm-calls/", model=model)["count"] == 2
    assert get(reader_client, "/api/llm-calls/", subject="nobody")["count"] == 0
    assert get(reader_client, "/api/attempts/", model=model)["count"] == 1


def test_turn_list_pages_newest_first(reader_client: APIClient, two_worlds: Any) -> None:
    data = get(reader_client, "/api/worlds/alpha/turns/", limit=2)
    assert (data["count"], data["current_turn"]) == (3, 2)
    assert [t["number"] for t in data["results"]] == [2, 1]
    assert data["results"][0]["narrations"][0]["narration"]
    assert data["results"][0]["cost"]["calls"] == 0
    data = get(reader_client, "/api/worlds/alpha/turns/", limit=2, offset=2)
    assert [t["number"] for t in data["results"]] == [0]
    assert data["results"][0]["narrations"] == []
    assert reader_client.get("/api/worlds/nowhere/turns/").status_code == 404
    response = reader_client.get("/api/worlds/alpha/turns/", {"limit": "x"})
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "limit"


def test_world_list_shows_the_last_outcome(reader_client: APIClient, two_worlds: Any) -> None:
    rows = {w["slug"]: w for w in get(reader_client, "/api/worlds/")["results"]}
    assert rows["beta"]["last_attempt"]["status"] == "failed"
    assert rows["alpha"]["last_attempt"]["status"] == "committed"
    assert get(reader_client, "/api/worlds/beta/")["last_attempt"]["status"] == "failed"


def test_index_query_counts_do_not_grow(
    reader_client: APIClient, two_worlds: Any, django_assert_num_queries: Callable[..., Any]
) -> None:
    _, beta = two_worlds
    get(reader_client, "/api/attempts/")  # warm the token lookup path
    with CaptureQueriesContext(connection) as few:
        get(reader_client, "/api/attempts/", limit=200)
    for seq in range(100, 160):
        failed_attempt(beta, seq=seq)
    with django_assert_num_queries(len(few)):
        assert len(get(reader_client, "/api/attempts/", limit=200)["results"]) == 64
