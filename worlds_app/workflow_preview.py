"""The preview of a workflow for one subject of a world: the exact messages its LLM nodes would
receive at the world's next turn and the requests its ambient sources would be sent. Nothing is
called and nothing is stored: inline parts exist only inside a rolled-back transaction (the
author's page shows it).
"""

from __future__ import annotations

import json
from typing import Any

from chukwa_core import clock
from chukwa_core.errors import ChukwaError, NotFoundError
from chukwa_core.ids import label_problem
from chukwa_core.world_state import WorldState, is_agent
from cognition_app import sources
from cognition_app.ambient import inject, resolve_template, runs_for_subject, visible_to
from cognition_app.llm_nodes import placeholder_values, render_messages, tool_loop_schema
from cognition_app.sources import SourceFailure
from cognition_app.subject_run import SubjectRun, TurnContext
from scenarios_app.selectors import source_labels
from scenarios_app.services import nothing_stored, workflow_draft
from worlds_app.models import Turn, World

AMBIENT_NOT_FETCHED = "(ambient results are not fetched in a preview)"
LLM_NODE_TYPES = frozenset({"llm_text", "llm_tool_loop"})
MAX_WORLDS = 100


# --- world and subject pickers ----------------------------------------------------------------


def _checked_slug(slug: str) -> str:
    """The world picker's value, checked before it is looked up (NUL or 10 KB is not a slug)."""
    problem = label_problem(slug) if slug else None
    if problem is not None:
        raise ChukwaError(
            "invalid_slug", f"world: {slug[:64]!r} {problem}", {"field": "world"}, status_code=400
        )
    return slug


def _world(slug: str) -> World:
    world = World.objects.filter(slug=_checked_slug(slug)).first()
    if world is None:
        raise NotFoundError("world_not_found", f"world: no world {slug!r}", {"field": "world"})
    return world


def _latest_state(world: World) -> tuple[Turn, WorldState]:
    turn = Turn.objects.get(world=world, number=world.current_turn)
    return turn, WorldState.from_snapshot(turn.state)


def _agent_ids(slug: str) -> list[str]:
    if not slug:
        return []
    world = World.objects.filter(slug=slug).first()
    if world is None:
        return []
    return [e["id"] for e in _latest_state(world)[1].agents()]


def picker_context(world_slug: str, subject_id: str) -> dict[str, Any]:
    worlds = list(World.objects.order_by("-created_at", "slug").values("slug", "name")[:MAX_WORLDS])
    return {
        "worlds": worlds,
        "world_slug": world_slug,
        "subjects": _agent_ids(world_slug),
        "subject_id": subject_id,
    }


def fork_defaults(world_slug: str, subject_id: str) -> dict[str, str]:
    """The chosen world's scenario and the chosen subject's profile label, when known."""
    world = World.objects.filter(slug=world_slug).first() if world_slug else None
    if world is None:
        return {"scenario": "", "label": ""}
    subject = _latest_state(world)[1].entities.get(subject_id)
    label = subject["kind"]["agent"]["cognition_profile"] if subject and is_agent(subject) else ""
    return {"scenario": world.scenario_id, "label": label}


# --- preview ----------------------------------------------------------------------------------


def _ambient_preview(
    workflow: dict[str, Any], request_context: dict[str, Any], subject: dict[str, Any]
) -> list[dict[str, Any]]:
    """What each ambient source would be called with for this subject's turn (never called)."""
    labels = source_labels(
        source_hashes={s["source_ref"]["hash"] for s in workflow["ambient_sources"]}
    )
    entries = []
    for source in workflow["ambient_sources"]:
        context = request_context
        if source["run"] == "once_per_turn":
            called = True
        else:
            called = runs_for_subject(source, subject)
            context = {
                **request_context,
                "subject": {"id": subject["id"], "environment": subject["environment"]},
            }
        entry: dict[str, Any] = {
            "id": source["id"],
            "run": source["run"],
            "source_hash": source["source_ref"]["hash"],
            "source_label": labels.get(source["source_ref"]["hash"], ""),
            "inject_as": source["inject_as"],
            "called": called,
            "visible_to_subject": visible_to(source, subject, subject["id"]),
            "request_body": None,
            "request_json": "",
            "problem": "",
        }
        if called:
            where = f"ambient source {source['id']!r} request_template"
            try:
                body = resolve_template(source["request_template"], context, where)
            except SourceFailure as exc:
                entry["problem"] = exc.message
            else:
                entry["request_body"] = body
                entry["request_json"] = json.dumps(body, ensure_ascii=False)
            # A later template may read this result; the preview stands in a description.
            inject(
                request_context,
                source["inject_as"],
                f"(result of ambient source {source['id']}, not fetched in a preview)",
            )
        entries.append(entry)
    return entries


def _node_preview(node: dict[str, Any], run: SubjectRun, earlier: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": node["id"], "type": node["type"], "messages": None}
    if node["type"] not in LLM_NODE_TYPES:
        return entry
    tools = list(node.get("available_tools", [])) if node["type"] == "llm_tool_loop" else []
    values = placeholder_values(run, tools)
    values["ambient.visible"] = AMBIENT_NOT_FETCHED
    for node_id in earlier:
        values[f"nodes.{node_id}.output"] = f"(output of node {node_id})"
    entry["messages"] = render_messages(node["prompt_template"], values)
    entry["source_hash"] = node["llm_source_ref"]["hash"]
    if node["type"] == "llm_tool_loop":
        source = sources.source_content(node["llm_source_ref"]["hash"])
        max_len = source["interface"].get("max_string_length")
        schema = tool_loop_schema(run, tools, node["max_tool_calls"] > 0, max_len)
        entry["response_schema"] = json.dumps(schema, indent=2, sort_keys=True)
    return entry


def preview(content: Any, world_slug: str, subject_id: str) -> dict[str, Any]:
    """The preview of the (parsed) workflow ``content`` for one subject of a world."""
    if not world_slug:
        raise ChukwaError("missing_world", "world: choose a world to preview", {"field": "world"})
    world = _world(world_slug)
    turn, state = _latest_state(world)
    subject = state.entities.get(subject_id)
    if subject is None or not is_agent(subject):
        agents = ", ".join(e["id"] for e in state.agents()) or "none"
        raise ChukwaError(
            "unknown_subject",
            f"subject: {subject_id!r} is not an agent of world {world.slug!r}; agents: {agents}",
            {"field": "subject"},
        )
    try:
        simulation_time = clock.advance(turn.simulation_time, world.chronon_seconds).isoformat()
    except clock.CalendarOverflow as exc:
        raise ChukwaError("calendar_end", f"world: {exc}", {"field": "world"}) from None
    ctx = TurnContext(
        world_slug=world.slug,
        turn=turn.number,
        attempted_turn=turn.number + 1,
        simulation_time=simulation_time,
    )
    request_context: dict[str, Any] = {
        "world": {
            "slug": world.slug,
            "turn": turn.number,
            "attempted_turn": turn.number + 1,
            "simulation_time": simulation_time,
        },
        "ambient": {},
    }

    def work() -> dict[str, Any]:
        # Inline schemas and sources exist only inside this rolled-back transaction; everything
        # that reads them happens here.
        workflow_hash, _, workflow = workflow_draft(content)
        ambient = _ambient_preview(workflow, request_context, subject)
        run = SubjectRun(
            subject_id=subject_id,
            workflow=workflow,
            workflow_hash=workflow_hash,
            world=state,
            ctx=ctx,
            events=[],
        )
        nodes = []
        earlier: list[str] = []
        for node in workflow["nodes"]:
            nodes.append(_node_preview(node, run, earlier))
            earlier.append(node["id"])
        return {"workflow_hash": workflow_hash, "ambient": ambient, "nodes": nodes}

    return {
        "world": world.slug,
        "subject": subject_id,
        "turn": turn.number,
        "attempted_turn": turn.number + 1,
        "simulation_time": simulation_time,
        **nothing_stored(work),
    }
