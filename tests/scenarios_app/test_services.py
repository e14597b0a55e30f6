"""Scenario store services and selectors, called directly (seed 001's smoke).

Every write test counts the rows of every store table before and after, so "writes nothing" and
"exactly one new row" are checked against the database, not against the services' own reports.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from chukwa_core import hashing
from chukwa_core.errors import ChukwaError
from scenarios_app import selectors, services
from scenarios_app.models import (
    CognitionWorkflow,
    Entity,
    Environment,
    JsonSchema,
    Scenario,
    ScenarioDerivation,
    ScenarioName,
    ScenarioNameHistory,
    WorkflowComponentRef,
)
from tests.conftest import LLM_SOURCE
from tests.scenarios_app.store_helpers import (
    ARGS_SCHEMA,
    DANGLING,
    ZERO_NEW,
    WorkflowFactory,
    agent,
    expect_error,
    inline_body,
    inline_profile,
    new_components,
    prop,
    row_counts,
    row_delta,
)

pytestmark = pytest.mark.django_db


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
