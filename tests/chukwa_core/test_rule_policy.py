"""The rule_policy node: deterministic, LLM-free cognition. Pure: no database.

Evaluation is checked on a hand-built world; validation through the store's workflow validator
(``validate_workflow``), where the rule policy registers itself as a node type.
"""

from __future__ import annotations

import copy
import hashlib
import random
from typing import Any

import pytest

from chukwa_core.errors import ChukwaError
from chukwa_core.node_types import NODE_TYPES
from chukwa_core.patching import apply_patch, validate_patch
from chukwa_core.rule_policy import (
    RuleContext,
    RuleOutcome,
    evaluate_rule_policy,
    monologue_hash,
    perceived_hash,
    rule_policy_references,
    seed_for,
    validate_rule_policy_node,
)
from chukwa_core.workflow_validation import validate_workflow
from chukwa_core.world_state import WorldState

WORLD_PATCH = "a" * 64


def make_world() -> WorldState:
    entities = [
        {
            "id": "ant",
            "name": "Ant",
            "state": "At the Centre of the plate, HUNGRY.",
            "environment": "kitchen_plate",
            "kind": {
                "agent": {
                    "goal": "eat",
                    "memory": "Turn 1: I saw a Crumb.",
                    "cognition_profile": "a",
                }
            },
        },
        {
            "id": "crumb",
            "name": "Crumb",
            "state": "a bread crumb 3cm east of centre",
            "environment": "kitchen_plate",
            "kind": "prop",
        },
        {
            "id": "beetle",
            "name": "Beetle",
            "state": "asleep",
            "environment": "kitchen_plate",
            "kind": {"agent": {"goal": "sleep", "memory": "", "cognition_profile": "a"}},
        },
        {
            "id": "honey",
            "name": "Honey",
            "state": "a tasty drop of honey",
            "environment": "pantry",
            "kind": "prop",
        },
    ]
    return WorldState(
        environments={"kitchen_plate": "A white plate.", "pantry": "A shelf."},
        entities={e["id"]: e for e in entities},
    )


def ctx(
    *, slug: str = "plate", attempted_turn: int = 4, ambient: dict[str, Any] | None = None
) -> RuleContext:
    return RuleContext(
        world_slug=slug,
        turn=attempted_turn - 1,
        attempted_turn=attempted_turn,
        simulation_time="2030-01-01T00:04:00+00:00",
        ambient=ambient or {},
    )


def rule(rule_id: str, when: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rule_id,
        "when": when or [],
        "intent": f"do {rule_id}",
        "plan": [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": rule_id}],
        "memory": f"I did {rule_id}.",
        "narration": f"{rule_id} happens.",
    }
    body.update(extra)
    return body


def node(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"id": "decide", "type": "rule_policy", "rules": list(rules)}


def evaluate(
    policy: dict[str, Any], world: WorldState | None = None, **context: Any
) -> RuleOutcome:
    return evaluate_rule_policy(policy, world or make_world(), "ant", ctx(**context))


def holds(condition: dict[str, Any], world: WorldState | None = None, **context: Any) -> bool:
    outcome = evaluate(node(rule("test", [condition]), rule("fallback")), world, **context)
    return outcome.rule_id == "test"


MAYBE = node(rule("maybe", probability=0.5), rule("otherwise"))


def draws(outcome: RuleOutcome) -> list[float]:
    return [r["draw"] for r in outcome.monologue["rules_considered"] if "draw" in r]


# --- determinism and the seeded RNG ---------------------------------------------------------


def test_same_inputs_give_identical_patch_monologue_and_hash() -> None:
    policy = node(
        rule("maybe_a", [{"kind": "entity_perceived", "entity_id": "crumb"}], probability=0.3),
        rule("maybe_b", probability=0.6),
        rule("fallback"),
    )
    first = evaluate(copy.deepcopy(policy), make_world(), ambient={"weather": {"t": 3}})
    random.seed(1)  # global randomness must play no part
    random.random()
    second = evaluate(copy.deepcopy(policy), make_world(), ambient={"weather": {"t": 3}})
    assert first == second
    assert first.patch == second.patch
    assert first.monologue == second.monologue
    assert first.content_hash == second.content_hash == monologue_hash(first.monologue)


def test_seed_is_derived_from_slug_attempted_turn_subject_and_node() -> None:
    material = b"plate\x1f4\x1fant\x1fdecide"
    expected = int.from_bytes(hashlib.sha256(material).digest()[:8], "big")
    assert seed_for(ctx(), "ant", "decide") == expected
    assert evaluate(MAYBE).monologue["seed"] == format(expected, "016x")
    assert draws(evaluate(MAYBE)) == [random.Random(expected).random()]
    # The committed turn number is not part of the seed; the attempted turn is.
    shifted = RuleContext("plate", 99, 4, "later", {"x": 1})
    assert seed_for(shifted, "ant", "decide") == expected
    others = {
        seed_for(ctx(attempted_turn=5), "ant", "decide"),
        seed_for(ctx(slug="plate2"), "ant", "decide"),
        seed_for(ctx(), "beetle", "decide"),
        seed_for(ctx(), "ant", "decide2"),
    }
    assert expected not in others
    assert len(others) == 4


def test_same_slug_turn_subject_and_node_give_the_same_draws() -> None:
    for turn in range(1, 6):
        assert draws(evaluate(MAYBE, attempted_turn=turn)) == draws(
            evaluate(MAYBE, attempted_turn=turn)
        )


def test_another_attempted_turn_changes_the_draw_and_can_change_the_outcome() -> None:
    baseline = evaluate(MAYBE, attempted_turn=1)
    outcomes = {turn: evaluate(MAYBE, attempted_turn=turn) for turn in range(2, 12)}
    assert all(draws(o) != draws(baseline) for o in outcomes.values())
    flipped = [t for t, o in outcomes.items() if o.rule_id != baseline.rule_id]
    assert flipped, "over ten turns a p=0.5 rule should fire on some and not on others"
    turn = flipped[0]
    assert outcomes[turn].patch != baseline.patch


def test_another_slug_changes_the_draw_and_can_change_the_outcome() -> None:
    baseline = evaluate(MAYBE, slug="plate")
    outcomes = {slug: evaluate(MAYBE, slug=slug) for slug in (f"plate-{i}" for i in range(10))}
    assert all(draws(o) != draws(baseline) for o in outcomes.values())
    assert any(o.rule_id != baseline.rule_id for o in outcomes.values())


def test_fired_is_draw_below_probability() -> None:
    for turn in range(1, 21):
        (entry, *rest) = evaluate(MAYBE, attempted_turn=turn).monologue["rules_considered"]
        assert entry["probability"] == 0.5
        assert entry["fired"] is (entry["draw"] < 0.5)
        assert 0 <= entry["draw"] < 1
        # A fired rule ends the table; a missed draw falls through to the fallback.
        assert [r["rule"] for r in rest] == ([] if entry["fired"] else ["otherwise"])


def test_only_rules_whose_conditions_hold_consume_draws() -> None:
    gated = node(
        rule("gated", [{"kind": "entity_perceived", "entity_id": "nobody"}], probability=0.9),
        rule("maybe", probability=0.5),
        rule("otherwise"),
    )
    # The draw for "maybe" is the RNG's first, exactly as if "gated" were absent.
    assert draws(evaluate(gated)) == draws(evaluate(MAYBE))
    considered = evaluate(gated).monologue["rules_considered"][0]
    assert considered == {"rule": "gated", "conditions_held": False, "failed_condition": 0}


# --- intent: the decision table ---------------------------------------------------------------


def test_first_matching_rule_wins() -> None:
    policy = node(
        rule("no", [{"kind": "subject_state_contains", "text": "asleep"}]),
        rule("first", [{"kind": "subject_state_contains", "text": "hungry"}]),
        rule("second", [{"kind": "subject_state_contains", "text": "hungry"}]),
        rule("fallback"),
    )
    outcome = evaluate(policy)
    assert outcome.rule_id == "first"
    assert outcome.monologue["matched_rule"] == "first"
    assert [r["rule"] for r in outcome.monologue["rules_considered"]] == ["no", "first"]
    assert outcome.patch["effects"][0] == {
        "op": "set_entity_state",
        "entity_id": "ant",
        "state": "first",
    }


def test_all_conditions_of_a_rule_must_hold() -> None:
    policy = node(
        rule(
            "both",
            [
                {"kind": "subject_state_contains", "text": "hungry"},
                {"kind": "entity_state_contains", "entity_id": "crumb", "text": "west"},
            ],
        ),
        rule("fallback"),
    )
    outcome = evaluate(policy)
    assert outcome.rule_id == "fallback"
    assert outcome.monologue["rules_considered"][0]["failed_condition"] == 1


def test_entity_conditions_only_see_co_located_entities() -> None:
    # The honey is tasty, but it is in the pantry: the ant on the plate cannot perceive it.
    assert holds({"kind": "entity_perceived", "entity_id": "crumb"})
    assert holds({"kind": "entity_perceived", "entity_id": "beetle"})
    assert not holds({"kind": "entity_perceived", "entity_id": "honey"})
    assert holds({"kind": "entity_not_perceived", "entity_id": "honey"})
    assert not holds({"kind": "entity_state_contains", "entity_id": "honey", "text": "tasty"})
    assert not holds({"kind": "entity_state_not_contains", "entity_id": "honey", "text": "x"})
    # The subject does not perceive itself.
    assert not holds({"kind": "entity_perceived", "entity_id": "ant"})
    world = make_world()
    world.entities["honey"]["environment"] = "kitchen_plate"
    assert holds({"kind": "entity_state_contains", "entity_id": "honey", "text": "tasty"}, world)


@pytest.mark.parametrize(
    "condition",
    [
        {"kind": "subject_state_contains", "text": "centre of the plate, hungry"},
        {"kind": "subject_state_contains", "text": "AT THE CENTRE"},
        {"kind": "subject_memory_contains", "text": "i saw a crumb"},
        {"kind": "entity_state_contains", "entity_id": "crumb", "text": "BREAD Crumb"},
        {"kind": "subject_state_not_contains", "text": "asleep"},
        {"kind": "subject_memory_not_contains", "text": "honey"},
        {"kind": "entity_state_not_contains", "entity_id": "crumb", "text": "EATEN"},
        {"kind": "ambient_contains", "pointer": "/ambient/pa/text", "text": "CLOSING"},
    ],
)
def test_contains_conditions_are_case_insensitive(condition: dict[str, Any]) -> None:
    assert holds(condition, ambient={"pa": {"text": "The park is Closing soon."}})


@pytest.mark.parametrize(
    "condition",
    [
        {"kind": "subject_state_not_contains", "text": "Hungry"},
        {"kind": "subject_memory_not_contains", "text": "CRUMB"},
        {"kind": "entity_state_not_contains", "entity_id": "crumb", "text": "Bread"},
    ],
)
def test_not_contains_conditions_are_case_insensitive(condition: dict[str, Any]) -> None:
    assert not holds(condition)


def test_ambient_conditions() -> None:
    ambient = {"weather": {"temperature_c": 12, "sky": "Grey"}, "pa": {"announcements": []}}
    assert holds(
        {"kind": "ambient_present", "pointer": "/ambient/pa/announcements"}, ambient=ambient
    )
    assert not holds({"kind": "ambient_present", "pointer": "/ambient/phone"}, ambient=ambient)
    assert holds(
        {"kind": "ambient_equals", "pointer": "/ambient/weather/temperature_c", "value": 12},
        ambient=ambient,
    )
    assert not holds(
        {"kind": "ambient_equals", "pointer": "/ambient/weather/temperature_c", "value": "12"},
        ambient=ambient,
    )
    assert holds(
        {"kind": "ambient_contains", "pointer": "/ambient/weather/sky", "text": "grey"},
        ambient=ambient,
    )
    # ambient_contains only matches text: a number never "contains" its digits.
    assert not holds(
        {"kind": "ambient_contains", "pointer": "/ambient/weather/temperature_c", "text": "12"},
        ambient=ambient,
    )


def test_ambient_equals_compares_json_values_not_python_equality() -> None:
    # BUG (rule_policy._holds): `value == cond["value"]` is Python equality, where True == 1,
    # so an authored `"value": true` also matches a source that answered 1 (and vice versa).
    # JSON true and 1 are different values.
    pairs = [(1, True), (True, 1), (0, False), ([1, 0], [True, False]), ({"o": 1}, {"o": True})]
    wrongly_equal = [
        (ambient_value, condition_value)
        for ambient_value, condition_value in pairs
        if holds(
            {"kind": "ambient_equals", "pointer": "/ambient/pa/open", "value": condition_value},
            ambient={"pa": {"open": ambient_value}},
        )
    ]
    assert wrongly_equal == []


def test_ambient_equals_treats_equal_json_numbers_as_equal() -> None:
    condition = {"kind": "ambient_equals", "pointer": "/ambient/weather/t", "value": 12}
    assert holds(condition, ambient={"weather": {"t": 12.0}})


# --- plan, memory, templates, monologue -------------------------------------------------------


def test_memory_line_is_appended_as_the_last_effect() -> None:
    policy = node(
        rule(
            "eat",
            plan=[
                {"op": "set_entity_state", "entity_id": "crumb", "state": "eaten"},
                {"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "fed"},
            ],
            memory="Turn {{world.attempted_turn}}: I ate.",
        )
    )
    effects = evaluate(policy).patch["effects"]
    assert [e["op"] for e in effects] == [
        "set_entity_state",
        "set_entity_state",
        "append_entity_memory",
    ]
    assert effects[-1] == {
        "op": "append_entity_memory",
        "entity_id": "ant",
        "content": "Turn 4: I ate.",
    }


def test_templates_are_rendered() -> None:
    policy = node(
        rule(
            "greet",
            intent="{{subject.name}} wants to greet on turn {{world.attempted_turn}}",
            plan=[
                {
                    "op": "set_entity_state",
                    "entity_id": "{{subject.id}}",
                    "state": "{{subject.name}} ({{subject.id}}) greeted by rule {{rule.id}}",
                },
                {
                    "op": "set_environment_content",
                    "environment_label": "{{subject.environment}}",
                    "content": "{{subject.environment}} after turn {{world.turn}} at "
                    "{{world.simulation_time}}",
                },
                {
                    "op": "append_entity_memory",
                    "entity_id": "beetle",
                    "content": "{{subject.id}} waved.",
                },
            ],
            memory="Turn {{world.attempted_turn}}: {{rule.id}}.",
            narration="{{subject.name}} greets everyone.",
        )
    )
    outcome = evaluate(policy)
    assert outcome.patch == {
        "narration": "Ant greets everyone.",
        "effects": [
            {
                "op": "set_entity_state",
                "entity_id": "ant",
                "state": "Ant (ant) greeted by rule greet",
            },
            {
                "op": "set_environment_content",
                "environment_label": "kitchen_plate",
                "content": "kitchen_plate after turn 3 at 2030-01-01T00:04:00+00:00",
            },
            {"op": "append_entity_memory", "entity_id": "beetle", "content": "ant waved."},
            {"op": "append_entity_memory", "entity_id": "ant", "content": "Turn 4: greet."},
        ],
    }
    assert outcome.monologue["intent"] == "Ant wants to greet on turn 4"
    assert outcome.monologue["memory"] == "Turn 4: greet."
    assert outcome.monologue["plan"] == outcome.patch["effects"]


def test_the_policy_is_not_changed_by_evaluation() -> None:
    policy = node(rule("greet", memory="{{subject.id}}"), rule("fallback"))
    pristine = copy.deepcopy(policy)
    evaluate(policy)
    assert policy == pristine


def test_the_patch_is_an_ordinary_valid_world_patch() -> None:
    world = make_world()
    policy = node(
        rule(
            "eat",
            plan=[
                {
                    "op": "set_entity_state",
                    "entity_id": "crumb",
                    "state": "eaten by {{subject.name}}",
                }
            ],
        )
    )
    outcome = evaluate_rule_policy(policy, world, "ant", ctx())
    validate_patch(outcome.patch, world)
    apply_patch(outcome.patch, world)
    assert world.entities["crumb"]["state"] == "eaten by Ant"
    assert world.entities["ant"]["kind"]["agent"]["memory"] == "Turn 1: I saw a Crumb.\nI did eat."


def test_monologue_records_perception_rules_draws_and_the_match() -> None:
    policy = node(
        rule("sleepy", [{"kind": "subject_state_contains", "text": "asleep"}]),
        rule(
            "crumb_west",
            [
                {"kind": "entity_perceived", "entity_id": "crumb"},
                {"kind": "entity_state_contains", "entity_id": "crumb", "text": "west"},
            ],
        ),
        rule("maybe", [{"kind": "entity_perceived", "entity_id": "crumb"}], probability=0.5),
        rule("fallback"),
    )
    ambient = {"weather": {"sky": "grey"}}
    outcome = evaluate(policy, ambient=ambient)
    mono = outcome.monologue
    assert mono["subject_id"] == "ant"
    assert mono["node_id"] == "decide"
    # The perceived entities' ids, and a hash of their ids, names and states (no copies).
    assert mono["perceived"] == ["crumb", "beetle"]
    assert mono["perceived_hash"] == perceived_hash(
        [
            {"id": "crumb", "name": "Crumb", "state": "a bread crumb 3cm east of centre"},
            {"id": "beetle", "name": "Beetle", "state": "asleep"},
        ]
    )
    assert mono["ambient"] == ambient
    considered = mono["rules_considered"]
    assert considered[0] == {"rule": "sleepy", "conditions_held": False, "failed_condition": 0}
    assert considered[1] == {"rule": "crumb_west", "conditions_held": False, "failed_condition": 1}
    maybe = considered[2]
    assert maybe["rule"] == "maybe"
    assert maybe["conditions_held"] is True
    assert set(maybe) == {"rule", "conditions_held", "probability", "draw", "fired"}
    expected_rule = "maybe" if maybe["fired"] else "fallback"
    assert mono["matched_rule"] == outcome.rule_id == expected_rule
    assert [r["rule"] for r in considered] == (
        ["sleepy", "crumb_west", "maybe"] + ([] if maybe["fired"] else ["fallback"])
    )
    assert mono["seed"] == format(seed_for(ctx(), "ant", "decide"), "016x")
    assert outcome.content_hash == monologue_hash(mono)


def test_different_world_state_changes_the_content_hash() -> None:
    world = make_world()
    world.entities["beetle"]["state"] = "awake"
    policy = node(rule("fallback"))
    assert evaluate(policy, world).patch == evaluate(policy).patch
    assert evaluate(policy, world).content_hash != evaluate(policy).content_hash


# --- validation through the workflow validator ----------------------------------------------


def workflow(policy: dict[str, Any], apply_from: str = "decide.final") -> dict[str, Any]:
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [policy],
        "apply": {"from": apply_from},
    }


def validate(policy: dict[str, Any], apply_from: str = "decide.final") -> None:
    validate_workflow(workflow(policy, apply_from), lookup={}, world_patch_hash=WORLD_PATCH)


def rejected(policy: dict[str, Any], apply_from: str = "decide.final") -> ChukwaError:
    with pytest.raises(ChukwaError) as caught:
        validate(policy, apply_from)
    assert caught.value.status_code == 400
    assert caught.value.message.startswith(caught.value.details["field"])
    return caught.value


FULL_POLICY = node(
    rule(
        "eat",
        [
            {"kind": "subject_state_contains", "text": "beside the crumb"},
            {"kind": "subject_memory_not_contains", "text": "ate"},
            {"kind": "entity_state_not_contains", "entity_id": "crumb", "text": "eaten"},
            {"kind": "ambient_equals", "pointer": "/ambient/weather/sky", "value": "grey"},
            {"kind": "ambient_present", "pointer": "/ambient/pa"},
        ],
        plan=[
            {"op": "set_entity_state", "entity_id": "crumb", "state": "eaten by {{subject.name}}"},
            {
                "op": "set_environment_content",
                "environment_label": "{{subject.environment}}",
                "content": "Crumbs at {{world.simulation_time}}.",
            },
            {"op": "append_entity_memory", "entity_id": "{{subject.id}}", "content": "{{rule.id}}"},
        ],
        probability=1,
    ),
    rule("fallback"),
)


def test_rule_policy_is_a_registered_node_type() -> None:
    assert NODE_TYPES["rule_policy"].validate is validate_rule_policy_node
    assert NODE_TYPES["rule_policy"].produces_patch


def test_a_complete_policy_is_valid() -> None:
    validate(FULL_POLICY)


def test_unknown_condition_kind() -> None:
    error = rejected(node(rule("r", [{"kind": "subject_is_happy"}]), rule("fallback")))
    assert error.code == "unknown_condition_kind"
    assert error.details["field"] == "nodes[0].rules[0].when[0].kind"
    assert "subject_state_contains" in error.message


@pytest.mark.parametrize(
    ("condition", "field"),
    [
        ({"kind": "subject_state_contains"}, "nodes[0].rules[0].when[0].text"),
        ({"kind": "subject_state_contains", "text": "  "}, "nodes[0].rules[0].when[0].text"),
        ({"kind": "entity_state_contains", "text": "x"}, "nodes[0].rules[0].when[0].entity_id"),
        (
            {"kind": "entity_perceived", "entity_id": "The Crumb"},
            "nodes[0].rules[0].when[0].entity_id",
        ),
        (
            {"kind": "subject_state_contains", "text": "x", "entity_id": "crumb"},
            "nodes[0].rules[0].when[0].entity_id",
        ),
        (
            {"kind": "ambient_present", "pointer": "/world/slug"},
            "nodes[0].rules[0].when[0].pointer",
        ),
        ({"kind": "ambient_present", "pointer": "ambient/pa"}, "nodes[0].rules[0].when[0].pointer"),
        ({"kind": "ambient_equals", "pointer": "/ambient/pa"}, "nodes[0].rules[0].when[0].value"),
        ("subject_state_contains", "nodes[0].rules[0].when[0]"),
    ],
)
def test_invalid_condition(condition: Any, field: str) -> None:
    error = rejected(node(rule("r", [condition]), rule("fallback")))
    assert error.code == "invalid_condition"
    assert error.details["field"] == field


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"memory": "I am {{subject.memory}}"}, "nodes[0].rules[0].memory"),
        ({"narration": "{{ subject.id }} acts"}, "nodes[0].rules[0].narration"),
        ({"intent": "{{nodes.act.output}}"}, "nodes[0].rules[0].intent"),
        ({"narration": "{{subject.id} acts"}, "nodes[0].rules[0].narration"),
        ({"narration": "subject.id}} acts"}, "nodes[0].rules[0].narration"),
        ({"memory": "{{subject.id}} and {{"}, "nodes[0].rules[0].memory"),
        ({"memory": ""}, "nodes[0].rules[0].memory"),
        (
            {
                "plan": [
                    {"op": "set_entity_state", "entity_id": "ant", "state": "{{world.projection}}"}
                ]
            },
            "nodes[0].rules[0].plan[0].state",
        ),
    ],
)
def test_invalid_template(changes: dict[str, Any], field: str) -> None:
    error = rejected(node(rule("r", **changes), rule("fallback")))
    assert error.code == "invalid_template"
    assert error.details["field"] == field


def test_unknown_placeholder_message_lists_the_known_ones() -> None:
    error = rejected(node(rule("r", memory="{{subject.memory}}"), rule("fallback")))
    assert "unknown placeholder {{subject.memory}}" in error.message
    for known in ("{{subject.id}}", "{{subject.name}}", "{{world.attempted_turn}}", "{{rule.id}}"):
        assert known in error.message


@pytest.mark.parametrize(
    ("step", "field"),
    [
        ({"op": "delete_entity", "entity_id": "crumb"}, "nodes[0].rules[0].plan[0].op"),
        (
            {"op": "set_entity_state", "entity_id": "The Crumb", "state": "x"},
            "nodes[0].rules[0].plan[0].entity_id",
        ),
        (
            {"op": "set_entity_state", "entity_id": "{{subject.name}}", "state": "x"},
            "nodes[0].rules[0].plan[0].entity_id",
        ),
        ({"op": "set_entity_state", "entity_id": "crumb"}, "nodes[0].rules[0].plan[0].state"),
        (
            {"op": "set_entity_state", "entity_id": "crumb", "content": "x"},
            "nodes[0].rules[0].plan[0].state",
        ),
        (
            {"op": "set_environment_content", "environment_label": "Kitchen Plate", "content": "x"},
            "nodes[0].rules[0].plan[0].environment_label",
        ),
        (["set_entity_state", "crumb", "x"], "nodes[0].rules[0].plan[0]"),
    ],
)
def test_invalid_plan_step(step: Any, field: str) -> None:
    error = rejected(node(rule("r", plan=[step]), rule("fallback")))
    assert error.code == "invalid_plan_step"
    assert error.details["field"] == field


def test_unknown_plan_op_lists_the_valid_ops() -> None:
    error = rejected(
        node(rule("r", plan=[{"op": "delete_entity", "entity_id": "crumb"}]), rule("f"))
    )
    assert "set_entity_state, append_entity_memory, set_environment_content" in error.message


@pytest.mark.parametrize("probability", [0, 0.0, 1.5, -0.1, True, False, "0.5", None])
def test_invalid_probability(probability: Any) -> None:
    error = rejected(node(rule("r", probability=probability), rule("fallback")))
    assert error.code == "invalid_probability"
    assert error.details["field"] == "nodes[0].rules[0].probability"


@pytest.mark.parametrize("probability", [1, 1.0, 0.001, 0.5])
def test_valid_probability(probability: Any) -> None:
    validate(node(rule("r", probability=probability), rule("fallback")))


def test_duplicate_rule_id() -> None:
    error = rejected(node(rule("eat"), rule("walk"), rule("eat")))
    assert error.code == "duplicate_rule_id"
    assert error.details["field"] == "nodes[0].rules[2].id"


@pytest.mark.parametrize(
    "last",
    [
        rule("fallback", [{"kind": "subject_state_contains", "text": "x"}]),
        rule("fallback", probability=0.5),
        rule("fallback", probability=1),
    ],
)
def test_last_rule_must_be_an_unconditional_fallback(last: dict[str, Any]) -> None:
    error = rejected(node(rule("first"), last))
    assert error.code == "rule_policy_no_fallback"
    assert error.details["field"] == "nodes[0].rules[1]"


@pytest.mark.parametrize("apply_from", ["ghost.final", "decide", "ghost", "", 3])
def test_apply_from_must_name_the_policy_node(apply_from: Any) -> None:
    error = rejected(node(rule("fallback")), apply_from)
    assert error.code == "invalid_apply"
    assert error.details["field"] == "apply.from"
    assert "decide.final" in error.message


@pytest.mark.parametrize(
    ("policy", "code"),
    [
        ({"id": "decide", "type": "rule_policy"}, "invalid_node"),
        ({**node(rule("fallback")), "llm_source_ref": {"hash": "b" * 64}}, "invalid_node"),
        ({**node(rule("fallback")), "memory_ref": {"hash": "b" * 64}}, "unknown_reference_kind"),
        ({**node(rule("fallback")), "max_tool_calls": 1}, "invalid_node"),
        ({"id": "decide", "type": "rule_policy", "rules": []}, "invalid_rule"),
        ({"id": "decide", "type": "rule_policy", "rules": "eat"}, "invalid_rule"),
        (node({**rule("fallback"), "priority": 1}), "invalid_rule"),
        (node({k: v for k, v in rule("fallback").items() if k != "memory"}), "invalid_rule"),
        (node(rule("Fall Back")), "invalid_rule"),
        (node(rule("fallback", when={"kind": "x"})), "invalid_rule"),
        (node(rule("fallback", plan={"op": "x"})), "invalid_rule"),
    ],
)
def test_malformed_node_or_rule(policy: dict[str, Any], code: str) -> None:
    assert rejected(policy).code == code


def test_rule_policy_references_lists_concrete_ids_only() -> None:
    assert rule_policy_references(workflow(FULL_POLICY)) == [
        ("nodes[0].rules[0].when[2].entity_id", "entity", "crumb"),
        ("nodes[0].rules[0].plan[0].entity_id", "entity", "crumb"),
    ]
    policy = node(
        rule(
            "r",
            [{"kind": "entity_perceived", "entity_id": "bob"}],
            plan=[{"op": "set_environment_content", "environment_label": "park", "content": "x"}],
        ),
        rule("fallback"),
    )
    assert rule_policy_references(workflow(policy)) == [
        ("nodes[0].rules[0].when[0].entity_id", "entity", "bob"),
        ("nodes[0].rules[0].plan[0].environment_label", "environment", "park"),
    ]
