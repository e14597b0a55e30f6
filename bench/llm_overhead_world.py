"""The LLM overhead bench's world: one LLM agent in a storeroom with ten props, and the valid
final-patch replies scripted for it."""

from __future__ import annotations

import json
from typing import Any

WORLD_SLUG = "llm-overhead"
AGENT = "keeper"
PROPS = 10
ROOM = "storeroom"
MAX_STRING = 200  # the source's max_string_length (as in the ant_on_plate fixture)
FILLER = (
    "The keeper walks the aisle between the shelves, checks each crate against the ledger, "
    "and pauses to listen to the rain on the tin roof. "
)


def _prop_id(i: int) -> str:
    return f"p{i:02d}"


def _workflow() -> dict[str, Any]:
    from chukwa_core.patch_schema import world_patch_schema_hash

    source = {
        "version": 1,
        "label": "chat",
        "interface": {
            "name": "llm_chat_completions",
            "model": "bench-model",
            "base_url_env": "CHUKWA_LLM_BASE_URL",
            "api_key_env": "CHUKWA_LLM_API_KEY",
            "schema_delivery": "response_format",
            "timeout_ms": 60000,
            "params": {"temperature": 0.7, "max_tokens": 800, "seed": 7},
            "max_string_length": MAX_STRING,
        },
    }
    system = (
        "You are the simulation director. Decide what actually happens this turn for the acting "
        "subject. Return JSON only. Never create or delete entities. Only change the acting "
        "subject, existing entities listed in the world, or existing environments listed in the "
        "world, using their exact ids and labels.\n\nRules for the WorldPatch you return:\n"
        "- `narration` is one or two past-tense sentences saying what happened.\n"
        "- Use `set_entity_state` for the acting subject's resulting physical state and for every "
        "entity that changed.\n"
        "- Every `entity_id` and `environment_label` must be copied exactly from the world."
    )
    user = (
        "Simulation time: {{world.simulation_time}} (turn {{world.attempted_turn}})\n\n"
        "World:\n{{world.projection}}\n\nWhere the subject is:\n{{environment.rendered}}\n\n"
        "Acting subject:\n{{subject.rendered}}\n\nDecide the outcome for exactly one turn."
    )
    node = {
        "id": "act",
        "type": "llm_tool_loop",
        "llm_source_ref": {"inline": source},
        "prompt_template": {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]
        },
        "available_tools": [],
        "max_generation_attempts": 3,
        "max_tool_calls": 0,
        "final_schema_ref": {"hash": world_patch_schema_hash()},
    }
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [node],
        "apply": {"from": "act.final"},
    }


def _scenario_input() -> dict[str, Any]:
    entities: list[dict[str, Any]] = [
        {
            "inline": {
                "id": AGENT,
                "name": "Keeper",
                "state": "standing at the storeroom door with a lantern.",
                "environment": ROOM,
                "kind": {
                    "agent": {
                        "goal": "keep the inventory in order.",
                        "memory": "",
                        "cognition_profile": "director",
                    }
                },
            }
        }
    ]
    for i in range(PROPS):
        entities.append(
            {
                "inline": {
                    "id": _prop_id(i),
                    "name": f"Crate {i}",
                    "state": f"a wooden crate on shelf {i % 4}, labelled batch {100 + i}.",
                    "environment": ROOM,
                    "kind": "prop",
                }
            }
        )
    return {
        "scenario_slug": "llm_overhead_bench",
        "description": "LLM overhead bench: one LLM agent, ten props.",
        "chronon_seconds": 60,
        "cognition_profiles": {"director": {"inline": {"workflow": {"inline": _workflow()}}}},
        "environments": {
            ROOM: {
                "inline": "A narrow storeroom with four shelves, a tin roof and one small window."
            }
        },
        "entities": entities,
        "note": "llm overhead bench",
    }


def make_world() -> None:
    from scenarios_app.services import scenario_assemble
    from worlds_app.services import world_create

    result = scenario_assemble(data=_scenario_input())
    world_create(data={"slug": WORLD_SLUG, "scenario_ref": {"hash": result["scenario_hash"]}})


# --- scripted replies -------------------------------------------------------------------------


def _filler(n: int) -> str:
    return (FILLER * (n // len(FILLER) + 1))[:n]


def patch_reply(chars: int) -> str:
    """A valid final-patch reply of about ``chars`` characters, within the source's
    max_string_length (200) and the model schema's 8 effects: the narration, the agent's state,
    then props' states are filled in turn. Only set_entity_state, so the world does not grow."""
    effects: list[dict[str, str]] = [{"op": "set_entity_state", "entity_id": AGENT, "state": "x"}]
    patch: dict[str, Any] = {"narration": "x", "effects": effects}
    reply = {"kind": "final_patch", "patch": patch}

    def size() -> int:
        return len(json.dumps(reply))

    slots: list[tuple[dict[str, Any], str]] = [(patch, "narration"), (effects[0], "state")]
    if size() > chars:  # too short for an effect: a narration-only patch
        effects.clear()
        slots.pop()
    prop = 0
    while True:
        for target, key in slots:
            room = chars - size()
            if room <= 0:
                break
            grow = min(MAX_STRING - len(target[key]), room)
            target[key] = _filler(len(target[key]) + grow)
        if size() >= chars or len(effects) >= 8 or prop >= PROPS:
            break
        effect = {"op": "set_entity_state", "entity_id": _prop_id(prop), "state": "x"}
        effects.append(effect)
        if size() > chars:
            effects.pop()
            break
        slots.append((effect, "state"))
        prop += 1
    return json.dumps(reply)
