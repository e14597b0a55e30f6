"""Scenario store selectors, called directly: lists, filters, pages, query counts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chukwa_core import hashing
from chukwa_core.errors import ChukwaError
from scenarios_app import selectors, services
from scenarios_app.models import (
    CognitionProfile,
    Scenario,
)
from tests.conftest import HTTP_SOURCE, LLM_SOURCE
from tests.scenarios_app.store_helpers import (
    ARGS_SCHEMA,
    DANGLING,
    WorkflowFactory,
    agent,
    fork,
    inline_body,
    inline_profile,
    prop,
    tool_workflow,
)

pytestmark = pytest.mark.django_db


# --- selectors -----------------------------------------------------------------------------


def test_scenario_get_by_hash_and_by_name(
    base: services.AssembleResult, make_workflow: WorkflowFactory
) -> None:
    child = fork(base, description="Child.")
    services.scenario_name_set(name="also_base", scenario_hash=base["scenario_hash"])

    by_hash = selectors.scenario_get(ref=base["scenario_hash"])
    by_name = selectors.scenario_get(ref="base")
    assert by_hash == by_name
    assert by_hash["hash"] == base["scenario_hash"]
    assert by_hash["names"] == ["also_base", "base"]
    assert by_hash["child_count"] == 1
    assert by_hash["has_parents"] is False
    assert by_hash["world_count"] == 0
    assert by_hash["cognition_profiles"] == base["cognition_profiles"]
    assert by_hash["environments"] == base["environments"]
    assert by_hash["entities"] == base["entities"]

    workflow_hash = CognitionProfile.objects.get(pk=base["cognition_profiles"]["p"]).workflow_id
    scenario = by_hash["scenario"]
    assert scenario["scenario_slug"] == "ant_on_plate"
    assert scenario["chronon_seconds"] == 60
    assert scenario["cognition_profiles"]["p"]["workflow_hash"] == workflow_hash
    assert scenario["cognition_profiles"]["p"]["workflow"]["nodes"][0]["llm_source_ref"] == {
        "hash": hashing.response_source_hash(LLM_SOURCE)
    }
    assert scenario["environments"] == {
        "hall": "An empty hallway.",
        "room": "A small white plate under a lamp.",
    }
    assert scenario["entities"] == [agent(), prop()]

    child_view = selectors.scenario_get(ref=child["scenario_hash"])
    assert child_view["has_parents"] is True
    assert child_view["child_count"] == 0
    assert child_view["names"] == []


def test_scenario_get_errors() -> None:
    for ref, code, status in [
        (DANGLING, "scenario_not_found", 404),
        ("nobody", "name_not_found", 404),
        ("Not A Ref!", "invalid_reference", 400),
    ]:
        with pytest.raises(ChukwaError) as excinfo:
            selectors.scenario_get(ref=ref)
        assert (excinfo.value.code, excinfo.value.status_code) == (code, status)


@pytest.fixture
def three(
    base: services.AssembleResult, make_workflow: WorkflowFactory, world_patch_hash: str
) -> dict[str, services.AssembleResult]:
    """A (named, assembled), B (fork of A), C (assembled, with a tool and its own parts)."""
    child = fork(base, description="B.")
    tool = services.scenario_assemble(
        data={
            "scenario_slug": "vending",
            "description": "C.",
            "chronon_seconds": 5,
            "cognition_profiles": {"buyer": inline_profile(tool_workflow(world_patch_hash))},
            "environments": {"park": {"inline": "A park."}},
            "entities": [{"inline": agent("bob", environment="park", profile="buyer")}],
        }
    )
    times = {
        base["scenario_hash"]: datetime(2026, 1, 1, tzinfo=UTC),
        child["scenario_hash"]: datetime(2026, 2, 1, tzinfo=UTC),
        tool["scenario_hash"]: datetime(2026, 3, 1, tzinfo=UTC),
    }
    # All rows of one test share the transaction's now(); spread them out to test time filters.
    for scenario_hash, when in times.items():
        Scenario.objects.filter(pk=scenario_hash).update(created_at=when)
    return {"A": base, "B": child, "C": tool}


def listed(params: dict[str, str]) -> list[str]:
    return [row["hash"] for row in selectors.scenario_list(params=params)["results"]]


def test_scenario_list_filters(
    three: dict[str, services.AssembleResult], world_patch_hash: str
) -> None:
    a, b, c = (three[k]["scenario_hash"] for k in "ABC")
    workflow_of = {
        k: CognitionProfile.objects.get(
            pk=next(iter(three[k]["cognition_profiles"].values()))
        ).workflow_id
        for k in "AC"
    }
    http_source = hashing.response_source_hash(HTTP_SOURCE)
    llm_source = hashing.response_source_hash(LLM_SOURCE)

    assert listed({}) == [c, b, a]  # newest first
    assert listed({"created_after": "2026-01-15T00:00:00Z"}) == [c, b]
    assert listed({"created_before": "2026-02-15T00:00:00+00:00"}) == [b, a]
    assert listed(
        {"created_after": "2026-01-15T00:00:00Z", "created_before": "2026-02-15T00:00:00Z"}
    ) == [b]
    assert listed({"has_name": "true"}) == [a]
    assert listed({"has_name": "false"}) == [c, b]
    assert listed({"has_parents": "true"}) == [b]
    assert listed({"has_parents": "no"}) == [c, a]
    assert listed({"uses_entity_hash": three["A"]["entities"][1]}) == [b, a]
    assert listed({"uses_entity_hash": three["C"]["entities"][0]}) == [c]
    assert listed({"uses_environment_hash": three["A"]["environments"]["hall"]}) == [b, a]
    assert listed({"uses_environment_hash": three["C"]["environments"]["park"]}) == [c]
    assert listed({"uses_cognition_profile_hash": three["A"]["cognition_profiles"]["p"]}) == [b, a]
    assert listed({"uses_cognition_workflow_hash": workflow_of["C"]}) == [c]
    assert listed({"uses_cognition_workflow_hash": workflow_of["A"]}) == [b, a]
    assert listed({"uses_json_schema_hash": hashing.json_schema_hash(ARGS_SCHEMA)}) == [c]
    assert listed({"uses_json_schema_hash": world_patch_hash}) == [c, b, a]
    assert listed({"uses_response_source_hash": http_source}) == [c]
    assert listed({"uses_response_source_hash": llm_source}) == [c, b, a]
    assert listed({"uses_entity_hash": DANGLING}) == []
    assert listed(
        {"has_parents": "false", "uses_environment_hash": three["A"]["environments"]["room"]}
    ) == [a]

    page = selectors.scenario_list(params={"limit": "2"})
    assert (page["count"], page["limit"], page["offset"]) == (3, 2, 0)
    assert [r["hash"] for r in page["results"]] == [c, b]
    assert listed({"limit": "2", "offset": "2"}) == [a]
    assert listed({"offset": "5"}) == []

    summary = selectors.scenario_list(params={"has_parents": "true"})["results"][0]
    assert summary == {
        "hash": b,
        "scenario_slug": "ant_on_plate",
        "description": "B.",
        "chronon_seconds": 60,
        "created_at": datetime(2026, 2, 1, tzinfo=UTC),
        "names": [],
        "child_count": 0,
        "world_count": 0,
        "has_parents": True,
    }


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"colour": "red"}, "invalid_query"),
        ({"has_name": "maybe"}, "invalid_query"),
        ({"created_after": "yesterday"}, "invalid_query"),
        ({"created_after": "2026-01-01T00:00:00"}, "invalid_query"),  # naive
        ({"uses_entity_hash": "xyz"}, "invalid_hash"),
        ({"limit": "0"}, "invalid_query"),
        ({"limit": "201"}, "invalid_query"),
        ({"limit": "ten"}, "invalid_query"),
        ({"offset": "-1"}, "invalid_query"),
    ],
)
def test_scenario_list_rejects_bad_params(params: dict[str, str], code: str) -> None:
    with pytest.raises(ChukwaError) as excinfo:
        selectors.scenario_list(params=params)
    assert excinfo.value.code == code
    assert excinfo.value.status_code == 400


def test_scenario_list_paging_has_an_upper_bound_for_offset() -> None:
    # BUG: offset is unbounded, so an offset past PostgreSQL's bigint reaches the database
    # and raises DataError (a 500) instead of a 400.
    with pytest.raises(ChukwaError) as excinfo:
        selectors.scenario_list(params={"offset": str(2**70)})
    assert excinfo.value.code == "invalid_query"


def test_component_uses_for_every_kind(
    three: dict[str, services.AssembleResult], world_patch_hash: str
) -> None:
    a, b, c = (three[k]["scenario_hash"] for k in "ABC")
    c_profile = three["C"]["cognition_profiles"]["buyer"]
    c_workflow = CognitionProfile.objects.get(pk=c_profile).workflow_id
    a_profile = three["A"]["cognition_profiles"]["p"]
    a_workflow = CognitionProfile.objects.get(pk=a_profile).workflow_id

    def uses(kind: str, component: str) -> dict[str, Any]:
        return selectors.component_uses(kind=kind, hash=component)

    args = uses("json_schema", hashing.json_schema_hash(ARGS_SCHEMA))
    assert [(w["hash"], w["paths"]) for w in args["workflows"]] == [
        (c_workflow, ["nodes[0].available_tools[0].arguments_schema_ref"])
    ]
    assert [p["hash"] for p in args["cognition_profiles"]] == [c_profile]
    assert [s["hash"] for s in args["scenarios"]] == [c]

    patch = uses("json_schema", world_patch_hash)
    assert {w["hash"] for w in patch["workflows"]} == {a_workflow, c_workflow}
    assert {s["hash"] for s in patch["scenarios"]} == {a, b, c}

    http = uses("response_source", hashing.response_source_hash(HTTP_SOURCE))
    assert [(w["hash"], w["paths"]) for w in http["workflows"]] == [
        (c_workflow, ["nodes[0].available_tools[0].source_ref"])
    ]
    assert [s["hash"] for s in http["scenarios"]] == [c]

    workflow = uses("cognition_workflow", a_workflow)
    assert workflow["workflows"] == []
    assert [(p["hash"], p["workflow_hash"]) for p in workflow["cognition_profiles"]] == [
        (a_profile, a_workflow)
    ]
    assert {s["hash"] for s in workflow["scenarios"]} == {a, b}

    profile = uses("cognition_profile", c_profile)
    assert (profile["workflows"], profile["cognition_profiles"]) == ([], [])
    assert [s["hash"] for s in profile["scenarios"]] == [c]

    environment = uses("environment", three["A"]["environments"]["room"])
    assert [s["hash"] for s in environment["scenarios"]] == [b, a]

    entity = uses("entity", three["C"]["entities"][0])
    assert entity["kind"] == "entity"
    assert [s["hash"] for s in entity["scenarios"]] == [c]

    for kind, component, code, status in [
        ("entity", DANGLING, "component_not_found", 404),
        ("environment", "xyz", "invalid_hash", 400),
        # a stored hash of another kind is not found as this kind
        ("entity", three["A"]["environments"]["room"], "component_not_found", 404),
    ]:
        with pytest.raises(ChukwaError) as excinfo:
            selectors.component_uses(kind=kind, hash=component)
        assert (excinfo.value.code, excinfo.value.status_code) == (code, status)


def test_component_list_pages(make_workflow: WorkflowFactory) -> None:
    hashes = {services.environment_put(content=f"Room {i}.")["hash"] for i in range(5)}
    first = selectors.component_list(kind="environment", limit=2, offset=0)
    rest = selectors.component_list(kind="environment", limit=10, offset=2)
    assert first["count"] == rest["count"] == 5
    assert len(first["results"]) == 2
    assert len(rest["results"]) == 3
    assert {r["hash"] for r in first["results"] + rest["results"]} == hashes
    assert all(r["kind"] == "environment" for r in first["results"])


def test_lineage_spans_ancestors_and_descendants(base: services.AssembleResult) -> None:
    middle = fork(base, description="Middle.")
    leaf = fork(middle, description="Leaf.")
    for when, scenario in enumerate([base, middle, leaf], start=1):
        Scenario.objects.filter(pk=scenario["scenario_hash"]).update(
            created_at=datetime(2026, when, 1, tzinfo=UTC)
        )
    lineage = selectors.scenario_lineage(ref=middle["scenario_hash"])
    assert lineage["root"] == middle["scenario_hash"]
    assert [(n["hash"], n["relation"]) for n in lineage["nodes"]] == [
        (base["scenario_hash"], "ancestor"),
        (middle["scenario_hash"], "self"),
        (leaf["scenario_hash"], "descendant"),
    ]
    assert [(e["parent"], e["child"]) for e in lineage["edges"]] == [
        (base["scenario_hash"], middle["scenario_hash"]),
        (middle["scenario_hash"], leaf["scenario_hash"]),
    ]
    # by name, too
    assert selectors.scenario_lineage(ref="base")["root"] == base["scenario_hash"]


def _make_scenarios(make_workflow: WorkflowFactory, start: int, stop: int) -> None:
    for i in range(start, stop):
        made = services.scenario_assemble(
            data=inline_body(make_workflow, description=f"Scenario {i}.", name=f"s{i}")
        )
        if i % 4 == 0:
            fork(made, description=f"Fork of {i}.")


def test_scenario_list_query_count_does_not_grow_with_rows(
    make_workflow: WorkflowFactory,
    django_assert_num_queries: Any,
    django_assert_max_num_queries: Any,
) -> None:
    _make_scenarios(make_workflow, 0, 4)  # 4 assembled + 1 fork
    assert Scenario.objects.count() == 5
    with CaptureQueriesContext(connection) as few:
        small = selectors.scenario_list(params={"limit": "200"})
    _make_scenarios(make_workflow, 4, 24)  # 20 more + 5 forks
    assert Scenario.objects.count() == 30
    with django_assert_num_queries(len(few.captured_queries)):
        large = selectors.scenario_list(params={"limit": "200"})
    with django_assert_max_num_queries(4):
        selectors.scenario_list(params={"limit": "200", "has_parents": "true"})
    assert (small["count"], large["count"]) == (5, 30)
    assert len(large["results"]) == 30
    assert sum(r["child_count"] for r in large["results"]) == 6
    assert sum(r["has_parents"] for r in large["results"]) == 6
    assert sum(len(r["names"]) for r in large["results"]) == 24
