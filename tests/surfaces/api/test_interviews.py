"""Interviews (docs/populations.md, "Interviewing without disturbing") through the API over real
HTTP (the live server), run by a real Celery worker on a throwaway branch, the agents answering
on the scripted model: the POST answers 202 with the interview queued; each agent is asked in
its own view of the turn, one conversation per agent holding every question; every answer is a
traced call of kind ``interview`` outside any attempt; the world is unchanged (its state hash,
its turns and every turn's state) and no world is added; bad input is a 400 naming the field and
writes nothing; a worker killed mid-interview leaves it queued again (and then answered) by the
reaper, or failed, never running."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from scenarios_app.services import response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import (
    delete_queue,
    measure_queue,
    routed_to,
    unread_queue,
    worker_process,
)
from tests.worlds_app import test_measurements
from worlds_app.models import AttemptEvent, Interview, Turn, World
from worlds_app.services.interview_runs import MAX_INTERVIEW_TRIES, interview_reap

pytestmark = pytest.mark.django_db(transaction=True)
QUEUE = f"interviews-{os.getpid()}"


def buyers_world(slug: str, turns: int) -> World:
    """The buyers' world, its turns run here: their kicks go to a queue no worker reads."""
    with unread_queue(f"{QUEUE}-setup"):
        return test_measurements.buyers_world(slug, turns)


def _worker_env() -> dict[str, str]:
    """What a worker needs that the test process has (the test database; the scripted model's
    and the toys' addresses, set by the fixtures in this process's environment)."""
    return {"CHUKWA_DB_NAME": str(connection.settings_dict["NAME"])}


@pytest.fixture
def worker(scripted_llm: ScriptedLLM, toy_sources: str) -> Iterator[Any]:
    """A real Celery worker consuming this test's queues (interviews run on the measure queue)."""
    with worker_process(QUEUE, env=_worker_env(), queue=QUEUE) as proc, routed_to(QUEUE):
        yield proc


def _http(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0]
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token.key}"}, timeout=30
    )


def _until(slug: str, http: httpx.Client, done: Any, what: str) -> dict[str, Any]:
    """Poll the list over HTTP until ``done(first interview)`` (a wait, not a timed assertion:
    the bound only ends a test that would hang)."""
    deadline = time.monotonic() + 90
    while True:
        listed = http.get(f"/api/worlds/{slug}/interviews/").json()["results"]
        if listed and done(listed[0]):
            return dict(listed[0])
        assert time.monotonic() < deadline, f"never {what}: {listed}"
        time.sleep(0.1)


def _world_rows(slug: str) -> list[tuple[Any, ...]]:
    return list(
        Turn.objects.filter(world__slug=slug)
        .order_by("number")
        .values_list("number", "state_hash", "state")
    )


def test_an_interview_asks_each_agent_in_its_view_and_leaves_the_world_unchanged(
    live_server: Any,
    operator_user: User,
    reader_user: User,
    scripted_llm: ScriptedLLM,
    worker: Any,
) -> None:
    world = buyers_world("buyers", 2)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    before = _world_rows("buyers")
    events = AttemptEvent.objects.count()
    worlds = list(World.objects.order_by("pk").values_list("slug", flat=True))
    scripted_llm.script("I got the candy bar.", "Happy.", "It was empty.", "Annoyed.")
    http = _http(live_server, operator_user)
    answer = http.post(
        "/api/worlds/buyers/interviews/",
        json={
            "turn": 1,
            "subjects": "all",
            "questions": ["What happened at the machine?", "How do you feel?"],
            "source": {"hash": source},
        },
    )
    assert answer.status_code == 202, answer.json()
    queued = answer.json()
    assert queued["status"] == "queued" and queued["answers"] == []
    assert queued["unchanged"] is None and queued["state_hash_after"] == ""
    made = _until("buyers", http, lambda i: i["status"] not in ("queued", "running"), "ended")
    assert made["id"] == queued["id"] and made["tries"] == 1
    assert made["status"] == "completed" and made["unchanged"] is True, made
    assert made["error_code"] == "" and made["finished_at"] is not None
    assert made["state_hash_before"] == made["state_hash_after"] == before[-1][1]
    assert _world_rows("buyers") == before and AttemptEvent.objects.count() == events
    world.refresh_from_db()
    assert world.current_turn == 2
    # the throwaway branch is never a world: nobody's list of worlds gains one
    assert list(World.objects.order_by("pk").values_list("slug", flat=True)) == worlds
    assert [w["slug"] for w in http.get("/api/worlds/").json()["results"]] == ["buyers"]
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
    reader = _http(live_server, reader_user)
    listed = reader.get("/api/worlds/buyers/interviews/").json()["results"]
    assert [i["id"] for i in listed] == [made["id"]] and listed[0]["answers"] == made["answers"]
    refused = reader.post(
        "/api/worlds/buyers/interviews/",
        json={"turn": 1, "subjects": "all", "questions": ["?"], "source": {"hash": source}},
    )
    assert refused.status_code == 403 and Interview.objects.count() == 1


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
    worker: Any,
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
    queued = client.get("/worlds/buyers/interviews/").content.decode()
    made = Interview.objects.get()
    # until it ends, its card polls the page for itself (htmx selects the card)
    if made.status in ("queued", "running"):
        assert f'hx-select="#interview-{made.pk}"' in queued
    deadline = time.monotonic() + 90
    while Interview.objects.get().status in ("queued", "running"):
        assert time.monotonic() < deadline, "the interview never ended"
        time.sleep(0.1)
    page = client.get("/worlds/buyers/interviews/").content.decode()
    assert Interview.objects.get().status == "completed"
    assert "hx-select" not in page and 'data-key="status">completed<' in page
    assert "Because I was hungry." in page and "I waited." in page
    assert 'data-key="unchanged" data-value="true"' in page and hash_before[:12] in page
    assert Interview.objects.get().created_by == operator_user.username
    assert "/worlds/buyers/interviews/" in client.get("/worlds/buyers/").content.decode()


def test_a_slow_answer_keeps_a_short_lease_renewed_so_the_reaper_leaves_it(
    live_server: Any, operator_user: User, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    """The lease is a turn attempt's (CHUKWA_ATTEMPT_LEASE_SECONDS, here 3 s), renewed by a
    heartbeat while the agents answer: an answer slower than the lease is not taken away, and a
    killed worker's interview would be queued again within seconds, not the whole time limit."""
    buyers_world("buyers", 1)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    http = _http(live_server, operator_user)
    scripted_llm.script(Reply(text="Slowly.", delay_s=8), "Hungry.")
    env = {**_worker_env(), "CHUKWA_ATTEMPT_LEASE_SECONDS": "3"}
    with worker_process(QUEUE, env=env, queue=QUEUE), routed_to(QUEUE):
        answer = http.post(
            "/api/worlds/buyers/interviews/",
            json={"turn": 1, "subjects": "all", "questions": ["Why?"], "source": {"hash": source}},
        )
        assert answer.status_code == 202, answer.json()
        deadline = time.monotonic() + 60
        while not scripted_llm.requests:  # the worker is waiting for the slow answer
            assert time.monotonic() < deadline, "the worker never asked the model"
            time.sleep(0.05)
        time.sleep(5)  # longer than the lease: only the heartbeat keeps it
        row = Interview.objects.get()
        assert row.status == "running"
        assert row.lease_expires_at <= timezone.now() + timedelta(seconds=3 + 1)  # short
        assert interview_reap() == {"requeued": [], "failed": [], "sent": []}
        done = _until("buyers", http, lambda i: i["status"] not in ("queued", "running"), "ended")
    assert (done["status"], done["tries"]) == ("completed", 1), done
    assert [a["answer"] for a in done["answers"]] == ["Slowly.", "Hungry."]


def test_a_worker_killed_mid_interview_leaves_it_queued_again_then_answered_never_running(
    live_server: Any, operator_user: User, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    buyers_world("buyers", 1)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    before = _world_rows("buyers")
    http = _http(live_server, operator_user)
    # The first answer comes slowly: the worker is killed while it waits for it.
    scripted_llm.script(Reply(text="Too late.", delay_s=20), "Hungry.", "Empty machine.")
    with worker_process(f"{QUEUE}-doomed", env=_worker_env(), queue=QUEUE) as doomed:
        with routed_to(QUEUE):
            answer = http.post(
                "/api/worlds/buyers/interviews/",
                json={
                    "turn": 1,
                    "subjects": "all",
                    "questions": ["Why?"],
                    "source": {"hash": source},
                },
            )
            assert answer.status_code == 202, answer.json()
            _until("buyers", http, lambda i: i["status"] == "running", "running")
            deadline = time.monotonic() + 60
            while not scripted_llm.requests:  # the worker is waiting for the model
                assert time.monotonic() < deadline, "the worker never asked the model"
                time.sleep(0.05)
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.wait(timeout=30)
    row = Interview.objects.get()
    assert (row.status, row.tries) == ("running", 1)  # what the kill left
    # Before its lease expires the reaper leaves it alone; after, it is queued again and sent.
    assert interview_reap() == {"requeued": [], "failed": [], "sent": []}
    later = timezone.now() + timedelta(hours=1)
    assert Interview.objects.get().lease_expires_at < later
    with worker_process(QUEUE, env=_worker_env(), queue=QUEUE), routed_to(QUEUE):
        reaped = interview_reap(now=later)
        assert reaped["requeued"] == [row.pk] and reaped["sent"] == [row.pk]
        done = _until("buyers", http, lambda i: i["status"] not in ("queued", "running"), "ended")
    assert (done["status"], done["tries"]) == ("completed", 2), done
    assert [(a["subject"], a["answer"]) for a in done["answers"]] == [
        (done["subjects"][0], "Hungry."),
        (done["subjects"][1], "Empty machine."),
    ]
    assert done["state_hash_before"] == done["state_hash_after"] == before[-1][1]
    assert _world_rows("buyers") == before


def test_an_interview_whose_workers_keep_dying_fails_with_the_reason(
    operator_client: APIClient, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    """Tried :data:`MAX_INTERVIEW_TRIES` times, a row left running by a dead worker is failed."""
    buyers_world("buyers", 1)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    with routed_to(f"{QUEUE}-unread"):
        answer = operator_client.post(
            "/api/worlds/buyers/interviews/",
            {"turn": 1, "subjects": "all", "questions": ["Why?"], "source": {"hash": source}},
            format="json",
        )
        assert answer.status_code == 202
        stale = timezone.now() - timedelta(seconds=1)
        Interview.objects.update(
            status="running",
            tries=MAX_INTERVIEW_TRIES,
            lease_owner="gone@host",
            lease_expires_at=stale,
        )
        reaped = interview_reap()
    delete_queue(measure_queue(f"{QUEUE}-unread"))
    row = Interview.objects.get()
    assert reaped["failed"] == [row.pk] and reaped["requeued"] == []
    assert (row.status, row.error_code) == ("failed", "worker_lost")
    assert "gone@host" in row.error_message and row.finished_at is not None
    assert scripted_llm.requests == []
