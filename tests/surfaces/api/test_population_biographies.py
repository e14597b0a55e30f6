"""Biographies written by an LLM source (docs/populations.md, "Biographies written by a model")
against the scripted model over real HTTP: the request is checked whole (bad input is a 400
naming the field, nothing queued, no call), then accepted (202) as a run that a worker carries
out (here run in-process, as the worker's task does; tests/worlds_app/test_biography_runs.py
runs it on real workers): one request per drawn agent, each a traced call of kind
``biography`` outside any world; the texts go into a new version of the population whose hash
is stable on re-read and whose agents assembly renders with them; a source failure fails the
run with a clear error, storing no version."""

from __future__ import annotations

import copy
import os
import re
from typing import Any
from uuid import UUID

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from cognition_app.models import InvocationKind, LlmCall, SourceInvocation
from scenarios_app.models import Entity, Population
from scenarios_app.services import response_source_put
from surfaces.mcp.calls import Caller, call
from surfaces.mcp.catalog import api_tools
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import unread_queue
from tests.support.worlds import fixture_body
from worlds_app.models import BiographyRun
from worlds_app.services import biography_runs
from worlds_app.services.biography_runs import biography_run_execute

pytestmark = pytest.mark.django_db
FIXTURE = "park_visitors_rules"
PROMPT = "Write the life of visitor {{index}}, aged {{axes.age}}, who is {{axes.thirst}}."
TEMPLATE = {
    "id": "visitor_{{index}}",
    "name": "Visitor {{index}}",
    "state": "on the path, {{axes.thirst}}, aged {{axes.age}}.",
    "goal": "enjoy the afternoon",
    "memory": "{{biography}}",
}


# the chat source, declaring that its provider takes 4 requests at once
LIMITED_SOURCE = {
    **LLM_SOURCE,
    "label": "chat_four",
    "interface": {**LLM_SOURCE["interface"], "limits": {"concurrency": 4}},
}


def _population(size: int = 6) -> dict[str, Any]:
    content = copy.deepcopy(fixture_body(FIXTURE)["populations"][0]["ref"]["inline"])
    return {**content, "size": size}


def _biography(body: dict[str, Any]) -> str:
    """The scripted model's answer: the prompt's own words, so each agent's text is its own."""
    asked = body["messages"][-1]["content"]
    found = re.search(r"visitor (\d+), aged (\d+)", asked)
    assert found is not None, asked
    return f"Born {found.group(2)} years ago, visitor {found.group(1)} likes parks."


def _put(client: APIClient, content: dict[str, Any]) -> str:
    made = client.post("/api/populations/", {"content": content}, format="json")
    assert made.status_code in (200, 201), made.json()
    return str(made.json()["hash"])


def _ran(client: APIClient, hash: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST the request (202: queued, nothing asked yet), run it here as a worker would
    (``biography_run_execute``), and read the run as the API shows it."""
    accepted = client.post(f"/api/populations/{hash}/biographies/", body, format="json")
    assert accepted.status_code == 202, accepted.json()
    queued = accepted.json()
    assert (queued["status"], queued["done"], queued["result"]) == ("queued", 0, None)
    assert accepted["Location"] == queued["url"] == f"/api/biography-runs/{queued['id']}/"
    assert biography_run_execute(run_id=queued["id"], owner="test") in ("completed", "failed")
    read = client.get(queued["url"])
    assert read.status_code == 200, read.json()
    return dict(read.json())


def test_one_traced_call_per_agent_makes_a_stable_version_assembly_uses(
    operator_client: APIClient, operator_user: User, scripted_llm: ScriptedLLM
) -> None:
    source = response_source_put(content=LLM_SOURCE)["hash"]
    h = _put(operator_client, _population())
    scripted_llm.route(_biography)
    run = _ran(
        operator_client,
        h,
        {"source": {"label": "chat"}, "prompt": PROMPT, "entity_template": TEMPLATE},
    )
    assert (run["status"], run["done"], run["agents"], run["error"]) == ("completed", 6, 6, None)
    made = run["result"]
    assert (made["derived_from"], made["agents"], made["source"]) == (h, 6, {"hash": source})
    assert made["hash"] != h

    # one request per agent, each asking the prompt rendered from that agent's values
    agents = operator_client.get(f"/api/populations/{h}/coverage/").json()["agents"]
    requests = scripted_llm.requests
    assert len(requests) == 6
    assert [r["messages"][-1]["content"] for r in requests] == [
        PROMPT.replace("{{index}}", str(a["index"]))
        .replace("{{axes.age}}", str(a["values"]["age"]))
        .replace("{{axes.thirst}}", a["values"]["thirst"])
        for a in agents
    ]
    # each call traced: kind biography, no world, the agent as its subject, in the answer's order
    calls = {str(c.pk): c for c in LlmCall.objects.select_related("invocation")}
    assert sorted(calls) == sorted(made["llm_calls"])
    traced = [calls[i] for i in made["llm_calls"]]
    assert [c.invocation.kind for c in traced] == [InvocationKind.BIOGRAPHY] * 6
    assert {c.invocation.world_id for c in traced} == {None}
    assert [c.invocation.subject_id for c in traced] == [f"visitor_{i}" for i in range(1, 7)]
    assert SourceInvocation.objects.count() == 6
    texts = [_biography(r) for r in requests]
    assert [c.raw_text for c in traced] == texts

    # the new version holds them; its hash is stable on re-read and on putting it again
    read = operator_client.get(f"/api/populations/{made['hash']}/").json()
    assert read["content"]["biographies"] == {
        "source": {"hash": source},
        "prompt": PROMPT,
        "texts": texts,
    }
    assert read["content"]["entity_template"] == TEMPLATE
    again = operator_client.post("/api/populations/", {"content": read["content"]}, format="json")
    assert again.status_code == 200 and again.json()["hash"] == made["hash"]
    coverage = operator_client.get(f"/api/populations/{made['hash']}/coverage/").json()
    assert [a["memory"] for a in coverage["agents"]] == texts

    # assembly renders {{biography}} from the stored texts, with no call
    body = fixture_body(FIXTURE)
    body["populations"][0]["ref"] = {"hash": made["hash"]}
    scenario = operator_client.post("/api/scenarios/assemble/", body, format="json")
    assert scenario.status_code == 201, scenario.json()
    entities = scenario.json()["entities"]
    rows = dict(Entity.objects.filter(pk__in=entities).values_list("pk", "content"))
    memories = [rows[e]["kind"]["agent"]["memory"] for e in entities[1:]]
    assert memories == texts
    body = fixture_body(FIXTURE)
    body["populations"][0]["ref"] = {"hash": made["hash"]}
    remade = operator_client.post("/api/scenarios/assemble/", body, format="json").json()
    assert remade["scenario_hash"] == scenario.json()["scenario_hash"]
    assert len(scripted_llm.requests) == 6

    # the calls' pages render without a world
    browser = Client()
    browser.force_login(operator_user)
    call = made["llm_calls"][0]
    assert browser.get(f"/llm-calls/{call}/").status_code == 200
    assert browser.get(f"/invocations/{traced[0].invocation_id}/").status_code == 200
    assert b"a population's biography (no world)" in browser.get("/llm-calls/").content
    assert b"a population's biography (no world)" in browser.get("/invocations/").content
    shown = browser.get(f"/store/populations/{made['hash']}/").content.decode()
    assert 'id="biographies">6, written by' in shown and source[:12] in shown


def test_a_source_failure_stores_nothing_and_names_the_agent(
    operator_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population())
    populations = Population.objects.count()
    replies = iter(["One life.", "Two lives.", Reply(status=400)])
    scripted_llm.route(lambda body: next(replies))
    run = _ran(operator_client, h, {"source": {"label": "chat"}, "prompt": PROMPT})
    assert (run["status"], run["result"], run["done"]) == ("failed", None, 2)
    error = run["error"]
    assert error["code"] == "biography_failed"
    assert (error["details"]["field"], error["details"]["agent"]) == ("source", 3)
    assert "nothing was stored" in error["message"]
    assert Population.objects.count() == populations
    assert len(scripted_llm.requests) == 3


def test_an_empty_biography_stores_nothing(
    operator_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population(size=2))
    scripted_llm.script("A life.", "   ")
    run = _ran(operator_client, h, {"source": {"label": "chat"}, "prompt": PROMPT})
    assert run["status"] == "failed" and run["error"]["details"]["agent"] == 2
    assert "biography is empty" in run["error"]["message"]
    assert Population.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"prompt": "Life of {{axes.mood}}"}, "invalid_biographies", "prompt"),
        ({"prompt": ""}, "invalid_biographies", "prompt"),
        ({"source": {"label": "nobody"}}, "invalid_biographies", "source.label"),
        ({"source": {"hash": "0" * 64}}, "invalid_biographies", "source.hash"),
        ({"source": {"hash": "0" * 64, "label": "chat"}}, "invalid_biographies", "source"),
        (
            {"entity_template": {**TEMPLATE, "goal": "{{axes.mood}}"}},
            "invalid_population",
            "entity_template.goal",
        ),
        ({"stuff": 1}, "invalid_input", "stuff"),
    ],
)
def test_bad_input_names_the_field_before_any_call(
    operator_client: APIClient,
    scripted_llm: ScriptedLLM,
    change: dict[str, Any],
    code: str,
    field: str,
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population())
    body = {"source": {"label": "chat"}, "prompt": PROMPT, **change}
    answer = operator_client.post(f"/api/populations/{h}/biographies/", body, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert scripted_llm.requests == [] and Population.objects.count() == 1
    assert not BiographyRun.objects.exists()  # nothing queued


def test_readers_may_not_write_and_biography_needs_biographies(
    operator_client: APIClient, reader_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population())
    refused = reader_client.post(
        f"/api/populations/{h}/biographies/",
        {"source": {"label": "chat"}, "prompt": PROMPT},
        format="json",
    )
    assert refused.status_code == 403 and scripted_llm.requests == []
    assert not BiographyRun.objects.exists()
    plain = operator_client.post(
        "/api/populations/",
        {"content": {**_population(), "entity_template": TEMPLATE}},
        format="json",
    )
    assert plain.status_code == 400
    error = plain.json()["error"]
    assert (error["code"], error["details"]["field"]) == (
        "biography_unsupported",
        "content.entity_template.memory",
    )
    miscounted = {
        **_population(),
        "entity_template": TEMPLATE,
        "biographies": {"source": {"hash": "a" * 64}, "prompt": PROMPT, "texts": ["one"]},
    }
    wrong = operator_client.post("/api/populations/", {"content": miscounted}, format="json")
    assert wrong.json()["error"]["details"]["field"] == "content.biographies.texts"
    assert Population.objects.count() == 1


def test_the_mcp_tool_writes_them_as_the_api_does(
    operator_client: APIClient, operator_user: User, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population(size=3))
    scripted_llm.route(_biography)
    tool = api_tools()["populations_biographies"]
    assert not tool.reads_only
    answer = call(
        tool,
        {"hash": h, "source": {"label": "chat"}, "prompt": PROMPT, "entity_template": TEMPLATE},
        Caller(user=operator_user, token=None),
    )
    assert answer.status == 202, answer.body
    assert (answer.body["status"], answer.body["agents"]) == ("queued", 3)
    biography_run_execute(run_id=answer.body["id"], owner="test")
    read = call(
        api_tools()["biography_run_read"],
        {"id": answer.body["id"]},
        Caller(user=operator_user, token=None),
    )
    assert read.status == 200 and read.body["status"] == "completed", read.body
    assert read.body["done"] == 3 and len(scripted_llm.requests) == 3
    stored = operator_client.get(f"/api/populations/{read.body['result']['hash']}/").json()
    assert stored["content"]["biographies"]["texts"] == [
        _biography(r) for r in scripted_llm.requests
    ]


def test_the_requests_budget_refuses_a_call_that_could_pass_it(
    operator_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    """The source's max_tokens is 800: a call could spend its prompt and 800 more, so a budget
    of 500 tokens refuses the first call (nothing sent, nothing stored), and a large one lets
    every call through, counting their real spend."""
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population(size=3))
    scripted_llm.route(_biography)
    body = {"source": {"label": "chat"}, "prompt": PROMPT}
    tight = _ran(operator_client, h, {**body, "budget": {"max_tokens_total": 500}})
    assert tight["status"] == "failed"
    assert BiographyRun.objects.get(pk=tight["id"]).error_status == 409
    error = tight["error"]
    assert (error["code"], error["details"]["field"], error["details"]["agent"]) == (
        "budget_exhausted",
        "budget",
        1,
    )
    assert "max_tokens_total of this biographies request" in error["message"]
    assert scripted_llm.requests == [] and Population.objects.count() == 1
    # the refused call is traced as refused, as any budget refusal is
    refused = list(SourceInvocation.objects.values_list("status", "failure_class", "subject_id"))
    assert refused == [("failed", "budget_exhausted", "visitor_1")]

    roomy = _ran(operator_client, h, {**body, "budget": {"max_tokens_total": 100_000}})
    assert roomy["status"] == "completed", roomy
    assert len(scripted_llm.requests) == 3
    bad = operator_client.post(
        f"/api/populations/{h}/biographies/", {**body, "budget": {}}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "budget"
    cost = operator_client.post(
        f"/api/populations/{h}/biographies/",
        {**body, "budget": {"max_cost_total": -1}},
        format="json",
    )
    assert cost.status_code == 400
    assert cost.json()["error"]["details"]["field"] == "budget.max_cost_total"


def test_the_biographies_page_writes_them_and_names_a_bad_field(
    operator_client: APIClient,
    operator_user: User,
    reader_user: User,
    scripted_llm: ScriptedLLM,
) -> None:
    source = response_source_put(content=LLM_SOURCE)["hash"]
    h = _put(operator_client, _population(size=4))
    url = f"/populations/{h}/biographies/"
    reader = Client()
    reader.force_login(reader_user)
    assert reader.get(url).status_code == 403
    browser = Client()
    browser.force_login(operator_user)
    shown = browser.get(url).content.decode()
    assert f'<option value="{source}"' in shown and "{{axes.age}}" in shown
    fields = {
        "source": source,
        "prompt": PROMPT,
        **{f"tpl-{k}": v for k, v in TEMPLATE.items()},
        "max_tokens_total": "",
    }
    bad = browser.post(url, {**fields, "prompt": "{{axes.mood}}"})
    assert bad.status_code == 400
    assert 'id="pf-prompt-error" class="inline-error field-error" role="alert">' in (
        bad.content.decode()
    )
    assert scripted_llm.requests == [] and Population.objects.count() == 1
    scripted_llm.route(_biography)
    done = browser.post(url, fields)
    assert done.status_code == 302, done.content.decode()[:2000]
    run = BiographyRun.objects.get()
    assert done["Location"] == f"/biography-runs/{run.pk}/"
    waiting = browser.get(done["Location"]).content.decode()
    assert 'id="run-status">queued<' in waiting and 'hx-trigger="every 1s"' in waiting
    assert '<span id="run-done">0</span><span class="of">/4</span>' in waiting
    biography_run_execute(run_id=run.pk, owner="test")
    made = Population.objects.exclude(pk=h).get()
    assert made.content["biographies"]["texts"] == [_biography(r) for r in scripted_llm.requests]
    assert len(scripted_llm.requests) == 4
    shown = browser.get(done["Location"]).content.decode()
    assert 'id="run-status">completed<' in shown and "hx-trigger" not in shown
    assert f'href="/store/populations/{made.pk}/"' in shown
    assert reader.get(done["Location"]).status_code == 200  # readers may follow it
    # the population's page lists its runs, so a run left alone is found again
    listed = browser.get(f"/store/populations/{h}/").content.decode()
    assert f'<a href="/biography-runs/{run.pk}/">run {run.pk}</a>' in listed
    assert browser.get("/biography-runs/999999/").status_code == 404


def test_the_admin_lists_and_shows_a_population_with_biographies(
    operator_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population(size=2))
    scripted_llm.route(_biography)
    body = {"source": {"label": "chat"}, "prompt": PROMPT, "entity_template": TEMPLATE}
    made = _ran(operator_client, h, body)["result"]["hash"]
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="a-long-password-1"))
    listed = admin.get("/admin/scenarios_app/population/")
    assert listed.status_code == 200 and made[:12] in listed.content.decode()
    shown = admin.get(f"/admin/scenarios_app/population/{made}/change/")
    assert shown.status_code == 200
    assert _biography(scripted_llm.requests[0]) in shown.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_source_with_a_concurrency_limit_is_asked_that_many_at_once_in_order(
    operator_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LIMITED_SOURCE)
    h = _put(operator_client, _population(size=10))
    scripted_llm.route(lambda body: Reply(text=_biography(body), delay_s=0.3))
    with unread_queue(f"biographies-{os.getpid()}"):
        run = _ran(
            operator_client,
            h,
            {"source": {"label": "chat_four"}, "prompt": PROMPT, "entity_template": TEMPLATE},
        )
    made = run["result"]
    # four at once, never more (the source's limit holds)
    assert scripted_llm.max_in_flight == 4
    # each agent's text is its own, in the agents' order, whatever order they came back in
    texts = operator_client.get(f"/api/populations/{made['hash']}/").json()["content"]
    assert texts["biographies"]["texts"] == [
        f"Born {a['values']['age']} years ago, visitor {a['index']} likes parks."
        for a in operator_client.get(f"/api/populations/{h}/coverage/").json()["agents"]
    ]
    calls = LlmCall.objects.select_related("invocation").in_bulk(made["llm_calls"])
    assert [calls[UUID(c)].invocation.subject_id for c in made["llm_calls"]] == [
        f"visitor_{i}" for i in range(1, 11)
    ]


@pytest.mark.django_db(transaction=True)
def test_a_failure_among_concurrent_calls_stops_the_rest_and_stores_nothing(
    operator_client: APIClient, scripted_llm: ScriptedLLM
) -> None:
    response_source_put(content=LIMITED_SOURCE)
    h = _put(operator_client, _population(size=10))
    populations = Population.objects.count()

    def third_fails(body: dict[str, Any]) -> Reply:
        if "visitor 3," in body["messages"][-1]["content"]:
            return Reply(status=400, error_body={"error": {"message": "no"}})
        return Reply(text=_biography(body), delay_s=1.0)

    scripted_llm.route(third_fails)
    with unread_queue(f"biographies-{os.getpid()}"):
        run = _ran(
            operator_client,
            h,
            {"source": {"label": "chat_four"}, "prompt": PROMPT, "entity_template": TEMPLATE},
        )
    assert run["status"] == "failed"
    error = run["error"]
    assert (error["code"], error["details"]["agent"]) == ("biography_failed", 3)
    assert Population.objects.count() == populations  # nothing stored
    # the calls out when agent 3 failed were stopped, and no agent after them was asked
    statuses = dict(
        SourceInvocation.objects.values_list("subject_id", "status").order_by("subject_id")
    )
    assert statuses["visitor_3"] == "failed"
    assert {statuses[f"visitor_{i}"] for i in (1, 2, 4)} == {"cancelled"}
    assert len(statuses) == 4 and len(scripted_llm.requests) == 4


def test_a_run_whose_lease_was_taken_meanwhile_says_so_and_keeps_the_reapers_state(
    operator_client: APIClient, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    response_source_put(content=LLM_SOURCE)
    h = _put(operator_client, _population(size=2))
    scripted_llm.route(_biography)
    run_id = operator_client.post(
        f"/api/populations/{h}/biographies/",
        {"source": {"label": "chat"}, "prompt": PROMPT},
        format="json",
    ).json()["id"]
    store = biography_runs.biographies_store

    def reaped_meanwhile(*args: Any) -> dict[str, Any]:
        # the reaper queued it again while this try stored the version
        BiographyRun.objects.filter(pk=run_id).update(status="queued", lease_owner="")
        return store(*args)

    monkeypatch.setattr(biography_runs, "biographies_store", reaped_meanwhile)
    assert biography_run_execute(run_id=run_id, owner="test") == "lease_lost"
    assert BiographyRun.objects.get(pk=run_id).status == "queued"  # not marked completed
