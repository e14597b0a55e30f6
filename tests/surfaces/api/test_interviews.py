"""Interviews (docs/populations.md, "Interviewing without disturbing") through the API, the
agents answering on the scripted model over real HTTP: each agent is asked in its own view of
the turn, one conversation per agent holding every question; every answer is a traced call of
kind ``interview`` outside any attempt; the world is unchanged (its state hash, its turns and
every turn's state); bad input is a 400 naming the field and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from scenarios_app.services import response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import ScriptedLLM
from tests.worlds_app.test_measurements import buyers_world
from worlds_app.models import AttemptEvent, Interview, Turn

pytestmark = pytest.mark.django_db


def _world_rows(slug: str) -> list[tuple[Any, ...]]:
    return list(
        Turn.objects.filter(world__slug=slug)
        .order_by("number")
        .values_list("number", "state_hash", "state")
    )


def test_an_interview_asks_each_agent_in_its_view_and_leaves_the_world_unchanged(
    operator_client: APIClient,
    reader_client: APIClient,
    scripted_llm: ScriptedLLM,
    toy_sources: str,
) -> None:
    world = buyers_world("buyers", 2)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    before = _world_rows("buyers")
    events = AttemptEvent.objects.count()
    scripted_llm.script("I got the candy bar.", "Happy.", "It was empty.", "Annoyed.")
    answer = operator_client.post(
        "/api/worlds/buyers/interviews/",
        {
            "turn": 1,
            "subjects": "all",
            "questions": ["What happened at the machine?", "How do you feel?"],
            "source": {"hash": source},
        },
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    made = answer.json()
    assert made["status"] == "succeeded" and made["unchanged"] is True
    assert made["state_hash_before"] == made["state_hash_after"] == before[-1][1]
    assert _world_rows("buyers") == before and AttemptEvent.objects.count() == events
    world.refresh_from_db()
    assert world.current_turn == 2
    subjects = made["subjects"]
    assert len(subjects) == 2
    assert [(a["subject"], a["answer"]) for a in made["answers"]] == [
        (subjects[0], "I got the candy bar."),
        (subjects[0], "Happy."),
        (subjects[1], "It was empty."),
        (subjects[1], "Annoyed."),
    ]
    # one conversation per agent: the second question carries the first answer; its own view
    requests = scripted_llm.requests
    first, second = requests[0]["messages"], requests[1]["messages"]
    assert first[0]["role"] == "system" and subjects[0] in first[0]["content"]
    assert subjects[1] not in first[0]["content"].split("Where you are")[0]
    assert [m["content"] for m in second[1:]] == [
        "What happened at the machine?",
        "I got the candy bar.",
        "How do you feel?",
    ]
    assert requests[2]["messages"][0]["content"] != first[0]["content"]
    for item in made["answers"]:
        call = LlmCall.objects.select_related("invocation").get(pk=item["llm_call"])
        assert call.status == InvocationStatus.SUCCEEDED
        inv = call.invocation
        assert (inv.kind, inv.attempt_id, inv.world_id) == ("interview", None, world.pk)
        assert (inv.attempted_turn, inv.subject_id) == (1, item["subject"])
    assert not SourceInvocation.objects.filter(kind="interview", attempt__isnull=False).exists()
    listed = reader_client.get("/api/worlds/buyers/interviews/").json()["results"]
    assert [i["id"] for i in listed] == [made["id"]] and listed[0]["answers"] == made["answers"]
    refused = reader_client.post(
        "/api/worlds/buyers/interviews/",
        {"turn": 1, "subjects": "all", "questions": ["?"], "source": {"hash": source}},
        format="json",
    )
    assert refused.status_code == 403


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"turn": 7}, "invalid_turn", "turn"),
        ({"subjects": ["nobody"]}, "unknown_subject", "subjects[0]"),
        ({"subjects": []}, "invalid_subjects", "subjects"),
        ({"questions": []}, "invalid_questions", "questions"),
        ({"questions": ["fine", ""]}, "invalid_questions", "questions[1]"),
        ({"source": {"hash": "0" * 64}}, "invalid_source", "source.hash"),
    ],
)
def test_bad_input_names_the_field_and_asks_nothing(
    operator_client: APIClient,
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    change: dict[str, Any],
    code: str,
    field: str,
) -> None:
    buyers_world("buyers", 1)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    body = {"turn": 1, "subjects": "all", "questions": ["Why?"], "source": {"hash": source}}
    answer = operator_client.post(
        "/api/worlds/buyers/interviews/", {**body, **change}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert not Interview.objects.exists() and scripted_llm.requests == []


def test_the_page_asks_and_shows_the_answers_with_the_world_unchanged(
    client: Client,
    operator_user: User,
    reader_user: User,
    scripted_llm: ScriptedLLM,
    toy_sources: str,
) -> None:
    buyers_world("buyers", 1)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    hash_before = _world_rows("buyers")[-1][1]
    client.force_login(reader_user)
    assert 'id="interview-form"' not in client.get("/worlds/buyers/interviews/").content.decode()
    assert client.post("/worlds/buyers/interviews/", {"turn": "1"}).status_code == 403
    client.force_login(operator_user)
    bad = client.post(
        "/worlds/buyers/interviews/",
        {"turn": "1", "subjects": "nobody", "questions": "Why?", "source": source},
    )
    assert bad.status_code == 400 and "is not an agent of buyers" in bad.content.decode()
    scripted_llm.script("Because I was hungry.", "I waited.")
    done = client.post(
        "/worlds/buyers/interviews/",
        {"turn": "1", "subjects": "all", "questions": "Why?\n", "source": source},
    )
    assert done.status_code == 302
    page = client.get("/worlds/buyers/interviews/").content.decode()
    assert "Because I was hungry." in page and "I waited." in page
    assert 'data-key="unchanged" data-value="true"' in page and hash_before[:12] in page
    assert Interview.objects.get().created_by == operator_user.username
    assert "/worlds/buyers/interviews/" in client.get("/worlds/buyers/").content.decode()
