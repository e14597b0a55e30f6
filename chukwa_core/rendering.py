"""Plain-text views of a world for prompts and summaries. Pure: no Django."""

from __future__ import annotations

from typing import Any

from chukwa_core.world_state import WorldState, is_agent


def render_entity(entity: dict[str, Any], *, with_mind: bool = False) -> str:
    kind = "agent" if is_agent(entity) else "prop"
    line = f"- {entity['id']} ({entity['name']}, {kind}): {entity['state']}"
    if with_mind and is_agent(entity):
        agent = entity["kind"]["agent"]
        memory = agent["memory"].strip() or "(nothing yet)"
        line += f"\n  goal: {agent['goal']}\n  memory: " + memory.replace("\n", "\n    ")
    return line


def world_projection(world: WorldState) -> str:
    """The director's view: every environment with the entities in it."""
    parts = []
    for label, text in world.environments.items():
        members = world.in_environment(label)
        listed = "\n".join(render_entity(e) for e in members) or "(no entities)"
        parts.append(f"## {label}\n{text}\n\nEntities in {label}:\n{listed}")
    return "\n\n".join(parts)


def environment_rendered(world: WorldState, subject_id: str) -> str:
    """The subject's own view: its environment's text and the other entities there."""
    subject = world.entities[subject_id]
    label = subject["environment"]
    others = "\n".join(render_entity(e) for e in world.co_located(subject_id)) or "(nothing else)"
    return f"{label}:\n{world.environments[label]}\n\nAlso here:\n{others}"


def subject_rendered(world: WorldState, subject_id: str) -> str:
    return render_entity(world.entities[subject_id], with_mind=True)
