"""World creation and deletion, and turn attempts run in-process.

Attempts are run by calling ``turn_attempt_run`` directly (no worker): enqueue, then run each
attempt id in order. The tests run inside a transaction, so the enqueue's on-commit kick to the
broker never fires.
"""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DatabaseError, ProgrammingError, connection, transaction

from chukwa_core.errors import ChukwaError
from chukwa_core.patching import apply_patch
from chukwa_core.rule_policy import RuleContext, perceived_hash, seed_for
from chukwa_core.world_state import WorldState
from cognition_app.models import SourceInvocation
from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import Scenario, ScenarioName
from scenarios_app.services import scenario_assemble, scenario_name_set
from tests.conftest import HTTP_SOURCE
from worlds_app import selectors
from worlds_app.models import (
    AttemptEvent,
    AttemptStatus,
    DeletedWorld,
    PatchTransition,
    Turn,
    TurnAttempt,
    World,
)
from worlds_app.services import (
    turn_attempt_claim,
    turn_attempt_enqueue,
    turn_attempt_run,
    world_create,
    world_delete,
)

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
ANT_ENTITIES = ["ant", "crumb", "sugar_grain", "sesame_seed"]


# --- helpers -------------------------------------------------------------------------------


def assemble(name: str) -> str:
    return scenario_assemble(data=load_fixture(name))["scenario_hash"]


def fixture_body(fixture: str, **changes: Any) -> dict[str, Any]:
    """The fixture's assembly input without its name/note metadata."""
    body = {k: v for k, v in load_fixture(fixture).items() if k not in ("name", "note")}
    body.update(changes)
    return body


def create(slug: str, scenario: str = "ant_on_plate_rules", **extra: Any) -> World:
    if not ScenarioName.objects.filter(pk=scenario).exists():
        assemble(scenario)
    return world_create(
        data={"slug": slug, "scenario_ref": {"name": scenario}, "start_time": START.isoformat()}
        | extra
    )


def run_turns(slug: str, count: int) -> list[str]:
    attempt_ids = turn_attempt_enqueue(slug=slug, count=count)["attempt_ids"]
    for attempt_id in attempt_ids:
        assert turn_attempt_run(attempt_id=attempt_id, owner="test") == AttemptStatus.COMMITTED
    return attempt_ids


def turn_state(slug: str, number: int) -> dict[str, Any]:
    return Turn.objects.get(world__slug=slug, number=number).state


def entity(state: dict[str, Any], entity_id: str) -> dict[str, Any]:
    (found,) = (e for e in state["entities"] if e["id"] == entity_id)
    return found


def memory(state: dict[str, Any], entity_id: str) -> str:
    return entity(state, entity_id)["kind"]["agent"]["memory"]


def world_rows(slug: str) -> dict[str, int]:
    return {
        "turns": Turn.objects.filter(world__slug=slug).count(),
        "attempts": TurnAttempt.objects.filter(world__slug=slug).count(),
        "events": AttemptEvent.objects.filter(attempt__world__slug=slug).count(),
        "transitions": PatchTransition.objects.filter(world__slug=slug).count(),
    }


# --- create ---------------------------------------------------------------------------------


def test_create_from_name_stores_turn_zero_with_the_scenario_entities() -> None:
    scenario_hash = assemble("ant_on_plate_rules")
    world = world_create(data={"slug": "plate-1", "scenario_ref": {"name": "ant_on_plate_rules"}})
    assert world.scenario_id == scenario_hash
    assert world.label == "ant_on_plate_rules"
    assert world.name == "ant_on_plate_rules #plate-1"
    assert world.chronon_seconds == 60
    assert world.current_turn == 0
    assert world.scenario_ref == {"name": "ant_on_plate_rules", "resolved_hash": scenario_hash}
    turn = Turn.objects.get(world=world)
    assert turn.number == 0
    assert turn.attempt_id is None
    fixture_entities = [e["inline"] for e in load_fixture("ant_on_plate_rules")["entities"]]
    assert turn.state["entities"] == fixture_entities
    assert [e["id"] for e in turn.state["entities"]] == ANT_ENTITIES
    assert list(turn.state["environments"]) == ["kitchen_plate"]
    snapshot = world.scenario_snapshot
    assert snapshot["hash"] == scenario_hash
    assert snapshot["scenario_slug"] == "ant_on_plate_rules"
    workflow = snapshot["cognition_profiles"]["ant"]["workflow"]
    assert workflow["nodes"][0]["type"] == "rule_policy"


def test_create_from_hash() -> None:
    scenario_hash = assemble("ant_on_plate_rules")
    world = world_create(
        data={"slug": "by-hash", "scenario_ref": {"hash": scenario_hash}, "name": "My plate"}
    )
    assert world.scenario_id == scenario_hash
    assert world.scenario_ref == {"hash": scenario_hash}
    assert world.name == "My plate"
    assert world.label == "ant_on_plate_rules"
    assert [e["id"] for e in turn_state("by-hash", 0)["entities"]] == ANT_ENTITIES


def test_create_from_data_assembles_first() -> None:
    world = world_create(
        data={"slug": "by-data", "scenario_ref": {"data": fixture_body("ant_on_plate_rules")}}
    )
    scenario_hash = world.scenario_id
    assert Scenario.objects.filter(pk=scenario_hash).exists()
    assert world.scenario_ref == {"data": "assembled", "resolved_hash": scenario_hash}
    assert not ScenarioName.objects.exists()
    assert [e["id"] for e in turn_state("by-data", 0)["entities"]] == ANT_ENTITIES
    # Content-addressed: the same content assembled by name elsewhere is the same scenario.
    assert assemble("ant_on_plate_rules") == scenario_hash


def test_create_from_data_with_a_new_name_sets_the_name() -> None:
    body = fixture_body("picnic_rules", name="my_picnic", note="for a test")
    world = world_create(data={"slug": "picnic", "scenario_ref": {"data": body}})
    assert ScenarioName.objects.get(pk="my_picnic").scenario_id == world.scenario_id
    assert world.label == "picnic_rules"
    assert world.name == "picnic_rules #picnic"


def test_later_name_change_never_affects_an_existing_world() -> None:
    ant_hash = assemble("ant_on_plate_rules")
    picnic_hash = assemble("picnic_rules")
    world = create("frozen")
    snapshot = copy.deepcopy(world.scenario_snapshot)
    scenario_name_set(name="ant_on_plate_rules", scenario_hash=picnic_hash)
    world.refresh_from_db()
    assert world.scenario_id == ant_hash
    assert world.scenario_snapshot == snapshot
    assert world.label == "ant_on_plate_rules"
    assert selectors.world_get(slug="frozen")["scenario_hash"] == ant_hash
    # The world still runs its own (frozen) scenario.
    run_turns("frozen", 1)
    assert entity(turn_state("frozen", 1), "ant")["state"].startswith("beside the crumb")
    # A new world by that name gets what the name points at now.
    assert create("renamed").scenario_id == picnic_hash


def test_start_time_is_honoured() -> None:
    world = create("timed", start_time="2031-06-07T08:09:10+02:00")
    turn = Turn.objects.get(world=world, number=0)
    assert turn.simulation_time == datetime(2031, 6, 7, 6, 9, 10, tzinfo=UTC)


def test_start_time_defaults_to_creation_time() -> None:
    assemble("ant_on_plate_rules")
    before = datetime.now(UTC)
    world_create(data={"slug": "now", "scenario_ref": {"name": "ant_on_plate_rules"}})
    after = datetime.now(UTC)
    assert before <= Turn.objects.get(world__slug="now").simulation_time <= after


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({"slug": "Bad Slug", "scenario_ref": {"name": "ant_on_plate_rules"}}, "invalid_slug"),
        ({"slug": "w", "scenario_ref": {"name": "nope"}}, "name_not_found"),
        ({"slug": "w", "scenario_ref": {"hash": "f" * 64}}, "scenario_not_found"),
        ({"slug": "w", "scenario_ref": {"hash": "F" * 64}}, "invalid_hash"),
        ({"slug": "w", "scenario_ref": "ant_on_plate_rules"}, "invalid_scenario_ref"),
        ({"slug": "w", "scenario_ref": {"name": "a", "hash": "b"}}, "invalid_scenario_ref"),
        ({"slug": "w", "scenario_ref": {"name": "ant_on_plate_rules"}, "x": 1}, "invalid_input"),
        ({"slug": "w"}, "invalid_input"),
        (
            {"slug": "w", "scenario_ref": {"name": "ant_on_plate_rules"}, "name": ""},
            "invalid_input",
        ),
        (
            {"slug": "w", "scenario_ref": {"name": "ant_on_plate_rules"}, "start_time": "noon"},
            "invalid_start_time",
        ),
        (
            {
                "slug": "w",
                "scenario_ref": {"name": "ant_on_plate_rules"},
                "start_time": "2030-01-01T00:00:00",
            },
            "invalid_start_time",
        ),
    ],
)
def test_bad_create_input_is_rejected_and_writes_nothing(data: dict[str, Any], code: str) -> None:
    assemble("ant_on_plate_rules")
    with pytest.raises(ChukwaError) as caught:
        world_create(data=data)
    assert caught.value.code == code
    assert World.objects.count() == 0
    assert Turn.objects.count() == 0


def test_duplicate_slug_is_a_conflict() -> None:
    create("twice")
    with pytest.raises(ChukwaError) as caught:
        create("twice", "picnic_rules")
    assert caught.value.code == "world_exists"
    assert caught.value.status_code == 409
    assert World.objects.get().label == "ant_on_plate_rules"


def test_unknown_entity_in_a_rule_policy_is_rejected_at_assembly_and_writes_nothing() -> None:
    body = fixture_body("ant_on_plate_rules")
    # Drop the sugar grain the rule policy walks to and eats.
    body["entities"] = [e for e in body["entities"] if e["inline"]["id"] != "sugar_grain"]
    with pytest.raises(ChukwaError) as caught:
        scenario_assemble(data=body)
    assert caught.value.code == "unknown_entity_reference"
    assert caught.value.details["field"].startswith("cognition_profiles.ant.workflow.nodes[0]")
    assert "'sugar_grain'" in caught.value.message
    assert Scenario.objects.count() == 0
    # The same through world creation from data: neither the scenario nor the world exists.
    with pytest.raises(ChukwaError) as caught:
        world_create(data={"slug": "w", "scenario_ref": {"data": body}})
    assert caught.value.code == "unknown_entity_reference"
    assert Scenario.objects.count() == 0
    assert World.objects.count() == 0


def test_unknown_environment_in_a_rule_policy_is_rejected_at_assembly() -> None:
    body = fixture_body("ant_on_plate_rules")
    policy = body["cognition_profiles"]["ant"]["inline"]["workflow"]["inline"]["nodes"][0]
    policy["rules"][-1]["plan"].append(
        {"op": "set_environment_content", "environment_label": "kitchen", "content": "Quiet."}
    )
    with pytest.raises(ChukwaError) as caught:
        scenario_assemble(data=body)
    assert caught.value.code == "unknown_environment_reference"
    assert "'kitchen'" in caught.value.message
    assert Scenario.objects.count() == 0


# --- delete ---------------------------------------------------------------------------------


def test_delete_keeps_a_record_and_removes_turns_and_attempts() -> None:
    world = create("doomed", name="Doomed plate")
    scenario_hash = world.scenario_id
    run_turns("doomed", 2)
    turn_attempt_enqueue(slug="doomed", count=1)  # one still queued
    assert world_rows("doomed")["turns"] == 3
    record = world_delete(slug="doomed", deleted_by="ops")
    assert (record.slug, record.name, record.label) == (
        "doomed",
        "Doomed plate",
        "ant_on_plate_rules",
    )
    assert record.scenario_hash == scenario_hash
    assert record.final_turn == 2
    assert record.deleted_by == "ops"
    assert DeletedWorld.objects.filter(slug="doomed").count() == 1
    assert not World.objects.filter(slug="doomed").exists()
    assert Turn.objects.count() == 0
    assert TurnAttempt.objects.count() == 0
    assert AttemptEvent.objects.count() == 0
    assert PatchTransition.objects.count() == 0
    assert Scenario.objects.filter(pk=scenario_hash).exists()
    with pytest.raises(ChukwaError) as caught:
        world_delete(slug="doomed")
    assert caught.value.code == "world_not_found"


def test_a_world_with_a_running_attempt_cannot_be_deleted() -> None:
    create("busy")
    (attempt_id,) = turn_attempt_enqueue(slug="busy", count=1)["attempt_ids"]
    assert turn_attempt_claim(attempt_id=attempt_id, owner="test") is not None
    with pytest.raises(ChukwaError) as caught:
        world_delete(slug="busy")
    assert caught.value.code == "world_busy"
    assert caught.value.status_code == 409
    assert World.objects.filter(slug="busy").exists()
    assert not DeletedWorld.objects.exists()


def test_deleted_slug_can_be_reused_and_replays_identically() -> None:
    create("replay")
    run_turns("replay", 3)
    first = [Turn.objects.get(world__slug="replay", number=n).state_hash for n in range(4)]
    world_delete(slug="replay")
    create("replay")
    run_turns("replay", 3)
    second = [Turn.objects.get(world__slug="replay", number=n).state_hash for n in range(4)]
    assert first == second
    assert DeletedWorld.objects.filter(slug="replay").count() == 1


# --- turns: ant_on_plate_rules ----------------------------------------------------------------


def test_ant_on_plate_rules_five_turns() -> None:
    create("ant")
    attempt_ids = run_turns("ant", 5)
    world = World.objects.get(slug="ant")
    assert world.current_turn == 5
    states = [turn_state("ant", n) for n in range(6)]
    ant = [entity(s, "ant")["state"] for s in states]
    crumb = [entity(s, "crumb")["state"] for s in states]
    sugar = [entity(s, "sugar_grain")["state"] for s in states]
    assert ant[1] == "beside the crumb, 3cm east of center, still hungry."
    assert crumb[1] == crumb[0]
    assert crumb[2].startswith("eaten")
    assert ant[2].startswith("beside where the crumb was")
    assert sugar[2] == sugar[0]
    assert ant[3] == "beside the sugar grain on the plate's western edge."
    assert sugar[4].startswith("eaten")
    assert ant[4] == "at the plate's western edge, sated."
    assert ant[5] == "resting on the plate, sated."
    # The floating sesame seed is out of reach: never touched, in any turn.
    assert {entity(s, "sesame_seed")["state"] for s in states} == {
        entity(states[0], "sesame_seed")["state"]
    }
    assert not PatchTransition.objects.filter(target_id="sesame_seed").exists()
    # One memory line per turn, appended to what the ant remembered before.
    assert memory(states[0], "ant") == ""
    for number in range(1, 6):
        previous, current = memory(states[number - 1], "ant"), memory(states[number], "ant")
        lines = current.split("\n")
        assert len(lines) == number
        assert lines[-1].startswith(f"Turn {number}: ")
        assert current == "\n".join([*([previous] if previous else []), lines[-1]])
    assert memory(states[5], "ant").split("\n") == [
        "Turn 1: I walked east to the crumb.",
        "Turn 2: I ate the crumb.",
        "Turn 3: I walked west to the sugar grain.",
        "Turn 4: I ate the sugar grain.",
        "Turn 5: I rested.",
    ]
    # Each committed turn advances simulated time by the chronon and names its attempt.
    turns = list(Turn.objects.filter(world=world).order_by("number"))
    assert [t.simulation_time for t in turns] == [
        START + timedelta(seconds=60 * n) for n in range(6)
    ]
    assert [str(t.attempt_id) for t in turns[1:]] == attempt_ids
    matched = [
        e.payload["matched_rule"]
        for e in AttemptEvent.objects.filter(kind="inner_monologue").order_by("attempt__seq", "seq")
    ]
    assert matched == ["approach_crumb", "eat_crumb", "approach_sugar", "eat_sugar", "rest"]


def test_committed_turn_rows_cannot_be_updated() -> None:
    create("immutable")
    run_turns("immutable", 1)
    turn = Turn.objects.get(world__slug="immutable", number=1)
    # The trigger's RAISE EXCEPTION (SQLSTATE P0001) reaches Django as ProgrammingError.
    with pytest.raises(ProgrammingError) as caught, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE worlds_app_turn SET state_hash = %s WHERE id = %s", ["0" * 64, turn.pk]
            )
    assert isinstance(caught.value, DatabaseError)
    assert "is immutable" in str(caught.value)
    with pytest.raises(ProgrammingError), transaction.atomic():
        Turn.objects.filter(pk=turn.pk).update(state={"environments": {}, "entities": []})
    with pytest.raises(ProgrammingError), transaction.atomic():
        Turn.objects.filter(world__slug="immutable", number=0).update(number=7)
    turn.refresh_from_db()
    assert turn.state_hash != "0" * 64
    assert turn.state["entities"]


def test_attempts_run_strictly_in_order() -> None:
    create("ordered")
    first, second = turn_attempt_enqueue(slug="ordered", count=2)["attempt_ids"]
    # The second is not the world's next attempt: running it claims nothing.
    assert turn_attempt_run(attempt_id=second, owner="test") is None
    assert TurnAttempt.objects.get(pk=second).status == AttemptStatus.QUEUED
    assert turn_attempt_run(attempt_id=first, owner="test") == AttemptStatus.COMMITTED
    # Running a finished attempt again claims nothing and changes nothing.
    assert turn_attempt_run(attempt_id=first, owner="test") is None
    assert turn_attempt_run(attempt_id=second, owner="test") == AttemptStatus.COMMITTED
    assert [a.attempted_turn for a in TurnAttempt.objects.order_by("seq")] == [1, 2]
    assert World.objects.get(slug="ordered").current_turn == 2


def test_a_failed_attempt_commits_nothing_and_cancels_the_rest_of_its_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ant_on_plate thinks with an LLM tool loop whose source names CHUKWA_LLM_BASE_URL: unset,
    # the generation fails with a message naming the variable.
    monkeypatch.delenv("CHUKWA_LLM_BASE_URL", raising=False)
    assemble("ant_on_plate")
    world_create(data={"slug": "llm", "scenario_ref": {"name": "ant_on_plate"}})
    first, second = turn_attempt_enqueue(slug="llm", count=2)["attempt_ids"]
    assert turn_attempt_run(attempt_id=first, owner="test") == AttemptStatus.FAILED
    assert World.objects.get(slug="llm").current_turn == 0
    assert Turn.objects.filter(world__slug="llm").count() == 1
    assert not PatchTransition.objects.exists()
    failed = selectors.attempt_get(attempt_id=first)
    assert failed["status"] == "failed"
    assert failed["produced_turn"] is None
    assert failed["failure"]["step"] == "source"
    assert failed["failure"]["subject_id"] == "ant"
    assert "CHUKWA_LLM_BASE_URL" in failed["failure"]["reason"]
    invocation = SourceInvocation.objects.get(attempt_id=first)
    assert (invocation.status, invocation.failure_class) == ("failed", "config")
    assert "CHUKWA_LLM_BASE_URL" in invocation.failure_message
    assert [e["kind"] for e in failed["events"]] == ["attempt_started", "attempt_failed"]
    cancelled = selectors.attempt_get(attempt_id=second)
    assert cancelled["status"] == "cancelled"
    assert [e["kind"] for e in cancelled["events"]] == ["attempt_cancelled"]
    assert turn_attempt_run(attempt_id=second, owner="test") is None


def test_ambient_sources_are_never_silently_skipped() -> None:
    # Ambient sources run because the workflow says so, and a failed call fails the
    # attempt before commit. This kernel has no source layer yet (it fails LLM nodes loudly),
    # but it ignores ambient_sources altogether: the rule policy runs with an empty ambient
    # tree, the ambient condition is silently false, and the turn commits.
    # BUG (worlds_app/services/attempts.py::turn_attempt_execute, ctx ambient={}).
    body = fixture_body("ant_on_plate_rules")
    workflow = body["cognition_profiles"]["ant"]["inline"]["workflow"]["inline"]
    workflow["ambient_sources"] = [
        {
            "id": "pa",
            "source_ref": {"inline": HTTP_SOURCE},
            "run": "once_per_turn",
            "scope": "world",
            "visible_to": "all_subjects",
            "request_template": {"turn": {"$from": "/world/attempted_turn"}},
            "inject_as": "/ambient/pa",
        }
    ]
    workflow["nodes"][0]["rules"].insert(
        0,
        {
            "id": "listen",
            "when": [{"kind": "ambient_present", "pointer": "/ambient/pa"}],
            "intent": "listen to the announcement",
            "plan": [],
            "memory": "I heard the PA.",
            "narration": "The ant listens.",
        },
    )
    world_create(data={"slug": "ambient", "scenario_ref": {"data": body}})
    (attempt_id,) = turn_attempt_enqueue(slug="ambient", count=1)["attempt_ids"]
    status = turn_attempt_run(attempt_id=attempt_id, owner="test")
    assert (status, World.objects.get(slug="ambient").current_turn) == (AttemptStatus.FAILED, 0)


# --- turns: picnic_rules (several agents in one turn) ---------------------------------------


def test_picnic_three_agents_three_patches_in_one_turn() -> None:
    create("picnic", "picnic_rules")
    (attempt_id,) = run_turns("picnic", 1)
    turn = selectors.turn_get(slug="picnic", number=1)
    # Subjects run in id order, each patch numbered in turn.
    assert [(p["subject_id"], p["patch_seq"]) for p in turn["patches"]] == [
        ("ant_a", 1),
        ("ant_b", 2),
        ("beetle", 3),
    ]
    assert turn["patches"][0]["narration"] == "Ant A hurries to the crumb and stands over it."
    # ant_b runs on the working world that already holds ant_a's claim, and reacts to it.
    assert turn["patches"][1]["narration"] == (
        "Ant B finds the crumb taken and goes to the jam drop instead."
    )
    monologues = {
        e.subject_id: e.payload
        for e in AttemptEvent.objects.filter(attempt_id=attempt_id, kind="inner_monologue")
    }
    assert monologues["ant_a"]["matched_rule"] == "take_crumb_path"
    assert monologues["ant_b"]["matched_rule"] == "go_for_jam"
    # The monologue keeps the perceived ids and a hash of what they were: ant_b perceived the
    # working world after ant_a's patch (the crumb claimed), not the turn-start world.
    assert "crumb" in monologues["ant_b"]["perceived"]
    after_first = WorldState.from_snapshot(selectors.turn_get(slug="picnic", number=0)["state"])
    apply_patch(turn["patches"][0]["patch"], after_first)
    assert after_first.entities["crumb"]["state"] == "a bread crumb, claimed by Ant A."
    seen = after_first.co_located("ant_b")
    assert monologues["ant_b"]["perceived"] == [e["id"] for e in seen]
    assert monologues["ant_b"]["perceived_hash"] == perceived_hash(seen)
    assert monologues["ant_b"]["rules_considered"][1] == {
        "rule": "take_crumb_path",
        "conditions_held": False,
        "failed_condition": 1,
    }
    # Per-target transitions: before = the state just before that patch.
    crumb = [t for t in turn["transitions"] if t["target_id"] == "crumb"]
    assert [(t["patch_seq"], t["subject_id"], t["before"], t["after"]) for t in crumb] == [
        (
            1,
            "ant_a",
            "a bread crumb in the middle of the plate.",
            "a bread crumb, claimed by Ant A.",
        )
    ]
    jam = [t for t in turn["transitions"] if t["target_id"] == "jam_drop"]
    assert [(t["patch_seq"], t["after"]) for t in jam] == [(2, "half licked away by Ant B.")]
    # The beetle's probabilistic rule used the documented seed.
    beetle = monologues["beetle"]
    context = RuleContext("picnic", 0, 1, "", {})
    expected_draw = random.Random(seed_for(context, "beetle", "decide")).random()
    assert beetle["rules_considered"][0]["draw"] == expected_draw
    assert beetle["matched_rule"] == ("startle" if expected_draw < 0.5 else "doze")
    # Nothing in the napkin changed; every patch's memory line landed.
    state = turn_state("picnic", 1)
    assert entity(state, "crumpled_wrapper") == entity(turn_state("picnic", 0), "crumpled_wrapper")
    assert {a: memory(state, a).count("\n") + 1 for a in ("ant_a", "ant_b", "beetle")} == {
        "ant_a": 1,
        "ant_b": 1,
        "beetle": 1,
    }
    assert Turn.objects.get(world__slug="picnic", number=1).simulation_time == START + timedelta(
        seconds=30
    )


def test_picnic_second_turn_ant_a_eats_its_claim() -> None:
    create("picnic2", "picnic_rules")
    run_turns("picnic2", 2)
    turn = selectors.turn_get(slug="picnic2", number=2)
    crumb = [t for t in turn["transitions"] if t["target_id"] == "crumb"]
    assert [(t["subject_id"], t["before"], t["after"]) for t in crumb] == [
        ("ant_a", "a bread crumb, claimed by Ant A.", "eaten by Ant A.")
    ]


def test_two_patches_on_one_target_in_one_turn_chain() -> None:
    body = fixture_body("picnic_rules")
    forager = body["cognition_profiles"]["forager"]["inline"]["workflow"]["inline"]
    forager["nodes"][0]["rules"] = [
        {
            "id": "ring",
            "when": [],
            "intent": "ring the bell",
            "plan": [
                {
                    "op": "set_entity_state",
                    "entity_id": "crumb",
                    "state": "nudged by {{subject.name}}",
                }
            ],
            "memory": "I nudged the crumb.",
            "narration": "{{subject.name}} nudges the crumb.",
        }
    ]
    world_create(data={"slug": "nudge", "scenario_ref": {"data": body}})
    run_turns("nudge", 1)
    crumb = list(
        PatchTransition.objects.filter(world__slug="nudge", target_id="crumb").order_by(
            "patch_seq", "effect_index"
        )
    )
    assert [(t.patch_seq, t.subject_id, t.before, t.after) for t in crumb] == [
        (1, "ant_a", "a bread crumb in the middle of the plate.", "nudged by Ant A"),
        (2, "ant_b", "nudged by Ant A", "nudged by Ant B"),
    ]
    assert entity(turn_state("nudge", 1), "crumb")["state"] == "nudged by Ant B"


# --- read shapes ----------------------------------------------------------------------------


def test_turn_get_shape() -> None:
    create("shape")
    (attempt_id,) = run_turns("shape", 1)
    zero = selectors.turn_get(slug="shape", number=0)
    assert zero["patches"] == []
    assert zero["transitions"] == []
    assert zero["attempt_id"] is None
    turn = selectors.turn_get(slug="shape", number=1)
    assert set(turn) == {
        "world",
        "number",
        "simulation_time",
        "state",
        "state_hash",
        "attempt_id",
        "created_at",
        "patches",
        "transitions",
        "cost",
    }
    assert (turn["world"], turn["number"], str(turn["attempt_id"])) == ("shape", 1, attempt_id)
    # a rule policy calls no model: nothing spent, and no cost to know
    assert (turn["cost"]["calls"], turn["cost"]["total"]) == (0, None)
    assert turn["simulation_time"] == START + timedelta(seconds=60)
    assert turn["state"] == turn_state("shape", 1)
    (patch,) = turn["patches"]
    assert patch["subject_id"] == "ant"
    assert patch["patch_seq"] == 1
    assert patch["narration"] == "The ant walks east across the plate to the crumb."
    assert patch["patch"]["effects"][-1] == {
        "op": "append_entity_memory",
        "entity_id": "ant",
        "content": "Turn 1: I walked east to the crumb.",
    }
    assert [(t["op"], t["target_kind"], t["target_id"]) for t in turn["transitions"]] == [
        ("set_entity_state", "entity_state", "ant"),
        ("append_entity_memory", "entity_memory", "ant"),
    ]
    first = turn["transitions"][0]
    assert first["before"] == "at the center of the plate, feeling hungry."
    assert (first["node_id"], first["patch_seq"], first["effect_index"]) == ("decide", 1, 0)
    assert (
        first["workflow_hash"]
        == World.objects.get(slug="shape").scenario_snapshot["cognition_profiles"]["ant"][
            "workflow_hash"
        ]
    )
    with pytest.raises(ChukwaError) as caught:
        selectors.turn_get(slug="shape", number=2)
    assert caught.value.code == "turn_not_found"
    assert caught.value.status_code == 404


def test_world_diff_shape() -> None:
    create("diff")
    run_turns("diff", 5)
    diff = selectors.world_diff(slug="diff", from_turn=0, to_turn=5)
    assert (diff["world"], diff["from"], diff["to"]) == ("diff", 0, 5)
    assert [(c["target_kind"], c["target_id"]) for c in diff["changes"]] == [
        ("entity_state", "ant"),
        ("entity_memory", "ant"),
        ("entity_state", "crumb"),
        ("entity_state", "sugar_grain"),
    ]
    ant_state = diff["changes"][0]
    assert ant_state["before"] == "at the center of the plate, feeling hungry."
    assert ant_state["after"] == "resting on the plate, sated."
    assert diff["changes"][1]["before"] == ""
    assert diff["changes"][1]["after"].count("\n") == 4
    assert selectors.world_diff(slug="diff", from_turn=3, to_turn=3)["changes"] == []
    with pytest.raises(ChukwaError) as caught:
        selectors.world_diff(slug="diff", from_turn=0, to_turn=6)
    assert caught.value.code == "turn_not_found"
    assert caught.value.details["field"] == "to"


def test_attempt_get_shape() -> None:
    world = create("attempt")
    (attempt_id,) = run_turns("attempt", 1)
    attempt = selectors.attempt_get(attempt_id=attempt_id)
    assert attempt["id"] == attempt_id
    assert attempt["world"] == "attempt"
    assert attempt["status"] == "committed"
    assert (attempt["seq"], attempt["batch_index"], attempt["batch_size"]) == (1, 0, 1)
    assert (attempt["attempted_turn"], attempt["produced_turn"]) == (1, 1)
    assert attempt["lease_owner"] == "test"
    assert attempt["failure"] is None
    assert attempt["duration_ms"] is not None
    assert attempt["queued_at"] <= attempt["started_at"] <= attempt["ended_at"]
    events = attempt["events"]
    assert [e["kind"] for e in events] == [
        "attempt_started",
        "inner_monologue",
        "world_patch_applied",
        "turn_committed",
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    monologue = events[1]
    workflow_hash = world.scenario_snapshot["cognition_profiles"]["ant"]["workflow_hash"]
    assert (monologue["subject_id"], monologue["node_id"]) == ("ant", "decide")
    assert monologue["workflow_hash"] == workflow_hash
    assert len(monologue["content_hash"]) == 64
    assert monologue["payload"]["matched_rule"] == "approach_crumb"
    applied = events[2]
    assert applied["patch_seq"] == 1
    assert applied["payload"]["patch"]["narration"].startswith("The ant walks east")
    # The per-effect before/after lives in the transition rows, not in the event.
    assert applied["payload"]["transition_count"] == 2
    assert PatchTransition.objects.filter(attempt_id=attempt_id, patch_seq=1).count() == 2
    assert events[3]["payload"] == {
        "turn": 1,
        "state_hash": Turn.objects.get(world=world, number=1).state_hash,
    }
    queued_id = turn_attempt_enqueue(slug="attempt", count=1)["attempt_ids"][0]
    queued = selectors.attempt_get(attempt_id=queued_id)
    assert (queued["status"], queued["attempted_turn"], queued["events"]) == ("queued", None, [])
    assert queued["seq"] == 2


def test_world_get_shape() -> None:
    create("detail")
    run_turns("detail", 2)
    detail = selectors.world_get(slug="detail")
    assert detail["current_turn"] == 2
    assert detail["state"] == turn_state("detail", 2)
    assert detail["simulation_time"] == START + timedelta(seconds=120)
    assert [a["status"] for a in detail["recent_attempts"]] == ["committed", "committed"]
    assert [a["seq"] for a in detail["recent_attempts"]] == [2, 1]
    assert (detail["attempts_queued"], detail["attempts_running"]) == (0, 0)


@pytest.mark.parametrize("count", [0, 101, -1, "3", True, 2.0, None])
def test_enqueue_rejects_bad_counts(count: Any) -> None:
    create("counts")
    with pytest.raises(ChukwaError) as caught:
        turn_attempt_enqueue(slug="counts", count=count)
    assert caught.value.code == "invalid_count"
    assert not TurnAttempt.objects.exists()
