"""Scenario store services and selectors, called directly (SPEC §2, §3; seed 001's smoke).

Every write test counts the rows of every store table before and after, so "writes nothing" and
"exactly one new row" are checked against the database, not against the services' own reports.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from chukwa_core import hashing
from chukwa_core.errors import ChukwaError
from scenarios_app import selectors, services
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    Entity,
    Environment,
    JsonSchema,
    Scenario,
    ScenarioDerivation,
    ScenarioDerivationParent,
    ScenarioName,
    ScenarioNameHistory,
    WorkflowComponentRef,
)
from tests.conftest import HTTP_SOURCE, LLM_SOURCE

pytestmark = pytest.mark.django_db

WorkflowFactory = Callable[..., dict[str, Any]]

DANGLING = hashlib.sha256(b"nothing is stored under this hash").hexdigest()
ARGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["slot"],
    "properties": {"slot": {"type": "string", "maxLength": 8}},
}
RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"enum": ["dispensed", "empty"]}},
}
ZERO_NEW = {
    "json_schemas": 0,
    "response_sources": 0,
    "cognition_workflows": 0,
    "cognition_profiles": 0,
    "environments": 0,
    "entities": 0,
}


# --- helpers -------------------------------------------------------------------------------


def row_counts() -> dict[str, int]:
    """Rows in every table of the scenario store, by model name."""
    return {
        m.__name__: m.objects.count() for m in apps.get_app_config("scenarios_app").get_models()
    }


def row_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Only the tables whose row count changed."""
    return {name: after[name] - before[name] for name in before if after[name] != before[name]}


def canonical(value: Any) -> str:
    """A sort key that ignores dict key order (jsonb does not keep it)."""
    return json.dumps(value, sort_keys=True)


def new_components(**counts: int) -> dict[str, int]:
    return {**ZERO_NEW, **counts}


def agent(
    entity_id: str = "ant",
    *,
    name: str = "Ant",
    environment: str = "room",
    profile: str = "p",
    goal: str = "eat",
) -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": name,
        "state": "hungry",
        "environment": environment,
        "kind": {"agent": {"goal": goal, "memory": "", "cognition_profile": profile}},
    }


def prop(
    entity_id: str = "crumb", *, name: str = "Crumb", environment: str = "room"
) -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": name,
        "state": "a bread crumb",
        "environment": environment,
        "kind": "prop",
    }


def inline_profile(workflow: dict[str, Any]) -> dict[str, Any]:
    return {"inline": {"workflow": {"inline": workflow}}}


def inline_body(make_workflow: WorkflowFactory, **overrides: Any) -> dict[str, Any]:
    """A valid assembly input with every part inline."""
    body: dict[str, Any] = {
        "scenario_slug": "ant_on_plate",
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
        "cognition_profiles": {"p": inline_profile(make_workflow())},
        "environments": {"room": {"inline": "A small white plate under a lamp."}},
        "entities": [{"inline": agent()}, {"inline": prop()}],
    }
    body.update(overrides)
    return body


def expect_error(code: str, status: int, call: Callable[[], object]) -> ChukwaError:
    """The call raises ChukwaError with this code and HTTP status, and writes no row anywhere."""
    before = row_counts()
    with pytest.raises(ChukwaError) as excinfo:
        call()
    assert excinfo.value.code == code, excinfo.value.as_dict()
    assert excinfo.value.status_code == status
    assert row_delta(before, row_counts()) == {}
    return excinfo.value


def tool_workflow(world_patch_hash: str) -> dict[str, Any]:
    """A tool loop that references an http source and two extra schemas, all inline."""
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": {"inline": LLM_SOURCE},
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": "You control the acting subject."},
                        {
                            "role": "user",
                            "content": "{{world.projection}}\n\nTools:\n{{tools.available}}",
                        },
                    ]
                },
                "available_tools": [
                    {
                        "name": "buy_candy",
                        "description": "Use only if the subject chooses to buy candy.",
                        "source_ref": {"inline": HTTP_SOURCE},
                        "arguments_schema_ref": {"inline": ARGS_SCHEMA},
                        "result_schema_ref": {"inline": RESULT_SCHEMA},
                    }
                ],
                "max_generation_attempts": 3,
                "max_tool_calls": 1,
                "final_schema_ref": {"hash": world_patch_hash},
            }
        ],
        "apply": {"from": "act.final"},
    }


# --- idempotent puts -----------------------------------------------------------------------


PUT_CASES: dict[
    str, tuple[Callable[..., services.PutResult], Callable[..., Any], dict[str, int]]
] = {
    # kind: (put service, content factory, rows the first put adds)
    "json_schema": (services.json_schema_put, lambda wf: ARGS_SCHEMA, {"JsonSchema": 1}),
    "response_source": (
        services.response_source_put,
        lambda wf: LLM_SOURCE,
        {"ResponseSource": 1},
    ),
    "cognition_workflow": (
        services.cognition_workflow_put,
        lambda wf: wf(),
        # the inline LLM source, the workflow, and its two reference edges
        {"ResponseSource": 1, "CognitionWorkflow": 1, "WorkflowComponentRef": 2},
    ),
    "cognition_profile": (
        services.cognition_profile_put,
        lambda wf: {"workflow": {"inline": wf()}},
        {
            "ResponseSource": 1,
            "CognitionWorkflow": 1,
            "WorkflowComponentRef": 2,
            "CognitionProfile": 1,
        },
    ),
    "environment": (services.environment_put, lambda wf: "A windowless room.", {"Environment": 1}),
    "entity": (services.entity_put, lambda wf: agent(), {"Entity": 1}),
}


@pytest.mark.parametrize("kind", list(PUT_CASES))
def test_put_is_idempotent_for_every_kind(kind: str, make_workflow: WorkflowFactory) -> None:
    put, content, first_rows = PUT_CASES[kind]
    before = row_counts()
    first = put(content=content(make_workflow))
    after_first = row_counts()
    second = put(content=content(make_workflow))

    assert first["was_new"] is True
    assert row_delta(before, after_first) == first_rows
    assert second["hash"] == first["hash"]
    assert second["was_new"] is False
    assert row_delta(after_first, row_counts()) == {}
    stored = selectors.component_get(kind=kind, hash=first["hash"])
    assert stored["hash"] == first["hash"]
    # the same write through the generic entry point is also a no-op
    assert services.component_put(kind=kind, content=content(make_workflow))["was_new"] is False


def test_put_hashes_are_the_canonical_hashes(make_workflow: WorkflowFactory) -> None:
    text = "A windowless room."
    assert (
        services.environment_put(content=text)["hash"] == hashlib.sha256(text.encode()).hexdigest()
    )
    # JCS: key order does not matter
    reordered = dict(reversed(list(ARGS_SCHEMA.items())))
    assert services.json_schema_put(content=reordered)["hash"] == hashing.json_hash(ARGS_SCHEMA)
    assert services.json_schema_put(content=ARGS_SCHEMA)["was_new"] is False


def test_workflow_and_profile_puts_count_inline_parts(make_workflow: WorkflowFactory) -> None:
    workflow = services.cognition_workflow_put(content=make_workflow())
    assert workflow["new_components"] == new_components(response_sources=1, cognition_workflows=1)
    stored = CognitionWorkflow.objects.get(pk=workflow["hash"]).content
    # stored with every reference resolved to a hash
    source_hash = hashing.response_source_hash(LLM_SOURCE)
    assert stored["nodes"][0]["llm_source_ref"] == {"hash": source_hash}

    by_hash = services.cognition_profile_put(content={"workflow": {"hash": workflow["hash"]}})
    assert by_hash["was_new"] is True
    assert by_hash["workflow_hash"] == workflow["hash"]
    assert by_hash["new_components"] == new_components(cognition_profiles=1)
    # authored inline, by hash, or in the stored form: one profile
    inline = services.cognition_profile_put(content={"workflow": {"inline": make_workflow()}})
    stored_form = services.cognition_profile_put(content={"workflow_hash": workflow["hash"]})
    assert inline["hash"] == stored_form["hash"] == by_hash["hash"]
    assert inline["was_new"] is stored_form["was_new"] is False
    assert inline["new_components"] == ZERO_NEW


def test_entity_id_is_normalized_before_hashing() -> None:
    upper = services.entity_put(content=agent("Ant"))
    lower = services.entity_put(content=agent("ant"))
    padded = services.entity_put(content=agent("  ANT "))
    assert upper["hash"] == lower["hash"] == padded["hash"]
    assert (upper["was_new"], lower["was_new"], padded["was_new"]) == (True, False, False)
    assert Entity.objects.count() == 1
    assert Entity.objects.get().content["id"] == "ant"

    spaced = services.entity_put(content=prop("Sugar  Grain"))
    assert selectors.component_get(kind="entity", hash=spaced["hash"])["entity_id"] == "sugar_grain"
    # no silent collapse of repeated separators
    assert services.entity_put(content=prop("sugar__grain"))["hash"] != spaced["hash"]


@pytest.mark.parametrize("bad_id", ["first ant!", "", "ant.", ".ant", "ant..alpha"])
def test_entity_put_rejects_invalid_ids(bad_id: str) -> None:
    error = expect_error(
        "invalid_entity_id", 400, lambda: services.entity_put(content=agent(bad_id))
    )
    assert error.details["field"] == "content.id"


# --- assemble ------------------------------------------------------------------------------


def test_assemble_all_inline_counts_every_new_row(make_workflow: WorkflowFactory) -> None:
    before = row_counts()
    result = services.scenario_assemble(data=inline_body(make_workflow))

    assert result["was_new_scenario"] is True
    assert result["new_components"] == new_components(
        response_sources=1, cognition_workflows=1, cognition_profiles=1, environments=1, entities=2
    )
    assert row_delta(before, row_counts()) == {
        "ResponseSource": 1,
        "CognitionWorkflow": 1,
        "WorkflowComponentRef": 2,
        "CognitionProfile": 1,
        "Environment": 1,
        "Entity": 2,
        "Scenario": 1,
        "ScenarioCognitionProfile": 1,
        "ScenarioEnvironment": 1,
        "ScenarioEntity": 2,
        "ScenarioDerivation": 1,
    }
    assert result["scenario_hash"] == hashing.scenario_hash(
        scenario_slug="ant_on_plate",
        description="An ant on a plate.",
        chronon_seconds=60,
        cognition_profiles=result["cognition_profiles"],
        environments=result["environments"],
        entities=result["entities"],
    )
    assert result["entities"] == [hashing.entity_hash(agent()), hashing.entity_hash(prop())]
    assert result["name"] is None
    derivation = ScenarioDerivation.objects.get(pk=result["derivation_id"])
    assert derivation.child_id == result["scenario_hash"]
    assert derivation.metadata == {}
    assert not derivation.parents.exists()  # assemblies have no parents


def test_assemble_all_hash_references_writes_only_the_scenario(
    make_workflow: WorkflowFactory,
) -> None:
    profile = services.cognition_profile_put(content={"workflow": {"inline": make_workflow()}})
    room = services.environment_put(content="A small white plate under a lamp.")
    ant = services.entity_put(content=agent())
    crumb = services.entity_put(content=prop())
    before = row_counts()

    result = services.scenario_assemble(
        data={
            "scenario_slug": "ant_on_plate",
            "description": "An ant on a plate.",
            "chronon_seconds": 60,
            "cognition_profiles": {"p": {"hash": profile["hash"]}},
            "environments": {"room": {"hash": room["hash"]}},
            "entities": [{"hash": ant["hash"]}, {"hash": crumb["hash"]}],
        }
    )

    assert result["was_new_scenario"] is True
    assert result["new_components"] == ZERO_NEW
    assert result["cognition_profiles"] == {"p": profile["hash"]}
    assert result["environments"] == {"room": room["hash"]}
    assert result["entities"] == [ant["hash"], crumb["hash"]]
    assert row_delta(before, row_counts()) == {
        "Scenario": 1,
        "ScenarioCognitionProfile": 1,
        "ScenarioEnvironment": 1,
        "ScenarioEntity": 2,
        "ScenarioDerivation": 1,
    }
    # the same content authored inline is the same scenario
    again = services.scenario_assemble(data=inline_body(make_workflow))
    assert again["scenario_hash"] == result["scenario_hash"]
    assert again["was_new_scenario"] is False
    assert again["new_components"] == ZERO_NEW


def test_assemble_mixed_references(make_workflow: WorkflowFactory) -> None:
    profile = services.cognition_profile_put(content={"workflow": {"inline": make_workflow()}})
    crumb = services.entity_put(content=prop())
    before = row_counts()

    result = services.scenario_assemble(
        data=inline_body(
            make_workflow,
            cognition_profiles={"p": {"hash": profile["hash"]}},
            environments={
                "room": {"inline": "A small white plate under a lamp."},
                "hall": {"inline": "An empty hallway."},  # staged: nobody is in it
            },
            entities=[{"inline": agent()}, {"hash": crumb["hash"]}],
        )
    )

    assert result["new_components"] == new_components(environments=2, entities=1)
    assert sorted(result["environments"]) == ["hall", "room"]
    assert result["entities"] == [hashing.entity_hash(agent()), crumb["hash"]]
    delta = row_delta(before, row_counts())
    assert delta["Environment"] == 2
    assert delta["Entity"] == 1
    assert "CognitionProfile" not in delta
    assert "CognitionWorkflow" not in delta


def test_reassemble_reuses_everything_but_records_a_new_derivation(
    make_workflow: WorkflowFactory,
) -> None:
    first = services.scenario_assemble(data=inline_body(make_workflow))
    before = row_counts()
    second = services.scenario_assemble(data=inline_body(make_workflow, note="again"))

    assert second["scenario_hash"] == first["scenario_hash"]
    assert second["was_new_scenario"] is False
    assert second["new_components"] == ZERO_NEW
    assert second["derivation_id"] != first["derivation_id"]
    assert row_delta(before, row_counts()) == {"ScenarioDerivation": 1}
    notes = list(
        ScenarioDerivation.objects.filter(child_id=first["scenario_hash"])
        .order_by("id")
        .values_list("note", flat=True)
    )
    assert notes == ["", "again"]


# --- seed 001: the smoke sequence ----------------------------------------------------------

VENDING_ROOM = (
    "A windowless room lit by a humming strip light. A vending machine stands against the far "
    "wall. The only door is locked from the outside."
)
DIRECTOR_ONLY = (
    "Director-only facts (the machine's stock and its defective slot B2) never reach the narration."
)


def vending_workflow(source_hash: str, world_patch_hash: str) -> dict[str, Any]:
    """perceive (llm_text) → intend (llm_text) → act (llm_tool_loop), every ref a hash."""
    llm = {"hash": source_hash}
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "perceive",
                "type": "llm_text",
                "llm_source_ref": llm,
                "prompt_template": {
                    "messages": [
                        {
                            "role": "system",
                            "content": "Write what the subject perceives. " + DIRECTOR_ONLY,
                        },
                        {
                            "role": "user",
                            "content": "{{environment.rendered}}\n\nSubject:\n{{subject.rendered}}",
                        },
                    ]
                },
                "max_generation_attempts": 3,
            },
            {
                "id": "intend",
                "type": "llm_text",
                "llm_source_ref": llm,
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": "State the subject's one intention."},
                        {
                            "role": "user",
                            "content": "Memory:\n{{subject.memory}}\n\n"
                            "Perception:\n{{nodes.perceive.output}}",
                        },
                    ]
                },
                "max_generation_attempts": 3,
            },
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": llm,
                "prompt_template": {
                    "messages": [
                        {
                            "role": "system",
                            "content": "You are the simulation director. " + DIRECTOR_ONLY,
                        },
                        {
                            "role": "user",
                            "content": "World:\n{{world.projection}}\n\nActing subject:\n"
                            "{{subject.rendered}}\n\nIntent:\n{{nodes.intend.output}}\n\n"
                            "Available tools:\n{{tools.available}}",
                        },
                    ]
                },
                "available_tools": [],
                "max_generation_attempts": 3,
                "max_tool_calls": 0,
                "final_schema_ref": {"hash": world_patch_hash},
            },
        ],
        "apply": {"from": "act.final"},
    }


@pytest.mark.django_db(transaction=True)
def test_seed_001_smoke_sequence(world_patch_hash: str) -> None:
    # Transactional on purpose: every service commits its own durable transaction, as in
    # production, so created_at (the transaction's now()) orders parent before child.
    name = "locked_vending_room"
    counts = row_counts()
    assert counts == {**{k: 0 for k in counts}, "JsonSchema": 1}  # only the WorldPatch schema

    # 1. piece by piece, each put idempotent
    source = services.response_source_put(content=LLM_SOURCE)
    workflow_content = vending_workflow(source["hash"], world_patch_hash)
    workflow = services.cognition_workflow_put(content=workflow_content)
    assert workflow["new_components"] == new_components(cognition_workflows=1)
    assert WorkflowComponentRef.objects.filter(workflow_id=workflow["hash"]).count() == 4
    profile = services.cognition_profile_put(content={"workflow": {"hash": workflow["hash"]}})
    room = services.environment_put(content=VENDING_ROOM)
    subject = services.entity_put(
        content={
            "id": "subject",
            "name": "The Subject",
            "state": "awake, hungry, standing in the middle of the room",
            "environment": "vending_room",
            "kind": {
                "agent": {
                    "goal": "get out of the room",
                    "memory": "",
                    "cognition_profile": "subject",
                }
            },
        }
    )
    machine = services.entity_put(
        content={
            "id": "vending_machine",
            "name": "Vending machine",
            "state": "lit; stocked with two candy bars; slot B2 is defective",
            "environment": "vending_room",
            "kind": "prop",
        }
    )
    puts = [source, workflow, profile, room, subject, machine]
    assert all(p["was_new"] for p in puts)
    assert services.cognition_workflow_put(content=workflow_content)["was_new"] is False

    # 2. assemble from hashes, with a name, in one transaction
    before = row_counts()
    parent = services.scenario_assemble(
        data={
            "scenario_slug": name,
            "description": "A subject in a windowless room with a vending machine.",
            "chronon_seconds": 60,
            "cognition_profiles": {"subject": {"hash": profile["hash"]}},
            "environments": {"vending_room": {"hash": room["hash"]}},
            "entities": [{"hash": subject["hash"]}, {"hash": machine["hash"]}],
            "name": name,
            "operator": "ops@example",
            "note": "first draft",
        }
    )
    assert parent["was_new_scenario"] is True
    assert parent["new_components"] == ZERO_NEW
    assert parent["name"] == name
    assert row_delta(before, row_counts()) == {
        "Scenario": 1,
        "ScenarioCognitionProfile": 1,
        "ScenarioEnvironment": 1,
        "ScenarioEntity": 2,
        "ScenarioDerivation": 1,
        "ScenarioName": 1,
        "ScenarioNameHistory": 1,
    }
    assert selectors.scenario_get(ref=name)["hash"] == parent["scenario_hash"]

    # 3. fork by name, changing one byte of one workflow prompt
    changed = copy.deepcopy(workflow_content)
    message = changed["nodes"][2]["prompt_template"]["messages"][0]
    original = message["content"]
    message["content"] = original[:-1] + "!"
    assert len(message["content"].encode()) == len(original.encode())
    assert sum(a != b for a, b in zip(message["content"], original, strict=True)) == 1
    before = row_counts()
    child = services.scenario_fork(
        data={
            "primary_parent": {"name": name},
            "changes": {"cognition_profile_upserts": {"subject": inline_profile(changed)}},
            "note": "sharper director",
        }
    )
    assert child["was_new_scenario"] is True
    assert child["new_components"] == new_components(cognition_workflows=1, cognition_profiles=1)
    assert child["environments"] == parent["environments"]
    assert child["entities"] == parent["entities"]
    assert child["cognition_profiles"]["subject"] != profile["hash"]
    assert row_delta(before, row_counts()) == {
        # the headline: one workflow, one profile, one scenario ...
        "CognitionWorkflow": 1,
        "CognitionProfile": 1,
        "Scenario": 1,
        # ... plus what a new workflow and a new scenario are made of: its reference edges,
        # its label bindings and the derivation that records the fork
        "WorkflowComponentRef": 4,
        "ScenarioCognitionProfile": 1,
        "ScenarioEnvironment": 1,
        "ScenarioEntity": 2,
        "ScenarioDerivation": 1,
        "ScenarioDerivationParent": 1,
    }
    # no new schema, source, environment or entity rows, and the name did not move
    assert selectors.scenario_name_get(name=name)["hash"] == parent["scenario_hash"]

    # 4. lineage: parent then child, one primary edge; provenance names the profile label
    lineage = selectors.scenario_lineage(ref=child["scenario_hash"])
    assert [n["hash"] for n in lineage["nodes"]] == [
        parent["scenario_hash"],
        child["scenario_hash"],
    ]
    assert [n["relation"] for n in lineage["nodes"]] == ["ancestor", "self"]
    assert [(e["parent"], e["child"], e["role"]) for e in lineage["edges"]] == [
        (parent["scenario_hash"], child["scenario_hash"], "primary")
    ]
    metadata = ScenarioDerivation.objects.get(pk=child["derivation_id"]).metadata
    assert metadata["touched_components"] == [
        {
            "kind": "cognition_profile",
            "label": "subject",
            "op": "upsert",
            "old_hash": profile["hash"],
            "new_hash": child["cognition_profiles"]["subject"],
        }
    ]

    # 5. compare-and-set: the right expected hash wins, a stale one is 409 and changes nothing
    moved = services.scenario_name_set(
        name=name,
        scenario_hash=child["scenario_hash"],
        expected_current_hash=parent["scenario_hash"],
        note="promote the fork",
    )
    assert moved == {
        "name": name,
        "hash": child["scenario_hash"],
        "previous_hash": parent["scenario_hash"],
    }
    history_rows = ScenarioNameHistory.objects.count()
    with pytest.raises(ChukwaError) as excinfo:
        services.scenario_name_set(
            name=name,
            scenario_hash=parent["scenario_hash"],
            expected_current_hash=parent["scenario_hash"],
        )
    assert excinfo.value.code == "cas_failed"
    assert excinfo.value.status_code == 409
    assert excinfo.value.details["expected"] == parent["scenario_hash"]
    assert excinfo.value.details["current"] == child["scenario_hash"]
    assert ScenarioName.objects.get(pk=name).scenario_id == child["scenario_hash"]
    assert ScenarioNameHistory.objects.count() == history_rows

    # 6. rollback: an assembly that names itself but fails validation leaves nothing
    before = row_counts()
    with pytest.raises(ChukwaError) as excinfo:
        services.scenario_assemble(
            data={
                "scenario_slug": "ghost",
                "description": "Fails after its inline parts are stored.",
                "chronon_seconds": 60,
                "cognition_profiles": {"subject": {"hash": profile["hash"]}},
                "environments": {"attic": {"inline": "A dusty attic."}},
                "entities": [
                    {"inline": {**prop("Lamp"), "environment": "attic"}},
                    {"inline": {**agent("lamp", profile="subject"), "environment": "attic"}},
                ],
                "name": "ghost",
            }
        )
    assert excinfo.value.code == "duplicate_entity_id"
    assert row_delta(before, row_counts()) == {}
    assert not ScenarioName.objects.filter(pk="ghost").exists()
    assert not ScenarioNameHistory.objects.filter(name="ghost").exists()
    assert not Environment.objects.filter(content="A dusty attic.").exists()

    # 7. unset leaves a tombstone; the history lists every change, newest first
    unset = services.scenario_name_unset(
        name=name, expected_current_hash=child["scenario_hash"], note="retired"
    )
    assert unset == {"name": name, "hash": None, "previous_hash": child["scenario_hash"]}
    named = selectors.scenario_name_get(name=name)
    assert named["hash"] is None
    assert named["scenario"] is None
    assert [(h["old_hash"], h["new_hash"], h["note"]) for h in named["history"]] == [
        (child["scenario_hash"], None, "retired"),
        (parent["scenario_hash"], child["scenario_hash"], "promote the fork"),
        (None, parent["scenario_hash"], "first draft"),
    ]
    with pytest.raises(ChukwaError) as excinfo:
        selectors.scenario_get(ref=name)
    assert excinfo.value.code == "name_not_found"
    assert excinfo.value.status_code == 404
    # the scenarios themselves are immutable and stay
    assert (
        Scenario.objects.filter(pk__in=[parent["scenario_hash"], child["scenario_hash"]]).count()
        == 2
    )


def test_name_set_refuses_to_run_inside_an_outer_transaction(
    make_workflow: WorkflowFactory,
) -> None:
    # Services own their (durable) transaction: a caller cannot wrap a name change in a larger
    # transaction whose later failure would make the set and the failure disagree.
    scenario = services.scenario_assemble(data=inline_body(make_workflow))
    before = row_counts()
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        services.scenario_name_set(name="doomed", scenario_hash=scenario["scenario_hash"])
    assert row_delta(before, row_counts()) == {}
    assert not ScenarioName.objects.filter(pk="doomed").exists()


def test_assemble_with_a_name_that_fails_validation_sets_no_name(
    make_workflow: WorkflowFactory,
) -> None:
    expect_error(
        "no_agent",
        400,
        lambda: services.scenario_assemble(
            data=inline_body(make_workflow, entities=[{"inline": prop()}], name="never")
        ),
    )
    assert not ScenarioNameHistory.objects.filter(name="never").exists()


# --- names ---------------------------------------------------------------------------------


def test_name_cas_with_none_means_must_be_unset(make_workflow: WorkflowFactory) -> None:
    scenario = services.scenario_assemble(data=inline_body(make_workflow))["scenario_hash"]
    first = services.scenario_name_set(
        name="fresh", scenario_hash=scenario, expected_current_hash=None
    )
    assert first["previous_hash"] is None
    error = expect_error(
        "cas_failed",
        409,
        lambda: services.scenario_name_set(
            name="fresh", scenario_hash=scenario, expected_current_hash=None
        ),
    )
    assert error.details == {
        "field": "expected_current_hash",
        "name": "fresh",
        "expected": None,
        "current": scenario,
    }
    # setting a name to where it already points changes nothing and records nothing
    before = row_counts()
    services.scenario_name_set(name="fresh", scenario_hash=scenario)
    assert row_delta(before, row_counts()) == {}


def test_name_errors(make_workflow: WorkflowFactory) -> None:
    scenario = services.scenario_assemble(data=inline_body(make_workflow))["scenario_hash"]
    expect_error(
        "invalid_name",
        400,
        lambda: services.scenario_name_set(name="Bad Name", scenario_hash=scenario),
    )
    expect_error(
        "scenario_not_found",
        404,
        lambda: services.scenario_name_set(name="x", scenario_hash=DANGLING),
    )
    expect_error("name_not_found", 404, lambda: services.scenario_name_unset(name="nobody"))
    services.scenario_name_set(name="x", scenario_hash=scenario)
    expect_error(
        "cas_failed",
        409,
        lambda: services.scenario_name_unset(name="x", expected_current_hash=DANGLING),
    )
    assert ScenarioName.objects.get(pk="x").scenario_id == scenario


# --- fork ----------------------------------------------------------------------------------


@pytest.fixture
def base(make_workflow: WorkflowFactory) -> services.AssembleResult:
    """Profile p; environments room (inhabited) and hall (staged); agent ant and prop crumb."""
    return services.scenario_assemble(
        data=inline_body(
            make_workflow,
            environments={
                "room": {"inline": "A small white plate under a lamp."},
                "hall": {"inline": "An empty hallway."},
            },
            name="base",
        )
    )


def fork(parent: services.AssembleResult, **changes: Any) -> services.AssembleResult:
    return services.scenario_fork(
        data={"primary_parent": {"hash": parent["scenario_hash"]}, "changes": changes}
    )


def touched(derivation_id: int) -> list[dict[str, Any]]:
    return ScenarioDerivation.objects.get(pk=derivation_id).metadata["touched_components"]


def test_fork_upserts_and_removals(
    base: services.AssembleResult, make_workflow: WorkflowFactory
) -> None:
    before = row_counts()
    child = fork(
        base,
        description="A bigger plate.",
        cognition_profile_upserts={"q": inline_profile(make_workflow("Another prompt."))},
        environment_upserts={
            "room": {"inline": "A large white plate."},
            "garden": {"inline": "A garden."},
        },
        environment_removals=["hall"],
    )

    assert child["was_new_scenario"] is True
    assert child["new_components"] == new_components(
        cognition_workflows=1, cognition_profiles=1, environments=2
    )
    assert child["cognition_profiles"]["p"] == base["cognition_profiles"]["p"]
    assert sorted(child["cognition_profiles"]) == ["p", "q"]
    assert child["environments"] == {
        "garden": hashing.environment_hash("A garden."),
        "room": hashing.environment_hash("A large white plate."),
    }
    assert child["entities"] == base["entities"]
    delta = row_delta(before, row_counts())
    assert delta["Environment"] == 2
    assert "Entity" not in delta
    assert delta["ScenarioDerivationParent"] == 1

    changes = touched(child["derivation_id"])
    assert sorted(changes, key=canonical) == sorted(
        [
            {
                "kind": "scenario_field",
                "field": "description",
                "old": "An ant on a plate.",
                "new": "A bigger plate.",
            },
            {
                "kind": "cognition_profile",
                "label": "q",
                "op": "upsert",
                "old_hash": None,
                "new_hash": child["cognition_profiles"]["q"],
            },
            {
                "kind": "environment",
                "label": "hall",
                "op": "remove",
                "old_hash": base["environments"]["hall"],
            },
            {
                "kind": "environment",
                "label": "room",
                "op": "upsert",
                "old_hash": base["environments"]["room"],
                "new_hash": child["environments"]["room"],
            },
            {
                "kind": "environment",
                "label": "garden",
                "op": "upsert",
                "old_hash": None,
                "new_hash": child["environments"]["garden"],
            },
        ],
        key=canonical,
    )
    stored = selectors.scenario_get(ref=child["scenario_hash"])
    assert stored["scenario"]["description"] == "A bigger plate."
    assert stored["scenario"]["environments"]["room"] == "A large white plate."
    assert stored["has_parents"] is True


def test_fork_profile_removal_of_an_unused_profile(
    base: services.AssembleResult, make_workflow: WorkflowFactory
) -> None:
    staged = fork(base, cognition_profile_upserts={"q": inline_profile(make_workflow("Q."))})
    back = fork(staged, cognition_profile_removals=["q"])
    # removing what was added gives back the original content, reused, with new provenance
    assert back["scenario_hash"] == base["scenario_hash"]
    assert back["was_new_scenario"] is False
    assert touched(back["derivation_id"]) == [
        {
            "kind": "cognition_profile",
            "label": "q",
            "op": "remove",
            "old_hash": staged["cognition_profiles"]["q"],
        }
    ]


def test_fork_replaces_the_entity_list(base: services.AssembleResult) -> None:
    sugar = {**prop("Sugar Grain", name="Sugar grain")}
    child = fork(base, entities=[{"inline": agent()}, {"inline": sugar}])

    sugar_hash = hashing.entity_hash({**sugar, "id": "sugar_grain"})
    assert child["entities"] == [base["entities"][0], sugar_hash]
    assert child["new_components"] == new_components(entities=1)
    assert touched(child["derivation_id"]) == [
        {
            "kind": "entities",
            "op": "replace",
            "added": [sugar_hash],
            "removed": [base["entities"][1]],
        }
    ]
    reconstruction = selectors.scenario_get(ref=child["scenario_hash"])["scenario"]
    assert [e["id"] for e in reconstruction["entities"]] == ["ant", "sugar_grain"]


def test_fork_additional_parents_record_roles_in_order(
    base: services.AssembleResult, make_workflow: WorkflowFactory
) -> None:
    donor = services.scenario_assemble(data=inline_body(make_workflow, description="Donor."))
    mate = services.scenario_assemble(data=inline_body(make_workflow, description="Mate."))
    child = services.scenario_fork(
        data={
            "primary_parent": {"name": "base"},
            "changes": {"chronon_seconds": 30},
            "additional_parents": [
                {"hash": donor["scenario_hash"], "role": "donor"},
                {"hash": mate["scenario_hash"], "role": "crossover"},
            ],
            "operator": "ga@example",
            "metadata": {"generation": 3},
        }
    )

    edges = list(
        ScenarioDerivationParent.objects.filter(derivation_id=child["derivation_id"])
        .order_by("position")
        .values_list("position", "parent_id", "role")
    )
    assert edges == [
        (0, base["scenario_hash"], "primary"),
        (1, donor["scenario_hash"], "donor"),
        (2, mate["scenario_hash"], "crossover"),
    ]
    (derivation,) = selectors.scenario_derivations(scenario_hash=child["scenario_hash"])
    assert derivation["operator"] == "ga@example"
    assert derivation["metadata"]["generation"] == 3
    assert [p["role"] for p in derivation["parents"]] == ["primary", "donor", "crossover"]
    lineage = selectors.scenario_lineage(ref=child["scenario_hash"])
    assert {n["hash"] for n in lineage["nodes"] if n["relation"] == "ancestor"} == {
        base["scenario_hash"],
        donor["scenario_hash"],
        mate["scenario_hash"],
    }
    assert len(lineage["edges"]) == 3


@pytest.mark.parametrize(
    ("upserts_key", "removals_key", "label"),
    [
        ("cognition_profile_upserts", "cognition_profile_removals", "p"),
        ("environment_upserts", "environment_removals", "hall"),
    ],
)
def test_fork_conflicting_label_ops_write_nothing(
    base: services.AssembleResult,
    make_workflow: WorkflowFactory,
    upserts_key: str,
    removals_key: str,
    label: str,
) -> None:
    new_ref = (
        inline_profile(make_workflow("Never stored."))
        if upserts_key.startswith("cognition")
        else {"inline": "Never stored."}
    )
    error = expect_error(
        "conflicting_label_ops",
        409,
        lambda: fork(base, **{upserts_key: {label: new_ref}, removals_key: [label]}),
    )
    assert error.details["labels"] == [label]


def test_fork_removing_an_unbound_label_is_unknown_label(
    base: services.AssembleResult, make_workflow: WorkflowFactory
) -> None:
    error = expect_error(
        "unknown_label",
        400,
        lambda: fork(
            base,
            cognition_profile_upserts={"q": inline_profile(make_workflow("Never stored."))},
            environment_removals=["kitchen"],
        ),
    )
    assert error.details["field"] == "changes.environment_removals[0]"


def test_fork_removing_a_profile_an_agent_uses_writes_nothing(
    base: services.AssembleResult, make_workflow: WorkflowFactory
) -> None:
    error = expect_error(
        "unknown_cognition_profile_label",
        400,
        lambda: fork(
            base,
            cognition_profile_upserts={"q": inline_profile(make_workflow("Never stored."))},
            cognition_profile_removals=["p"],
        ),
    )
    assert error.details["field"] == "entities[0].kind.agent.cognition_profile"


def test_fork_removing_an_inhabited_environment_is_rejected(base: services.AssembleResult) -> None:
    expect_error(
        "unknown_environment_label", 400, lambda: fork(base, environment_removals=["room"])
    )


def test_fork_from_unknown_parents(base: services.AssembleResult) -> None:
    expect_error(
        "name_not_found",
        404,
        lambda: services.scenario_fork(data={"primary_parent": {"name": "nope"}, "changes": {}}),
    )
    expect_error(
        "scenario_not_found",
        404,
        lambda: services.scenario_fork(data={"primary_parent": {"hash": DANGLING}, "changes": {}}),
    )
    expect_error(
        "scenario_not_found",
        404,
        lambda: services.scenario_fork(
            data={
                "primary_parent": {"name": "base"},
                "changes": {"description": "never"},
                "additional_parents": [{"hash": DANGLING, "role": "donor"}],
            }
        ),
    )
    expect_error(
        "invalid_reference",
        400,
        lambda: services.scenario_fork(data={"primary_parent": "base", "changes": {}}),
    )


def test_fork_rejects_touched_components_in_metadata(base: services.AssembleResult) -> None:
    expect_error(
        "invalid_input",
        400,
        lambda: services.scenario_fork(
            data={
                "primary_parent": {"name": "base"},
                "changes": {},
                "metadata": {"touched_components": []},
            }
        ),
    )


def test_fork_rejects_a_wrongly_typed_scalar_even_when_it_equals_the_parent(
    base: services.AssembleResult,
) -> None:
    # BUG: 60.0 == 60 in Python, so the fork treats the change as a no-op and never validates
    # it, while assemble rejects the same value with invalid_chronon.
    expect_error("invalid_chronon", 400, lambda: fork(base, chronon_seconds=60.0))


# --- scenario validation: every rule, nothing written ---------------------------------------


def _two_profiles_second_invalid(
    body: dict[str, Any], make_workflow: WorkflowFactory, world_patch_hash: str
) -> None:
    bad = make_workflow("Second.")
    bad["nodes"][0]["final_schema_ref"] = {"inline": {"type": "object", "title": "Not a patch"}}
    body["cognition_profiles"] = {
        "a": inline_profile(make_workflow("First, valid and new.")),
        "b": inline_profile(bad),
    }
    body["entities"] = [{"inline": agent(profile="a")}]


def _too_large(body: dict[str, Any], make_workflow: WorkflowFactory, world_patch_hash: str) -> None:
    # five inline environments of 60 KiB each: every one is valid, together > 256 KiB
    body["environments"] = {
        f"room{i}": {"inline": chr(ord("a") + i) * (60 * 1024)} for i in range(5)
    }
    body["entities"] = [{"inline": agent(environment="room0")}]


Mutator = Callable[[dict[str, Any], WorkflowFactory, str], None]


def _set(**values: Any) -> Mutator:
    def mutate(body: dict[str, Any], make_workflow: WorkflowFactory, world_patch_hash: str) -> None:
        body.update(values)

    return mutate


VALIDATION_CASES: dict[str, tuple[str, Mutator]] = {
    "slug_with_space": ("invalid_slug", _set(scenario_slug="Ant On Plate")),
    "slug_too_long": ("invalid_slug", _set(scenario_slug="a" * 65)),
    "description_empty": ("invalid_description", _set(description="   ")),
    "description_not_string": ("invalid_description", _set(description=["An ant."])),
    "chronon_zero": ("invalid_chronon", _set(chronon_seconds=0)),
    "chronon_above_a_year": ("invalid_chronon", _set(chronon_seconds=31_536_001)),
    "chronon_string": ("invalid_chronon", _set(chronon_seconds="60")),
    "chronon_bool": ("invalid_chronon", _set(chronon_seconds=True)),
    "no_profiles": ("no_cognition_profiles", _set(cognition_profiles={})),
    "no_environments": ("no_environments", _set(environments={})),
    "no_entities": ("no_entities", _set(entities=[])),
    "no_agent": ("no_agent", _set(entities=[{"inline": prop()}])),
    "unknown_environment": (
        "unknown_environment_label",
        _set(entities=[{"inline": agent(environment="kitchen")}]),
    ),
    "unknown_profile": (
        "unknown_cognition_profile_label",
        _set(entities=[{"inline": agent(profile="walker")}]),
    ),
    "duplicate_id_after_normalization": (
        "duplicate_entity_id",
        _set(entities=[{"inline": agent("Ant")}, {"inline": prop("ant", name="Another ant")}]),
    ),
    "too_large": ("scenario_too_large", _too_large),
    "dangling_entity": (
        "unresolved_reference",
        _set(entities=[{"inline": agent()}, {"hash": DANGLING}]),
    ),
    "dangling_profile": (
        "unresolved_reference",
        _set(cognition_profiles={"p": {"hash": DANGLING}}),
    ),
    "dangling_environment": (
        "unresolved_reference",
        _set(environments={"room": {"hash": DANGLING}}),
    ),
    "dangling_workflow": (
        "unresolved_reference",
        _set(cognition_profiles={"p": {"inline": {"workflow": {"hash": DANGLING}}}}),
    ),
    "entity_not_wrapped": ("invalid_reference", _set(entities=[agent()])),
    "both_hash_and_inline": (
        "invalid_reference",
        _set(environments={"room": {"hash": DANGLING, "inline": "A room."}}),
    ),
    "malformed_hash": ("invalid_hash", _set(environments={"room": {"hash": "ABC"}})),
    "invalid_profile_label": ("invalid_label", _set(cognition_profiles={"P!": {"hash": DANGLING}})),
    "invalid_entity_id": ("invalid_entity_id", _set(entities=[{"inline": agent("first ant!")}])),
    "prop_with_profile": (
        "prop_has_profile",
        _set(entities=[{"inline": {**prop(), "kind": {"prop": {"cognition_profile": "p"}}}}]),
    ),
    "invalid_workflow_in_inline_profile": (
        "final_schema_not_world_patch",
        _two_profiles_second_invalid,
    ),
    "invalid_name": ("invalid_name", _set(name="Not A Name")),
    "unknown_field": ("invalid_input", _set(cognition="legacy")),
    "entities_object": ("invalid_input", _set(entities={"ant": {"inline": agent()}})),
}


@pytest.mark.parametrize("case", list(VALIDATION_CASES))
def test_assemble_validation_rejects_and_writes_nothing(
    case: str, make_workflow: WorkflowFactory, world_patch_hash: str
) -> None:
    code, mutate = VALIDATION_CASES[case]
    body = inline_body(make_workflow, name="candidate")
    mutate(body, make_workflow, world_patch_hash)
    error = expect_error(code, 400, lambda: services.scenario_assemble(data=body))
    assert error.message
    assert not ScenarioName.objects.exists()


def test_failing_inline_profile_reports_its_full_path(make_workflow: WorkflowFactory) -> None:
    body = inline_body(make_workflow)
    _two_profiles_second_invalid(body, make_workflow, "")
    error = expect_error(
        "final_schema_not_world_patch", 400, lambda: services.scenario_assemble(data=body)
    )
    assert (
        error.details["field"]
        == "cognition_profiles.b.inline.workflow.inline.nodes[0].final_schema_ref"
    )
    assert not JsonSchema.objects.filter(content__title="Not a patch").exists()
    assert not CognitionWorkflow.objects.exists()


def test_assemble_rejects_a_non_object_body() -> None:
    expect_error("invalid_input", 400, lambda: services.scenario_assemble(data=[1, 2]))


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
