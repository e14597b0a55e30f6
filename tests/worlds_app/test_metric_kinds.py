"""The registry of metric kinds (docs/measurement.md, "Metric kinds"): a kind registered in
``chukwa_core/metric_kinds.py`` alone is stored, measured and read like the built-in ones —
the store's put, the measure loop and the API have no branch per kind — and a kind nobody
registered is refused at put."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from chukwa_core.component_validation import check_keys
from chukwa_core.errors import invalid
from chukwa_core.metric_judge import LLM_JUDGE_KIND
from chukwa_core.metric_kind import METRIC_KIND_PATTERN, MetricCalls, MetricKind, ViewMeasure
from chukwa_core.metric_kinds import METRIC_KINDS
from chukwa_core.metric_values import Outcome
from chukwa_core.workflow_refs import RefLookup
from scenarios_app.models import Metric, ResponseSource
from scenarios_app.services import metric_put, response_source_put, scenario_assemble
from tests.cognition_app.test_rule_tools import _scenario as rule_tool_scenario
from tests.conftest import LLM_SOURCE
from tests.worlds_app.test_measurements import DRANK, buyers_world, expression, judge, values
from worlds_app.services.measurements import world_measure
from worlds_app.services.metric_evaluators import EVALUATORS, evaluator

pytestmark = pytest.mark.django_db


def _validate_entity_count(metric: dict[str, Any], field: str, lookup: RefLookup) -> None:
    check_keys(
        metric,
        field,
        required=("version", "label", "kind", "aggregate", "entity_kind"),
        code="invalid_metric",
    )
    if metric["entity_kind"] not in ("agent", "prop"):
        raise invalid("invalid_metric", f"{field}.entity_kind", "must be agent or prop")


def _count_entities(content: Mapping[str, Any]) -> ViewMeasure:
    wanted = content["entity_kind"]
    return lambda view: Outcome(
        value=float(sum(e["kind"] == wanted for e in view["entities"].values()))
    )


# A kind only this test knows: how many entities of a kind the turn view holds.
ENTITY_COUNT = MetricKind(
    validate=_validate_entity_count,
    summary="entities of one kind in the turn view",
    view_measure=_count_entities,
)


def entity_count(label: str, entity_kind: str) -> dict[str, Any]:
    return {
        "version": 1,
        "label": label,
        "kind": "entity_count",
        "aggregate": "max",
        "entity_kind": entity_kind,
    }


def test_a_registered_kind_is_stored_measured_and_read_without_touching_the_measure_loop(
    operator_client: APIClient,
    reader_client: APIClient,
    reader_user: User,
    toy_sources: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(METRIC_KINDS, "entity_count", ENTITY_COUNT)  # the one registration
    world = buyers_world("buyers", 2)
    put = [
        operator_client.post("/api/metrics/", {"content": content}, format="json")
        for content in (
            expression("bought", DRANK),
            entity_count("agents", "agent"),
            entity_count("props", "prop"),
        )
    ]
    assert [answer.status_code for answer in put] == [201, 201, 201], put[1].json()
    bought, agents, props = (answer.json()["hash"] for answer in put)
    assert Metric.objects.get(pk=agents).kind == "entity_count"
    # the built-in kind and the new one measured in one go, each with its own values
    written = world_measure(world_id=world.pk, metric_hashes=[bought, agents, props])
    assert written["written"] == 9  # turns 0, 1 and 2 of three metrics
    assert values("buyers", agents) == {0: 2.0, 1: 2.0, 2: 2.0}  # Ann and Ben
    assert values("buyers", props) == {0: 0.0, 1: 0.0, 2: 0.0}  # the machine is no entity
    assert values("buyers", bought) == {0: 0.0, 1: 1.0, 2: 0.0}
    listed = reader_client.get("/api/worlds/buyers/measurements/?metric=agents").json()
    assert [(m["turn"], m["metric"]["kind"], m["value"]) for m in listed["results"]] == [
        (0, "entity_count", 2.0),
        (1, "entity_count", 2.0),
        (2, "entity_count", 2.0),
    ]
    # its page shows its kind's summary and its own fields, with no template of its own
    browser = Client()
    browser.force_login(reader_user)
    page = browser.get(f"/store/metrics/{agents}/").content.decode()
    assert "entities of one kind in the turn view" in page
    assert "<dt>entity_kind</dt>" in page and "&quot;agent&quot;" in page
    # the new kind's own rules run at put: 400 naming its field
    bad = operator_client.post(
        "/api/metrics/", {"content": entity_count("rocks", "rock")}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["field"] == "content.entity_kind"


@pytest.mark.parametrize("kind", ["poll", "entity_count", "", None, ["llm_judge"]])
def test_an_unknown_kind_is_refused_at_put_naming_kind_and_nothing_is_stored(
    operator_client: APIClient, toy_sources: str, kind: Any
) -> None:
    # shaped like a judge with an inline source: a kind nobody registered stores no source
    content = {**judge({"inline": LLM_SOURCE}), "kind": kind}
    answer = operator_client.post("/api/metrics/", {"content": content}, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("invalid_metric_kind", "content.kind")
    assert "must be one of expression, llm_judge, survey" in error["message"]
    assert not Metric.objects.exists()
    assert not ResponseSource.objects.exists()


def test_every_registered_kind_has_exactly_one_evaluator_and_a_storable_name() -> None:
    for name, kind in METRIC_KINDS.items():
        assert evaluator(name) is not None
        assert (name in EVALUATORS) != (kind.view_measure is not None), name
        assert re.fullmatch(METRIC_KIND_PATTERN, name), name
    assert set(EVALUATORS) <= set(METRIC_KINDS)


def test_a_kind_with_no_way_to_measure_is_a_programming_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nothing = MetricKind(validate=_validate_entity_count, summary="")
    monkeypatch.setitem(METRIC_KINDS, "nothing", nothing)
    with pytest.raises(RuntimeError, match="'nothing' must have exactly one evaluator"):
        evaluator("nothing")


def test_the_estimate_prices_a_registered_kind_by_its_own_calls(
    operator_client: APIClient, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a kind that asks every agent (a survey, say): as a judge, but once per agent and turn
    def per_agent(content: Mapping[str, Any], agents: int) -> MetricCalls:
        return MetricCalls(
            source_hash=content["source"]["hash"],
            calls=agents * content["max_generation_attempts"],
            prompt_chars=len(content["system"]),
        )

    asks_everyone = dataclasses.replace(LLM_JUDGE_KIND, llm_calls=per_agent)
    monkeypatch.setitem(METRIC_KINDS, "asks_everyone", asks_everyone)
    scenario = scenario_assemble(data=rule_tool_scenario({"item": "candy_bar"}))["scenario_hash"]
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    asked = metric_put(
        content={**judge(source, max_generation_attempts=3), "kind": "asks_everyone"}
    )["hash"]
    design = {
        "slug": "asked",
        "arms": [{"label": "control", "scenario_ref": {"hash": scenario}}],
        "replicates": 2,
        "turns": 2,
        "metrics": [{"hash": asked}],
    }
    answer = operator_client.post("/api/experiments/estimate/", design, format="json")
    assert answer.status_code == 200, answer.json()
    # 2 worlds by 3 measured turns (the baseline too) by 2 agents (Ann, Ben) by 3 generations,
    # each sent as often as a 429 allows; the agents themselves follow rules: no call
    from cognition_app.sources.retry import RATE_LIMITED_TRIES

    judges = 36 * RATE_LIMITED_TRIES
    assert answer.json()["calls"] == {"agents": 0, "judges": judges, "total": judges}
