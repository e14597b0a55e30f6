"""Interactive first (docs/operations.md, "Interactive first"): on real workers, an interactive
turn queued while judges hold a model limited to one call at a time (the deployment's endpoint
bound, ``CHUKWA_LLM_MAX_CONCURRENCY=1``) is served next, not after the judges' queued calls; while
it waits, its attempt says what it waits for and who holds the slot, and the attempt page and
the world page's live card show it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from scenarios_app.services import metric_put, response_source_put
from tests.cognition_app.test_cluster_limits import API_KEY, OK
from tests.cognition_app.test_cluster_limits import _scenario as llm_scenario
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, unread_queue, worker_process
from tests.worlds_app.test_measurements import buyers_world, judge
from worlds_app.models import AttemptStatus, Measurement, TurnAttempt
from worlds_app.services import turn_attempt_enqueue, world_create
from worlds_app.services.dispatch import send_measure


def _is_judge(request: dict[str, Any]) -> bool:
    return (request.get("response_format") or {}).get("json_schema", {}).get("name") == (
        "judge_score"
    )


def _answer(request: dict[str, Any]) -> Reply:
    if _is_judge(request):
        return Reply(text=json.dumps({"score": 3, "rationale": "fine"}), delay_s=0.5)
    return Reply(text=OK)


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_an_interactive_turn_is_served_before_the_judges_queued_calls(
    toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    judged = [f"judged-{i}" for i in range(3)]
    with unread_queue(f"unread-{uuid.uuid4().hex}"):
        worlds = [buyers_world(slug, 3) for slug in judged]  # 4 turns each to judge
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    metric = metric_put(content=judge(source))["hash"]
    world_create(data={"slug": "asking", "scenario_ref": {"hash": llm_scenario(None)}})
    scripted_llm.route(_answer)
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": scripted_llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
        "CHUKWA_LLM_MAX_CONCURRENCY": "1",  # the model serves one call at a time
    }
    judges, turns = f"judges-{uuid.uuid4().hex[:6]}", f"turns-{uuid.uuid4().hex[:6]}"
    with (
        worker_process(judges, env=env, queue=judges, pool="prefork", concurrency=3),
        worker_process(turns, env=env, queue=turns),
    ):
        with routed_to(judges):
            for world in worlds:  # three judges at once, each asking turn after turn
                send_measure(world.pk, [metric])
        deadline = time.monotonic() + 60
        while sum(map(_is_judge, scripted_llm.requests)) < 2:
            assert time.monotonic() < deadline, "the judges never started"
            time.sleep(0.05)
        with routed_to(turns):
            (attempt_id,) = turn_attempt_enqueue(slug="asking", count=1)["attempt_ids"]
        attempt = TurnAttempt.objects.filter(pk=attempt_id)
        said, judges_then = "", 0
        deadline = time.monotonic() + 60
        while attempt.filter(status=AttemptStatus.COMMITTED).count() == 0:
            assert time.monotonic() < deadline, "the interactive turn did not commit"
            waiting = attempt.values_list("waiting_for", flat=True).first() or ""
            if waiting and not said:
                said, judges_then = waiting, len(scripted_llm.requests)
            time.sleep(0.02)
        deadline = time.monotonic() + 90
        while Measurement.objects.filter(metric_id=metric).count() < 12:
            assert time.monotonic() < deadline, "the judges did not finish"
            time.sleep(0.2)
    requests = scripted_llm.requests
    served_at = next(i for i, r in enumerate(requests) if not _is_judge(r))
    # it waited for the model's one slot, held by a judge, and said so as it waited
    assert "endpoint" in said and "judge plausible" in said, said
    # once it waited, no judge's call was sent before it: it was served next
    assert judges_then and served_at <= judges_then, (served_at, judges_then)
    # and the judges were served after it, every turn judged once
    assert sum(map(_is_judge, requests[served_at:])) >= 1
    assert sum(map(_is_judge, requests)) == 12
    assert attempt.values_list("waiting_for", flat=True).get() == ""


@pytest.mark.django_db
def test_the_attempt_page_and_the_live_card_say_what_a_call_waits_for(
    client: Client, operator_user: User, toy_sources: str
) -> None:
    with unread_queue(f"unread-{uuid.uuid4().hex}"):
        world_create(data={"slug": "waits", "scenario_ref": {"hash": llm_scenario(None)}})
        (attempt_id,) = turn_attempt_enqueue(slug="waits", count=1)["attempt_ids"]
    words = "the endpoint's 1 slot(s): held by experiment world e--a--1's judge plausible, turn 2"
    TurnAttempt.objects.filter(pk=attempt_id).update(
        status=AttemptStatus.RUNNING, waiting_for=words
    )
    client.force_login(operator_user)
    escaped = words.replace("'", "&#x27;")
    page = client.get(f"/attempts/{attempt_id}/")
    assert page.status_code == 200 and escaped in page.content.decode()
    card = client.get("/worlds/waits/")
    assert card.status_code == 200 and f"waiting for {escaped}" in card.content.decode()
    detail = client.get(f"/api/attempts/{attempt_id}/")
    assert detail.json()["waiting_for"] == words
    listed = client.get("/api/attempts/?world=waits").json()["results"]
    assert [row["waiting_for"] for row in listed] == [words]
    # a finished attempt waits for nothing, whatever its row last said
    TurnAttempt.objects.filter(pk=attempt_id).update(status=AttemptStatus.INTERRUPTED)
    assert client.get(f"/api/attempts/{attempt_id}/").json()["waiting_for"] == ""
