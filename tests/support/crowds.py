"""A fixture scenario's world with a crowd of rule-policy mites added: an attempt of many
subjects (the timeline's folding and windows, the turn page's window)."""

from __future__ import annotations

from typing import Any

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.services import world_create

WANDER: dict[str, Any] = {
    "id": "wander",
    "when": [],
    "intent": "wander along the rim",
    "plan": [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "on the rim"}],
    "memory": "Turn {{world.attempted_turn}}: wandered along the rim.",
    "narration": "{{subject.name}} wanders along the rim of the plate.",
}


def crowded_world(fixture: str, slug: str, *, mites: int, environment: str) -> None:
    """World ``slug`` of ``fixture`` with ``mites`` rule-policy agents (``mite_00``, …) in
    ``environment``, each wandering (one rule, always matched)."""
    body = {k: v for k, v in load_fixture(fixture).items() if k not in ("name", "note")}
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [{"id": "decide", "type": "rule_policy", "rules": [WANDER]}],
        "apply": {"from": "decide.final"},
    }
    body["cognition_profiles"]["mite"] = {"inline": {"workflow": {"inline": workflow}}}
    for n in range(mites):
        body["entities"].append(
            {
                "inline": {
                    "id": f"mite_{n:02d}",
                    "name": f"Mite {n}",
                    "state": "at the rim of the plate",
                    "environment": environment,
                    "kind": {"agent": {"goal": "g", "memory": "", "cognition_profile": "mite"}},
                }
            }
        )
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
