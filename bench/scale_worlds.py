"""The worlds of the scale bench (``bench/scale_bench.py``): LLM agents answered by an automatic
scripted server, and rule-policy worlds of growing size. Scenario inputs only, plus the server."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

ACTING = re.compile(r"Acting subject:\n- (\S+) \(")
FIXTURE = PROJECT_DIR / "scenarios_app" / "scenario_fixtures" / "ant_on_plate.json"


# --- LLM worlds: the ant_on_plate fixture's own act node, N agents, P props ------------------


def fixture_act_node() -> dict[str, Any]:
    """The act node of the ant_on_plate fixture as the repository has it (its prompt is what
    the prompt-size figures measure), with the max_string_length raised for the bench."""
    data = json.loads(FIXTURE.read_text())
    workflow = data["cognition_profiles"]["ant"]["inline"]["workflow"]["inline"]
    node = dict(workflow["nodes"][0])
    return node


def llm_scenario(
    *,
    agents: int,
    props: int,
    rooms: int,
    execution: str,
    slug: str,
    limits: dict[str, int] | None = None,
) -> dict[str, Any]:
    """``limits``: the LLM source's cluster-wide ``interface.limits`` (none by default)."""
    node = fixture_act_node()
    if limits is not None:
        node["llm_source_ref"]["inline"]["interface"]["limits"] = dict(limits)
    workflow = {
        "version": 1,
        "execution": execution,
        "ambient_sources": [],
        "nodes": [node],
        "apply": {"from": "act.final"},
    }
    entities: list[dict[str, Any]] = []
    for i in range(agents):
        entities.append(
            {
                "inline": {
                    "id": f"ant{i:03d}",
                    "name": f"Ant {i}",
                    "state": "at the centre of the plate, feeling hungry.",
                    "environment": f"plate{i % rooms:02d}",
                    "kind": {
                        "agent": {"goal": "find food.", "memory": "", "cognition_profile": "ant"}
                    },
                }
            }
        )
    for i in range(props):
        entities.append(
            {
                "inline": {
                    "id": f"crumb{i:03d}",
                    "name": f"Crumb {i}",
                    "state": "a bread crumb near the rim.",
                    "environment": f"plate{i % rooms:02d}",
                    "kind": "prop",
                }
            }
        )
    return {
        "scenario_slug": slug,
        "description": f"Scale bench: {agents} LLM agents, {props} props, {rooms} plates.",
        "chronon_seconds": 60,
        "cognition_profiles": {"ant": {"inline": {"workflow": {"inline": workflow}}}},
        "environments": {
            f"plate{r:02d}": {"inline": f"Plate {r}: a small white plate under a lamp."}
            for r in range(rooms)
        },
        "entities": entities,
        "note": "scale bench",
    }


def auto_llm() -> Any:
    """A ScriptedLLM that answers every generation, after its ``delay_s`` (settable while it
    runs), with a valid final patch setting the acting subject's state (the subject read from the
    prompt's "Acting subject:" line): any number of requests, in any order, at any concurrency."""
    from tests.support import scripted_llm

    scripted_llm._Handler.disable_nagle_algorithm = True  # as real servers (see llm_overhead)

    class AutoLLM(scripted_llm.ScriptedLLM):
        delay_s = 0.0

        def _reply_for(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
            if scripted_llm._is_probe(body):
                return super()._reply_for(body, headers)
            return patch_reply(body, self.delay_s)

    return AutoLLM().start()


def patch_reply(body: dict[str, Any], delay_s: float) -> Any:
    """The answer to one generation request, after ``delay_s``: a valid final patch setting the
    state of the acting subject that the prompt's "Acting subject:" line names."""
    from tests.support import scripted_llm

    found = ACTING.search(body["messages"][-1]["content"])
    subject = found.group(1) if found else ""
    patch = {
        "narration": f"{subject} looks around the plate.",
        "effects": [{"op": "set_entity_state", "entity_id": subject, "state": "looking around."}],
    }
    text = json.dumps({"kind": "final_patch", "patch": patch})
    return scripted_llm.Reply(text=text, chunk_size=16, delay_s=delay_s)


# --- rule-policy worlds: rooms of a fixed size, so a bigger world is more rooms --------------

AGENTS_PER_ROOM = 20
PROPS_PER_ROOM = 10


def _rules() -> list[dict[str, Any]]:
    me = "{{subject.id}}"
    return [
        {
            "id": "rest",
            "when": [{"kind": "subject_state_contains", "text": "poking"}],
            "intent": "rest",
            "plan": [{"op": "set_entity_state", "entity_id": me, "state": "resting"}],
            "memory": "T{{world.attempted_turn}} rested",
            "narration": "{{subject.name}} rests.",
        },
        {
            "id": "mark",
            "when": [{"kind": "subject_memory_not_contains", "text": "marked"}],
            "probability": 0.2,
            "intent": "mark the room",
            "plan": [
                {"op": "set_entity_state", "entity_id": me, "state": "marking"},
                {
                    "op": "set_environment_content",
                    "environment_label": "{{subject.environment}}",
                    "content": "A room. {{subject.name}} marked it.",
                },
            ],
            "memory": "T{{world.attempted_turn}} marked the room",
            "narration": "{{subject.name}} marks the room.",
        },
        {
            "id": "poke",
            "when": [],
            "intent": "poke around",
            "plan": [{"op": "set_entity_state", "entity_id": me, "state": "poking"}],
            "memory": "T{{world.attempted_turn}} poked",
            "narration": "{{subject.name}} pokes around.",
        },
    ]


def rule_scenario(agents: int, slug: str) -> dict[str, Any]:
    rooms = max(1, agents // AGENTS_PER_ROOM)
    props = rooms * PROPS_PER_ROOM
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [{"id": "decide", "type": "rule_policy", "rules": _rules()}],
        "apply": {"from": "decide.final"},
    }
    entities: list[dict[str, Any]] = []
    for i in range(agents):
        entities.append(
            {
                "inline": {
                    "id": f"a{i:04d}",
                    "name": f"A{i}",
                    "state": "idle",
                    "environment": f"r{i % rooms:03d}",
                    "kind": {"agent": {"goal": "g", "memory": "", "cognition_profile": "x"}},
                }
            }
        )
    for i in range(props):
        entities.append(
            {
                "inline": {
                    "id": f"p{i:04d}",
                    "name": f"P{i}",
                    "state": "loose",
                    "environment": f"r{i % rooms:03d}",
                    "kind": "prop",
                }
            }
        )
    return {
        "scenario_slug": slug,
        "description": f"Scale bench: {agents} rule-policy agents.",
        "chronon_seconds": 60,
        "cognition_profiles": {"x": {"inline": {"workflow": {"inline": workflow}}}},
        "environments": {f"r{r:03d}": {"inline": "A room."} for r in range(rooms)},
        "entities": entities,
        "note": "scale bench",
    }
