"""Biographies runs on real Celery workers (docs/populations.md, "Biographies written by a
model"): the request answers 202 at once and a worker writes the texts, its progress readable as
it goes; a worker killed mid-run leaves the run queued again by the reaper, whose next try asks
only the agents still without a text (their texts kept, their calls not paid twice), or failed
once tried too often, never running; a run whose try runs out of time goes on in a new task
without counting as a try; a later try's budget counts what the earlier tries spent."""

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
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cognition_app.models import LlmCall
from scenarios_app.models import Population
from scenarios_app.services import response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, unread_queue, worker_process
from tests.surfaces.api.test_population_biographies import PROMPT, _biography, _population
from worlds_app.models import BiographyRun, BiographyText
from worlds_app.services import biography_runs
from worlds_app.services.biography_runs import (
    MAX_BIOGRAPHY_TRIES,
    biography_reap,
    biography_run_execute,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
QUEUE = f"biographies-{os.getpid()}"
BODY = {"source": {"label": "chat"}, "prompt": PROMPT}


def _worker_env() -> dict[str, str]:
    return {"CHUKWA_DB_NAME": str(connection.settings_dict["NAME"])}


@pytest.fixture
def http(live_server: Any, operator_user: User) -> Iterator[httpx.Client]:
    token = Token.objects.get_or_create(user=operator_user)[0]
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token.key}"}, timeout=30
    ) as client:
        yield client


def _population_hash(http: httpx.Client, size: int) -> str:
    made = http.post("/api/populations/", json={"content": _population(size=size)})
    assert made.status_code in (200, 201), made.json()
    return str(made.json()["hash"])


def _until(http: httpx.Client, url: str, done: Any, what: str) -> dict[str, Any]:
    """Read the run over HTTP until ``done(run)`` (a wait: the bound only ends a test that
    would hang); every state seen, in order, is kept in ``seen``."""
    deadline = time.monotonic() + 90
    while True:
        run = http.get(url).json()
        _until.seen.append(run)  # type: ignore[attr-defined]
        if done(run):
            return dict(run)
        assert time.monotonic() < deadline, f"never {what}: {run}"
        time.sleep(0.05)


def test_a_worker_writes_them_and_the_run_shows_its_progress(
    http: httpx.Client, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _population_hash(http, 6)
    scripted_llm.route(lambda body: Reply(text=_biography(body), delay_s=0.3))
    with worker_process(QUEUE, env=_worker_env(), queue=QUEUE), routed_to(QUEUE):
        accepted = http.post(f"/api/populations/{h}/biographies/", json=BODY)
        assert accepted.status_code == 202, accepted.json()
        url = accepted.headers["Location"]
        _until.seen = []  # type: ignore[attr-defined]
        run = _until(http, url, lambda r: r["status"] in ("completed", "failed"), "ended")
    assert (run["status"], run["done"], run["tries"]) == ("completed", 6, 1), run
    # it was read while running, part done, and its count never went back
    seen = _until.seen  # type: ignore[attr-defined]
    assert any(r["status"] == "running" and 0 < r["done"] < 6 for r in seen), seen
    counts = [r["done"] for r in seen]
    assert counts == sorted(counts)
    stored = Population.objects.get(pk=run["result"]["hash"]).content["biographies"]["texts"]
    assert stored == [_biography(r) for r in scripted_llm.requests]


def test_a_worker_killed_mid_run_leaves_it_queued_again_and_the_texts_it_wrote_kept(
    http: httpx.Client, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _population_hash(http, 5)
    # Agents 1 and 2 answer at once; agent 3's first answer is slow, and the worker is killed
    # while it waits for it.
    slow = {"left": 1}

    def reply(body: dict[str, Any]) -> Reply:
        if "visitor 3," in body["messages"][-1]["content"] and slow["left"]:
            slow["left"] -= 1
            return Reply(text="Too late.", delay_s=20)
        return Reply(text=_biography(body))

    scripted_llm.route(reply)
    with worker_process(f"{QUEUE}-doomed", env=_worker_env(), queue=QUEUE) as doomed:
        with routed_to(QUEUE):
            accepted = http.post(f"/api/populations/{h}/biographies/", json=BODY)
            assert accepted.status_code == 202, accepted.json()
            url = accepted.headers["Location"]
            deadline = time.monotonic() + 60
            while len(scripted_llm.requests) < 3:  # the worker waits for agent 3's answer
                assert time.monotonic() < deadline, "the worker never asked for agent 3"
                time.sleep(0.05)
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.wait(timeout=30)
    run = BiographyRun.objects.get()
    assert (run.status, run.tries, run.done) == ("running", 1, 2)  # what the kill left
    # Before its lease expires the reaper leaves it alone; after, it is queued again and sent.
    assert biography_reap() == {"requeued": [], "failed": [], "sent": []}
    later = timezone.now() + timedelta(hours=1)
    with worker_process(QUEUE, env=_worker_env(), queue=QUEUE), routed_to(QUEUE):
        reaped = biography_reap(now=later)
        assert reaped["requeued"] == [run.pk] and reaped["sent"] == [run.pk]
        _until.seen = []  # type: ignore[attr-defined]
        done = _until(http, url, lambda r: r["status"] in ("completed", "failed"), "ended")
    assert (done["status"], done["tries"], done["done"]) == ("completed", 2, 5), done
    # agents 1 and 2 were not asked again: 2 + the killed call + agents 3, 4, 5
    asked = [r["messages"][-1]["content"] for r in scripted_llm.requests]
    assert len(asked) == 6
    assert sum("visitor 1," in a for a in asked) == sum("visitor 2," in a for a in asked) == 1
    texts = Population.objects.get(pk=done["result"]["hash"]).content["biographies"]["texts"]
    assert [t.split(",")[0] for t in texts] == [f"Born {a} years ago" for a in _ages(http, h)]
    assert "Too late." not in texts
    # the killed call is traced (failed or interrupted), never running, and not in the result
    killed = LlmCall.objects.exclude(pk__in=done["result"]["llm_calls"])
    assert killed.count() == 1 and killed.get().status != "running"


def _ages(http: httpx.Client, h: str) -> list[int]:
    agents = http.get(f"/api/populations/{h}/coverage/").json()["agents"]
    return [a["values"]["age"] for a in agents]


def test_a_run_whose_workers_keep_dying_fails_with_the_reason(
    operator_client: Any, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = operator_client.post(
        "/api/populations/", {"content": _population(size=2)}, format="json"
    ).json()["hash"]
    with unread_queue(f"{QUEUE}-unread"):
        accepted = operator_client.post(f"/api/populations/{h}/biographies/", BODY, format="json")
        assert accepted.status_code == 202
        run = BiographyRun.objects.get()
        stale = timezone.now() - timedelta(seconds=1)
        BiographyRun.objects.filter(pk=run.pk).update(
            status="running", tries=MAX_BIOGRAPHY_TRIES, lease_expires_at=stale
        )
        assert biography_reap()["failed"] == [run.pk]
    read = operator_client.get(accepted.json()["url"]).json()
    assert read["status"] == "failed" and read["error"]["code"] == "worker_lost"
    assert f"tried {MAX_BIOGRAPHY_TRIES} times" in read["error"]["message"]
    assert Population.objects.count() == 1


def test_a_try_out_of_time_goes_on_in_a_new_task_and_the_budget_counts_every_try(
    operator_client: Any, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = operator_client.post(
        "/api/populations/", {"content": _population(size=4)}, format="json"
    ).json()["hash"]
    scripted_llm.route(lambda body: Reply(text=_biography(body), delay_s=0.3))
    # a try asks for 0.5 s: one or two agents each
    monkeypatch.setattr(biography_runs, "try_seconds", lambda: 0.5)
    with unread_queue(f"{QUEUE}-unread"):
        body = {**BODY, "budget": {"max_tokens_total": 100_000}}
        accepted = operator_client.post(f"/api/populations/{h}/biographies/", body, format="json")
        run_id = accepted.json()["id"]
        ends = []
        spent_before = []
        for _ in range(8):
            run = BiographyRun.objects.get(pk=run_id)
            spent_before.append(biography_runs._spent(run))
            ends.append(biography_run_execute(run_id=run_id, owner="test"))
            if ends[-1] != "queued":
                break
    assert ends[-1] == "completed" and ends.count("queued") >= 1, ends
    run = BiographyRun.objects.get(pk=run_id)
    assert (run.tries, run.done) == (1, 4)  # going on is no new try
    assert len(scripted_llm.requests) == 4  # no agent asked twice
    # each later try's budget starts from what the earlier ones spent
    calls = LlmCall.objects.all()
    total = sum((c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in calls)
    assert spent_before[0] == (0, 0)
    assert 0 < spent_before[-1][0] < total
    assert biography_runs._spent(run)[0] == total
    assert BiographyText.objects.filter(run=run).count() == 4
