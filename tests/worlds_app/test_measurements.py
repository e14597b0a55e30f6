"""Metrics and measurements (docs/measurement.md): the turn view of committed turns, expression
metrics measured on every turn (turn 0 included) with their typed errors, measuring again writing
nothing, bad metrics refused with nothing written (agreement with annotations:
test_agreement.py)."""

from __future__ import annotations

from typing import Any

import jmespath
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from cognition_app.models import SourceInvocation
from scenarios_app.models import Metric
from scenarios_app.services import metric_put, response_source_put, scenario_assemble
from tests.cognition_app.test_rule_tools import _scenario as rule_tool_scenario
from tests.conftest import HTTP_SOURCE, LLM_SOURCE
from worlds_app import measurement_selectors
from worlds_app.models import Measurement, Turn, World
from worlds_app.services import measurements, turn_attempt_enqueue, turn_attempt_run, world_create
from worlds_app.services.measurements import world_measure
from worlds_app.turn_view import turn_view, turn_views

pytestmark = pytest.mark.django_db

DRANK = "length(calls[?source=='buy_candy' && status=='succeeded']) > `0`"
TOOL_CALLS = "length(calls[?kind=='http_json'])"


def expression(label: str, text: str, aggregate: str = "any") -> dict[str, Any]:
    return {
        "version": 1,
        "label": label,
        "kind": "expression",
        "aggregate": aggregate,
        "expression": text,
    }


def judge(source: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "label": "plausible",
        "kind": "llm_judge",
        "aggregate": "mean",
        "source": source,
        "system": "You rate how plausible a turn of a simulation is.",
        "user_template": "Rate this turn 1-5:\n{{turn.patches}}",
        "scale": {"min": 1, "max": 5},
        **extra,
    }


def buyers_world(slug: str, turns: int) -> World:
    """Two rule-policy agents and one candy bar (the toy vending machine): at turn 1 each
    presses the button once (Ann gets the bar, Ben finds the machine empty), then both wait."""
    scenario = scenario_assemble(data=rule_tool_scenario({"item": "candy_bar"}))["scenario_hash"]
    world = world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
    for attempt_id in turn_attempt_enqueue(slug=slug, count=turns)["attempt_ids"]:
        assert turn_attempt_run(attempt_id=attempt_id, owner="test") == "committed"
    world.refresh_from_db()
    return world


def values(slug: str, metric_hash: str) -> dict[int, Any]:
    return {
        m.turn_number: m.value if not m.error_code else m.error_code
        for m in Measurement.objects.filter(world__slug=slug, metric_id=metric_hash)
    }


# --- the turn view ---------------------------------------------------------------------------


def test_the_turn_view_of_turn_0_and_of_a_turn_with_tool_calls(toy_sources: str) -> None:
    buyers_world("buyers", 1)
    zero = turn_view(slug="buyers", number=0)
    assert zero["turn"] == 0 and zero["world"] == "buyers"
    assert (zero["patches"], zero["calls"], zero["tokens"], zero["cost"]) == ([], [], 0, 0.0)
    assert zero["entities"]["ann"] == {
        "kind": "agent",
        "environment": "park",
        "state": "hungry",
        "memory": [],
    }
    assert zero["environments"] == {"park": {"content": "A park with a vending machine."}}

    one = turn_view(slug="buyers", number=1)
    assert one["calls"] == [
        {"subject": "ann", "source": "buy_candy", "kind": "http_json", "status": "succeeded"},
        {"subject": "ben", "source": "buy_candy", "kind": "http_json", "status": "succeeded"},
    ]
    assert [(p["subject"], p["narration"]) for p in one["patches"]] == [
        ("ann", "Ann presses the button: dispensed."),
        ("ben", "Ben presses the button: empty."),
    ]
    assert one["patches"][0]["effects"][0]["op"] == "set_entity_state"
    assert one["entities"]["ann"]["state"] == "tried the machine: dispensed"
    assert one["entities"]["ann"]["memory"] == ["Turn 1: the machine said dispensed."]
    assert (
        one["simulation_time"]
        == Turn.objects.get(world__slug="buyers", number=1).simulation_time.isoformat()
    )


def test_turn_views_read_with_queries_independent_of_the_turn_count(
    toy_sources: str, django_assert_num_queries: Any
) -> None:
    world = buyers_world("buyers", 4)
    with CaptureQueriesContext(connection) as two:
        assert set(turn_views(world=world, numbers=[0, 1])) == {0, 1}
    with django_assert_num_queries(len(two.captured_queries)):
        assert set(turn_views(world=world, numbers=range(10))) == {0, 1, 2, 3, 4}
    assert len(two.captured_queries) <= 5


def test_a_branch_views_its_parents_turns_before_its_branch_point(toy_sources: str) -> None:
    buyers_world("buyers", 2)
    branch = world_create(data={"slug": "buyers-b", "branch_from": {"world": "buyers", "turn": 1}})
    views = turn_views(world=branch, numbers=range(5))
    assert sorted(views) == [0, 1]
    assert views[0]["world"] == "buyers-b"
    assert views[0]["entities"]["ann"]["state"] == "hungry"  # the parent's turn 0
    # its first turn is a copy of the parent's turn 1: that turn's calls and patches with it
    assert [c["subject"] for c in views[1]["calls"]] == ["ann", "ben"]
    assert len(views[1]["patches"]) == 2


# --- measuring ----------------------------------------------------------------------------------


def test_an_expression_metric_gives_0_or_1_on_every_turn_including_turn_0(
    toy_sources: str,
) -> None:
    buyers_world("buyers", 3)
    drank = metric_put(content=expression("bought", DRANK))["hash"]
    counted = metric_put(content=expression("tool_calls", TOOL_CALLS, "sum"))["hash"]
    hungry = metric_put(content=expression("ann_hungry", "entities.ann.state == 'hungry'"))["hash"]
    done = world_measure(
        world_id=World.objects.get(slug="buyers").pk, metric_hashes=[drank, counted, hungry]
    )
    assert (done["turns"], done["written"]) == (4, 12)
    assert values("buyers", drank) == {0: 0.0, 1: 1.0, 2: 0.0, 3: 0.0}
    assert values("buyers", counted) == {0: 0.0, 1: 2.0, 2: 0.0, 3: 0.0}
    assert values("buyers", hungry) == {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.0}
    (series,) = [
        s for s in measurement_selectors.world_metric_series(slug="buyers") if s["hash"] == counted
    ]
    # turn 0 is the baseline: shown, not aggregated
    assert series["value"] == 2.0 and series["points"][0]["baseline"] is True


def test_type_and_null_results_are_recorded_as_errors(toy_sources: str) -> None:
    world = buyers_world("buyers", 1)
    text = metric_put(content=expression("ann_state", "entities.ann.state"))["hash"]
    missing = metric_put(content=expression("nobody", "entities.nobody.state"))["hash"]
    broken = metric_put(content=expression("broken", "length(tokens)"))["hash"]
    world_measure(world_id=world.pk, metric_hashes=[text, missing, broken])
    assert values("buyers", text) == {0: "metric_type", 1: "metric_type"}
    assert values("buyers", missing) == {0: "metric_null", 1: "metric_null"}
    assert values("buyers", broken) == {0: "metric_error", 1: "metric_error"}
    row = Measurement.objects.get(world=world, metric_id=text, turn_number=0)
    assert row.value is None and "got string: 'hungry'" in row.error_message


def test_measuring_again_writes_nothing_new(toy_sources: str) -> None:
    world = buyers_world("buyers", 2)
    drank = metric_put(content=expression("bought", DRANK))["hash"]
    assert world_measure(world_id=world.pk, metric_hashes=[drank])["written"] == 3
    before = list(Measurement.objects.order_by("pk").values_list("pk", "measured_at", "value"))
    with CaptureQueriesContext(connection) as again:
        assert world_measure(world_id=world.pk, metric_hashes=[drank])["written"] == 0
    assert list(Measurement.objects.order_by("pk").values_list("pk", "measured_at", "value")) == (
        before
    )
    assert not any(q["sql"].startswith("INSERT") for q in again.captured_queries)
    # a turn committed since is measured alone
    (attempt_id,) = turn_attempt_enqueue(slug="buyers")["attempt_ids"]
    turn_attempt_run(attempt_id=attempt_id, owner="test")
    assert world_measure(world_id=world.pk, metric_hashes=[drank])["written"] == 1


def test_a_judge_whose_subject_is_no_agent_records_it_without_asking(toy_sources: str) -> None:
    world = buyers_world("buyers", 1)
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    nobody = metric_put(content=judge(source, subject="carol", label="carol_view"))["hash"]
    assert world_measure(world_id=world.pk, metric_hashes=[nobody])["written"] == 2
    assert values("buyers", nobody) == {0: "subject_not_agent", 1: "subject_not_agent"}
    assert not SourceInvocation.objects.filter(kind="judge").exists()  # no judge was asked


# --- bad metrics: 400 naming the field, nothing written ----------------------------------------


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"expression": "length(calls[?source=="}, "invalid_expression", "content.expression"),
        ({"aggregate": "median"}, "invalid_aggregate", "content.aggregate"),
        ({"kind": "regex"}, "invalid_metric_kind", "content.kind"),
        ({"label": "Bad Label"}, "invalid_label", "content.label"),
        ({"extra": 1}, "invalid_metric", "content.extra"),
    ],
)
def test_a_bad_expression_metric_is_refused_naming_the_field(
    operator_client: APIClient, change: dict[str, Any], code: str, field: str
) -> None:
    answer = operator_client.post(
        "/api/metrics/", {"content": {**expression("m", "tokens"), **change}}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field)
    assert error["message"].startswith(field)
    assert not Metric.objects.exists()


def test_an_invalid_expression_carries_the_librarys_message(operator_client: APIClient) -> None:
    answer = operator_client.post(
        "/api/metrics/", {"content": expression("m", "calls[?")}, format="json"
    )
    with pytest.raises(jmespath.exceptions.ParseError) as raised:
        jmespath.compile("calls[?")
    library = " ".join(str(raised.value).split())
    assert answer.json()["error"]["message"] == f"content.expression: {library}"


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"source": {"hash": "0" * 64}}, "unresolved_reference", "content.source"),
        ({"source": {"inline": HTTP_SOURCE}}, "wrong_source_interface", "content.source"),
        ({"scale": {"min": 5, "max": 5}}, "invalid_scale", "content.scale"),
        ({"scale": {"min": 5, "max": 1}}, "invalid_scale", "content.scale"),
        ({"scale": {"min": 1}}, "invalid_scale", "content.scale.max"),
        ({"aggregate": "median"}, "invalid_aggregate", "content.aggregate"),
        (
            {"max_generation_attempts": 6},
            "invalid_max_generation_attempts",
            "content.max_generation_attempts",
        ),
        ({"subject": "Not An Id"}, "invalid_subject", "content.subject"),
        ({"user_template": "{{subject.memory}}"}, "unknown_placeholder", "content.user_template"),
        ({"system": ""}, "invalid_metric", "content.system"),
    ],
)
def test_a_bad_judge_metric_is_refused_naming_the_field(
    operator_client: APIClient, change: dict[str, Any], code: str, field: str
) -> None:
    stored = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    sources = (
        Metric.objects.count(),
        len(operator_client.get("/api/response-sources/").json()["results"]),
    )
    answer = operator_client.post(
        "/api/metrics/", {"content": {**judge(stored), **change}}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field)
    after = (
        Metric.objects.count(),
        len(operator_client.get("/api/response-sources/").json()["results"]),
    )
    assert after == sources  # nothing written, not even the inline source


def test_a_judge_metric_is_stored_with_its_defaults_and_its_source_uses_it(
    operator_client: APIClient,
) -> None:
    made = operator_client.post(
        "/api/metrics/", {"content": judge({"inline": LLM_SOURCE})}, format="json"
    )
    assert made.status_code == 201, made.json()
    got = operator_client.get(f"/api/metrics/{made.json()['hash']}/").json()
    assert got["content"]["max_generation_attempts"] == 1
    assert (got["label"], got["metric_kind"]) == ("plausible", "llm_judge")
    # the same metric with the default written out is the same metric
    explicit = judge({"inline": LLM_SOURCE}, max_generation_attempts=1)
    again = operator_client.post("/api/metrics/", {"content": explicit}, format="json")
    assert (again.status_code, again.json()["hash"]) == (200, made.json()["hash"])
    source = got["content"]["source"]["hash"]
    uses = operator_client.get(f"/api/response-sources/{source}/uses/").json()
    assert [m["label"] for m in uses["metrics"]] == ["plausible"]


# --- the API ----------------------------------------------------------------------------------


def test_measurement_requests_are_checked_before_anything_is_queued(
    operator_client: APIClient,
    reader_client: APIClient,
    toy_sources: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buyers_world("buyers", 1)
    post = "/api/worlds/buyers/measurements/"
    unknown = operator_client.post(post, {"metrics": [{"hash": "1" * 64}]}, format="json")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["details"]["field"] == "metrics[0]"
    empty = operator_client.post(post, {"metrics": []}, format="json")
    assert empty.status_code == 400
    assert reader_client.post(post, {"metrics": [{"label": "x"}]}, format="json").status_code == 403
    nowhere = operator_client.post(
        "/api/worlds/nowhere/measurements/", {"metrics": [{"label": "x"}]}, format="json"
    )
    assert nowhere.status_code == 404
    bad_filter = reader_client.get(f"{post}?metric=Not%20a%20label")
    assert bad_filter.status_code == 400
    # a judge interviewing someone who is not an agent of this world: 400 naming the metric,
    # nothing handed to a worker (a dispatch would fail this test: it is replaced by a trap)
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    drank = metric_put(content=expression("bought", DRANK))["hash"]
    carol = metric_put(content=judge(source, subject="carol", label="carol_view"))["hash"]
    ann = metric_put(content=judge(source, subject="ann", label="ann_view"))["hash"]
    sent: list[Any] = []
    monkeypatch.setattr(measurements, "_dispatch", lambda **kwargs: sent.append(kwargs))
    refs = [{"hash": drank}, {"hash": ann}, {"hash": carol}]
    refused = operator_client.post(post, {"metrics": refs}, format="json")
    assert refused.status_code == 400, refused.json()
    error = refused.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("subject_not_agent", "metrics[2]")
    assert "'carol', which is no entity of world 'buyers'" in error["message"]
    assert sent == []
    accepted = operator_client.post(post, {"metrics": refs[:2]}, format="json")
    assert accepted.status_code == 202 and len(sent) == 1
    assert not Measurement.objects.exists()


def test_a_world_read_names_the_metrics_it_was_measured_with(
    reader_client: APIClient, toy_sources: str
) -> None:
    world = buyers_world("buyers", 1)
    drank = metric_put(content=expression("bought", DRANK))["hash"]
    text = metric_put(content=expression("ann_state", "entities.ann.state"))["hash"]
    world_measure(world_id=world.pk, metric_hashes=[drank, text])
    got = reader_client.get("/api/worlds/buyers/").json()
    assert got["measured_metrics"] == [
        {"hash": text, "label": "ann_state", "kind": "expression", "turns": 2, "error_turns": 2},
        {"hash": drank, "label": "bought", "kind": "expression", "turns": 2, "error_turns": 0},
    ]
    listed = reader_client.get("/api/worlds/buyers/measurements/?metric=bought").json()
    assert [(m["turn"], m["value"], m["error"]) for m in listed["results"]] == [
        (0, 0.0, None),
        (1, 1.0, None),
    ]
    uses = reader_client.get(f"/api/metrics/{drank}/uses/").json()
    assert uses["worlds"] == [{"slug": "buyers", "turns": 2, "error_turns": 0}]


def test_fsck_rehashes_metrics() -> None:
    from scenarios_app.integrity import store_verify

    made = metric_put(content=expression("bought", DRANK))["hash"]
    assert [m for kind, m in store_verify() if kind == "metric"] == [None]
    Metric.objects.filter(pk=made).update(content={**expression("bought", DRANK), "label": "x"})
    (mismatch,) = [m for k, m in store_verify() if k == "metric"]
    assert mismatch is not None and mismatch.key == made


def test_measurement_reads_keep_their_query_count_as_turns_grow(
    reader_client: APIClient,
    reader_user: User,
    toy_sources: str,
    django_assert_num_queries: Any,
) -> None:
    from django.test import Client

    world = buyers_world("buyers", 1)
    metrics = [
        metric_put(content=expression("bought", DRANK))["hash"],
        metric_put(content=expression("ann_state", "entities.ann.state"))["hash"],
    ]
    world_measure(world_id=world.pk, metric_hashes=metrics)
    browser = Client()
    browser.force_login(reader_user)
    urls = ("/api/worlds/buyers/measurements/", "/api/worlds/buyers/")
    counts = {}
    for url in urls:
        reader_client.get(url)  # the session and prepared statements, warmed
        with CaptureQueriesContext(connection) as few:
            assert reader_client.get(url).status_code == 200
        counts[url] = len(few.captured_queries)
    browser.get("/worlds/buyers/")
    with CaptureQueriesContext(connection) as page:
        assert browser.get("/worlds/buyers/").status_code == 200
    # read now: captured_queries is a view of the connection's log, which later requests reset
    page_count = len(page.captured_queries)
    for attempt_id in turn_attempt_enqueue(slug="buyers", count=5)["attempt_ids"]:
        turn_attempt_run(attempt_id=attempt_id, owner="test")
    world_measure(world_id=world.pk, metric_hashes=metrics)
    for url in urls:
        with django_assert_num_queries(counts[url]):
            assert reader_client.get(url).status_code == 200
    assert len(reader_client.get(urls[0]).json()["results"]) == 14
    with django_assert_num_queries(page_count):
        assert b"metric-strip" in browser.get("/worlds/buyers/").content
