"""Trying a metric before storing it (``POST /api/metrics/try/``) over real HTTP against the live
server: an expression's value and its error with nothing written, a judge's messages without
asking it (no model request) and its score when asked (one request, traced as a try), and bad
input refused with 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from cognition_app.models import InvocationKind, LlmCall, SourceInvocation
from scenarios_app.models import Metric, ResponseSource
from scenarios_app.services import response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import ScriptedLLM
from tests.worlds_app.test_measurements import DRANK, buyers_world, expression, judge
from worlds_app.models import Measurement

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _client(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=60
    )


def _rows() -> tuple[int, int, int, int]:
    return (
        Metric.objects.count(),
        Measurement.objects.count(),
        SourceInvocation.objects.count(),
        LlmCall.objects.count(),
    )


def test_trying_an_expression_answers_its_value_or_its_error_and_writes_nothing(
    live_server: Any, operator_user: User, toy_sources: str
) -> None:
    buyers_world("buyers", 2)
    before = _rows()
    with _client(live_server, operator_user) as http:
        tried = http.post(
            "/api/metrics/try/",
            json={"content": expression("bought", DRANK), "world": "buyers", "turn": 1},
        )
        assert tried.status_code == 200, tried.text
        body = tried.json()
        assert (body["value"], body["error"], body["asked"], body["messages"]) == (
            1.0,
            None,
            False,
            None,
        )
        assert body["metric"]["label"] == "bought" and len(body["metric"]["hash"]) == 64
        assert body["view"]["turn"] == 1 and body["view"]["calls"][0]["source"] == "buy_candy"

        on_turn_2 = http.post(
            "/api/metrics/try/",
            json={"content": expression("bought", DRANK), "world": "buyers", "turn": 2},
        ).json()
        assert on_turn_2["value"] == 0.0  # nobody pressed the button again

        wrong = http.post(
            "/api/metrics/try/",
            json={
                "content": expression("state", "entities.ann.state", "last"),
                "world": "buyers",
                "turn": 1,
            },
        )
        assert wrong.status_code == 200, wrong.text
        assert wrong.json()["value"] is None
        assert wrong.json()["error"]["code"] == "metric_type"
        assert "tried the machine" in wrong.json()["error"]["message"]
    assert _rows() == before


def test_bad_input_is_refused_naming_the_field_with_nothing_written(
    live_server: Any, operator_user: User, reader_user: User, toy_sources: str
) -> None:
    buyers_world("buyers", 1)
    before = _rows()
    good = expression("bought", DRANK)
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        (
            {"content": {**good, "expression": "calls[?"}, "world": "buyers", "turn": 1},
            400,
            "invalid_expression",
            "content.expression",
        ),
        (
            {"content": {**good, "aggregate": "median"}, "world": "buyers", "turn": 1},
            400,
            "invalid_aggregate",
            "content.aggregate",
        ),
        ({"content": good, "world": "Not A Slug", "turn": 1}, 400, "invalid_input", "world"),
        ({"content": good, "world": "buyers", "turn": -1}, 400, "invalid_turn", "turn"),
        ({"content": good, "world": "buyers", "turn": "1"}, 400, "invalid_turn", "turn"),
        ({"content": good, "world": "buyers"}, 400, "invalid_input", "turn"),
        (
            {"content": good, "world": "buyers", "turn": 1, "ask": "yes"},
            400,
            "invalid_input",
            "ask",
        ),
        ({"content": good, "world": "buyers", "turn": 9}, 404, "turn_not_found", "turn"),
        ({"content": good, "world": "nowhere", "turn": 1}, 404, "world_not_found", "world"),
    ]
    with _client(live_server, operator_user) as http:
        for body, status, code, field in cases:
            answer = http.post("/api/metrics/try/", json=body)
            assert answer.status_code == status, (body, answer.text)
            error = answer.json()["error"]
            assert error["code"] == code, (body, error)
            assert error["details"]["field"] == field, (body, error)
    with _client(live_server, reader_user) as http:
        refused = http.post(
            "/api/metrics/try/", json={"content": good, "world": "buyers", "turn": 1}
        )
        assert refused.status_code == 403
    assert _rows() == before


def test_a_judge_is_sent_nothing_until_asked_and_then_once_traced_as_a_try(
    live_server: Any, operator_user: User, toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    buyers_world("buyers", 1)
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    content = judge(source)
    before = _rows()
    with _client(live_server, operator_user) as http:
        shown = http.post(
            "/api/metrics/try/", json={"content": content, "world": "buyers", "turn": 1}
        )
        assert shown.status_code == 200, shown.text
        body = shown.json()
        assert (body["asked"], body["value"], body["error"], body["llm_call_id"]) == (
            False,
            None,
            None,
            None,
        )
        system, user = body["messages"]
        assert system == {"role": "system", "content": content["system"]}
        assert user["role"] == "user" and "Ann presses the button: dispensed." in user["content"]
        assert scripted_llm.requests == []
        assert _rows() == before

        scripted_llm.script(json.dumps({"score": 4, "rationale": "Vending machines do that."}))
        asked = http.post(
            "/api/metrics/try/",
            json={"content": content, "world": "buyers", "turn": 1, "ask": True},
        )
        assert asked.status_code == 200, asked.text
        body = asked.json()
        assert (body["asked"], body["value"], body["error"]) == (True, 4.0, None)
        assert body["rationale"] == "Vending machines do that."
    assert len(scripted_llm.requests) == 1
    sent = scripted_llm.requests[0]["messages"]
    assert "Ann presses the button: dispensed." in sent[1]["content"]
    call = SourceInvocation.objects.get(kind=InvocationKind.JUDGE)
    assert call.node_id == "try:plausible" and call.attempted_turn == 1
    assert str(call.llm_call.pk) == body["llm_call_id"]  # type: ignore[union-attr]
    # the judge's call is traced; no metric and no measurement is written
    assert (Metric.objects.count(), Measurement.objects.count()) == before[:2]
    # an inline source is stored only by a put: asking through one is refused, naming it
    with _client(live_server, operator_user) as http:
        inline = judge({"inline": {**LLM_SOURCE, "label": "other-chat"}})
        refused = http.post(
            "/api/metrics/try/",
            json={"content": inline, "world": "buyers", "turn": 1, "ask": True},
        )
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["field"] == "content.source"
    assert not ResponseSource.objects.filter(label="other-chat").exists()
    assert len(scripted_llm.requests) == 1
