"""Scenario forks, called directly: bindings changed, parents recorded, touched components
listed; rows counted before and after."""

from __future__ import annotations

from typing import Any

import pytest

from chukwa_core import hashing
from scenarios_app import selectors, services
from scenarios_app.models import (
    ScenarioDerivation,
    ScenarioDerivationParent,
)
from tests.scenarios_app.store_helpers import (
    DANGLING,
    WorkflowFactory,
    agent,
    canonical,
    expect_error,
    fork,
    inline_body,
    inline_profile,
    new_components,
    prop,
    row_counts,
    row_delta,
)

pytestmark = pytest.mark.django_db


# --- fork ----------------------------------------------------------------------------------


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
