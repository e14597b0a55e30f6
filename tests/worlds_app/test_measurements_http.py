"""Measuring as a client does: metrics put and measurements asked for over real HTTP against the
live server, measured by a real Celery worker on the measure queue."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cognition_app.models import ModelPrice
from tests.conftest import LLM_SOURCE
from tests.support.fixtures import TEST_API_KEY
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worker import routed_to, unread_queue, worker_process
from tests.worlds_app.test_measurements import DRANK, TOOL_CALLS, buyers_world, expression, judge
from worlds_app.models import Measurement

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _client(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    )


def _measured(http: httpx.Client, slug: str, label: str, count: int) -> list[dict[str, Any]]:
    """The world's measurements of a metric once there are ``count`` (60 s at the most)."""
    deadline = time.monotonic() + 60
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = http.get(f"/api/worlds/{slug}/measurements/?metric={label}").json()["results"]
        if len(rows) >= count:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"{label}: {len(rows)} of {count} measurements after 60 s")


def test_a_worker_measures_every_turn_and_measuring_again_writes_nothing(
    live_server: Any, operator_user: User, celery_worker: str, toy_sources: str
) -> None:
    # The turns run in this process (the toy vending machine is this process's); their kicks go
    # to a queue no worker reads.
    with unread_queue(f"unread-{uuid.uuid4().hex}"):
        buyers_world("buyers", 3)
    with _client(live_server, operator_user) as http:
        puts = {
            label: http.post("/api/metrics/", json={"content": expression(label, text, agg)})
            for label, text, agg in (
                ("bought", DRANK, "any"),
                ("tool_calls", TOOL_CALLS, "sum"),
                ("ann_state", "entities.ann.state", "last"),
                ("nobody", "entities.nobody.state", "last"),
            )
        }
        assert {p.status_code for p in puts.values()} == {201}
        hashes = {label: answer.json()["hash"] for label, answer in puts.items()}
        refs = [
            {"hash": hashes["bought"]},
            {"label": "tool_calls"},
            {"label": "ann_state"},
            {"label": "nobody"},
        ]
        asked = http.post("/api/worlds/buyers/measurements/", json={"metrics": refs})
        assert asked.status_code == 202, asked.text
        body = asked.json()
        assert (body["first_turn"], body["current_turn"]) == (0, 3)
        assert [m["label"] for m in body["metrics"]] == [
            "bought",
            "tool_calls",
            "ann_state",
            "nobody",
        ]

        bought = _measured(http, "buyers", "bought", 4)
        assert [(m["turn"], m["value"]) for m in bought] == [(0, 0.0), (1, 1.0), (2, 0.0), (3, 0.0)]
        calls = _measured(http, "buyers", "tool_calls", 4)
        assert [m["value"] for m in calls] == [0.0, 2.0, 0.0, 0.0]
        state = _measured(http, "buyers", "ann_state", 4)
        assert {m["error"]["code"] for m in state} == {"metric_type"}
        assert {m["value"] for m in state} == {None}
        nobody = _measured(http, "buyers", "nobody", 4)
        assert {m["error"]["code"] for m in nobody} == {"metric_null"}
        world = http.get("/api/worlds/buyers/").json()
        assert [m["label"] for m in world["measured_metrics"]] == [
            "ann_state",
            "bought",
            "nobody",
            "tool_calls",
        ]

        rows = list(Measurement.objects.order_by("pk").values_list("pk", "measured_at", "value"))
        again = http.post("/api/worlds/buyers/measurements/", json={"metrics": refs})
        assert again.status_code == 202
        # A later request's rows appearing means the worker has taken the requests before it.
        later = http.post("/api/metrics/", json={"content": expression("hungry", "tokens")})
        http.post(
            "/api/worlds/buyers/measurements/", json={"metrics": [{"hash": later.json()["hash"]}]}
        )
        assert len(_measured(http, "buyers", "hungry", 4)) == 4
        after = list(Measurement.objects.order_by("pk").values_list("pk", "measured_at", "value"))
        assert after[: len(rows)] == rows and len(after) == len(rows) + 4


def test_a_worker_asks_the_judge_for_every_turn_traced_and_priced(
    live_server: Any, operator_user: User, toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    """A judge metric put and measured over real HTTP; a worker of its own (which sees the
    scripted model) asks the judge once per turn; the scores link to priced judge calls."""
    with unread_queue(f"unread-{uuid.uuid4().hex}"):
        buyers_world("judged", 2)
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="gpt-4o-mini",
        input_per_million=Decimal("0.15"),
        output_per_million=Decimal("0.60"),
        cached_input_per_million=Decimal("0.075"),
        valid_from=timezone.now() - timedelta(days=1),
    )
    scripted_llm.script(
        *(json.dumps({"score": score, "rationale": f"turn scored {score}"}) for score in (5, 3, 1))
    )
    queue = f"judge-{uuid.uuid4().hex[:8]}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": scripted_llm.base_url,
        "CHUKWA_LLM_API_KEY": TEST_API_KEY,
    }
    with (
        worker_process(queue, env=env, queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        source = http.post("/api/response-sources/", json={"content": LLM_SOURCE})
        assert source.status_code in (200, 201), source.text
        metric = http.post(
            "/api/metrics/", json={"content": judge({"hash": source.json()["hash"]})}
        )
        assert metric.status_code == 201, metric.text
        asked = http.post(
            "/api/worlds/judged/measurements/", json={"metrics": [{"label": "plausible"}]}
        )
        assert asked.status_code == 202, asked.text
        rows = _measured(http, "judged", "plausible", 3)
        assert [(m["turn"], m["value"], m["error"]) for m in rows] == [
            (0, 5.0, None),
            (1, 3.0, None),
            (2, 1.0, None),
        ]
        for row in rows:
            call = http.get(f"/api/llm-calls/{row['llm_call_id']}/").json()
            assert call["status"] == "succeeded" and float(call["cost"]) > 0, call
        judged = http.get("/api/source-invocations/?kind=judge").json()["results"]
        assert sorted(r["attempted_turn"] for r in judged) == [0, 1, 2]
    assert len(scripted_llm.requests) == 3


def test_a_worker_records_a_surveys_row_per_agent_and_turn(
    live_server: Any, operator_user: User, toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    """A survey put and measured over real HTTP; a worker of its own (which sees the scripted
    model) asks each agent at each turn: a row per agent, an answer off the scale an error."""
    with unread_queue(f"unread-{uuid.uuid4().hex}"):
        buyers_world("buyers", 1)
    queue = f"survey-{uuid.uuid4().hex[:8]}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": scripted_llm.base_url,
        "CHUKWA_LLM_API_KEY": TEST_API_KEY,
    }
    with (
        worker_process(queue, env=env, queue=queue),
        routed_to(queue),
        _client(live_server, operator_user) as http,
    ):
        source = http.post("/api/response-sources/", json={"content": LLM_SOURCE}).json()["hash"]
        survey = {
            "version": 1,
            "label": "mood",
            "kind": "survey",
            "aggregate": "mean",
            "source": {"hash": source},
            "question": "How happy are you?",
            "answer": {"likert": 5},
        }
        put = http.post("/api/metrics/", json={"content": survey})
        assert put.status_code == 201, put.text
        scripted_llm.script(*(json.dumps({"answer": n}) for n in (2, 3, 4, 6)))
        asked = http.post("/api/worlds/buyers/measurements/", json={"metrics": [{"label": "mood"}]})
        assert asked.status_code == 202, asked.text
        rows = _measured(http, "buyers", "mood", 4)  # 2 agents by turns 0 and 1
    assert len(rows) == 4
    stored = list(
        Measurement.objects.filter(metric_id=put.json()["hash"])
        .order_by("turn_number", "subject")
        .values_list("turn_number", "value", "error_code")
    )
    assert stored == [(0, 2.0, ""), (0, 3.0, ""), (1, 4.0, ""), (1, None, "survey_answer")]
    assert Measurement.objects.exclude(subject="").count() == 4
