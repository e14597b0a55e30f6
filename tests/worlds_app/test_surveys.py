"""Survey metrics (docs/measurement.md, "Surveys"): one question of every agent at every
measured turn, each in its own view, the scripted model answering over real HTTP; one row per
agent and turn with its subject; a reply outside the answer schema is recorded as the error
``survey_answer`` with the reason; bad input is a 400 naming the field and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from cognition_app.models import SourceInvocation
from scenarios_app.models import Metric
from scenarios_app.services import metric_put, response_source_put, scenario_assemble
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import ScriptedLLM
from tests.surfaces.pages.test_experiment_pages import design, run_experiment
from tests.worlds_app.test_measurements import buyers_world, rule_tool_scenario
from worlds_app.experiment_results import experiment_results, export_rows
from worlds_app.models import Measurement
from worlds_app.services.experiments import experiment_create
from worlds_app.services.measurements import world_measure

pytestmark = pytest.mark.django_db


def _survey(source: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "label": "mood",
        "kind": "survey",
        "aggregate": "mean",
        "source": source,
        "question": "How happy are you?",
        "answer": {"likert": 5},
        **extra,
    }


def _answer(value: Any) -> str:
    return json.dumps({"answer": value})


def test_a_survey_records_one_row_per_agent_and_turn(
    operator_client: APIClient, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = buyers_world("buyers", 2)
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    put = operator_client.post("/api/metrics/", {"content": _survey(source)}, format="json")
    assert put.status_code in (200, 201), put.json()
    metric = put.json()["hash"]
    # 2 agents by turns 0, 1, 2; turn 1's second agent answers off the scale
    scripted_llm.script(_answer(3), _answer(4), _answer(5), _answer(9), _answer(2), _answer("two"))
    assert world_measure(world_id=world.pk, metric_hashes=[metric])["written"] == 6
    rows = list(
        Measurement.objects.filter(metric_id=metric)
        .order_by("turn_number", "subject")
        .values_list("turn_number", "subject", "value", "error_code", "error_message")
    )
    assert len(rows) == 6
    subjects = sorted({r[1] for r in rows})
    assert len(subjects) == 2 and "" not in subjects
    assert [(r[0], r[2], r[3]) for r in rows] == [
        (0, 3.0, ""),
        (0, 4.0, ""),
        (1, 5.0, ""),
        (1, None, "survey_answer"),
        (2, 2.0, ""),
        (2, None, "survey_answer"),
    ]
    assert "outside the likert scale 1…5" in rows[3][4]
    assert "not a number" in rows[5][4]
    # each agent asked in its own view, traced as an interview call of the metric
    for request, subject in zip(scripted_llm.requests[:2], subjects, strict=True):
        system = request["messages"][0]["content"]
        assert subject in system.split("Where you are")[0]
        assert "How happy are you?" in request["messages"][1]["content"]
    calls = SourceInvocation.objects.filter(world=world, node_id="metric:mood")
    assert calls.count() == 6 and set(calls.values_list("kind", flat=True)) == {"interview"}
    # measuring again asks nobody
    assert world_measure(world_id=world.pk, metric_hashes=[metric])["written"] == 0
    assert len(scripted_llm.requests) == 6


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"answer": {"likert": 1}}, "content.answer.likert"),
        ({"answer": {"choice": ["yes"]}}, "content.answer.choice"),
        ({"answer": {"choice": ["yes", ""]}}, "content.answer.choice[1]"),
        ({"answer": {"number": {"min": 5, "max": 1}}}, "content.answer.number"),
        ({"answer": {"scale": 3}}, "content.answer.scale"),
        ({"question": ""}, "content.question"),
        ({"subjects": ["ok", "not an id!"]}, "content.subjects[1]"),
        ({"aggregate": "last"}, "content.aggregate"),
    ],
)
def test_bad_survey_input_names_the_field_and_writes_nothing(
    operator_client: APIClient, toy_sources: str, extra: dict[str, Any], field: str
) -> None:
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    before = Metric.objects.count()
    answer = operator_client.post(
        "/api/metrics/", {"content": _survey(source, **extra)}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["details"]["field"] == field, answer.json()
    assert Metric.objects.count() == before


def test_an_experiments_survey_pools_its_agents_and_exports_their_subjects(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    scenario = scenario_assemble(data=rule_tool_scenario({"item": "candy_bar"}))["scenario_hash"]
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    metric = metric_put(content=_survey(source))["hash"]
    experiment_create(data=design("moods", scenario, [metric], turns=1), created_by="t")
    # 6 worlds by turns 0 and 1 by 2 agents: 24 answers
    scripted_llm.script(*(_answer(1 + i % 5) for i in range(24)))
    run_experiment("moods", [metric])
    _, rows = export_rows(slug="moods")
    exported = list(rows)
    assert len(exported) == 24 and all(r["subject"] in ("ann", "ben") for r in exported)
    (result,) = experiment_results(slug="moods").results
    for arm in result.arms:
        worlds = {r["world"]: [] for r in exported if r["arm"] == arm.arm and r["turn"] == 1}
        for r in exported:
            if r["arm"] == arm.arm and r["turn"] == 1:
                worlds[r["world"]].append(r["value"])
        means = [sum(v) / len(v) for v in worlds.values()]  # the mean over both agents
        assert arm.n == 3 and len(means) == 3
        assert arm.mean == pytest.approx(sum(means) / 3)


def test_a_surveys_rows_show_their_subject_in_the_api_and_on_the_world_and_turn_pages(
    operator_client: APIClient,
    reader_client: APIClient,
    reader_user: Any,
    scripted_llm: ScriptedLLM,
    toy_sources: str,
) -> None:
    from django.test import Client

    world = buyers_world("buyers", 1)
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    metric = operator_client.post("/api/metrics/", {"content": _survey(source)}, format="json")
    scripted_llm.script(_answer(3), _answer(4), _answer(5), _answer(1))
    assert world_measure(world_id=world.pk, metric_hashes=[metric.json()["hash"]])["written"] == 4
    stored = list(
        Measurement.objects.order_by("turn_number", "subject").values_list(
            "turn_number", "subject", "value"
        )
    )
    listed = reader_client.get("/api/worlds/buyers/measurements/?metric=mood").json()
    assert [(r["turn"], r["subject"], r["value"]) for r in listed["results"]] == stored
    agents = sorted({s for _, s, _ in stored})
    assert len(agents) == 2 and "" not in agents
    client = Client()
    client.force_login(reader_user)
    turn_page = client.get("/worlds/buyers/turns/1/").content.decode()
    for agent in agents:
        assert f'<td data-key="subject"><code>{agent}</code></td>' in turn_page
    world_page = client.get("/worlds/buyers/").content.decode()
    for turn, agent, value in stored:
        assert f"turn {turn} · {agent}: {int(value)}" in world_page
