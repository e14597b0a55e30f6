"""The workflow authoring page for operators: edit a workflow's JSON with live validation, preview
the exact messages a subject of a world would receive at its next turn, save the workflow as a
new content-addressed version, or fork a scenario with it in one step.

Validation and preview run the store's own put path (the same validator as the API) inside a
transaction that is always rolled back, so neither writes a row. A preview never calls a source:
ambient sources are shown with the request body they would be sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_GET, require_POST

from chukwa_core import clock
from chukwa_core.errors import ChukwaError, NotFoundError
from chukwa_core.ids import is_hash, label_problem
from chukwa_core.patch_schema import world_patch_schema_hash
from chukwa_core.world_state import WorldState, is_agent
from cognition_app import sources
from cognition_app.ambient import inject, resolve_template, runs_for_subject, visible_to
from cognition_app.llm_nodes import placeholder_values, render_messages, tool_loop_schema
from cognition_app.sources import SourceFailure
from cognition_app.subject_run import SubjectRun, TurnContext
from scenarios_app.models import CognitionWorkflow, ResponseSource
from scenarios_app.services import ScenarioForkInput, cognition_workflow_put, scenario_fork
from scenarios_app.services._store import Resolver
from surfaces.pages.rendering import page, respond
from surfaces.permissions import is_operator
from worlds_app.models import Turn, World

T = TypeVar("T")

AMBIENT_NOT_FETCHED = "(ambient results are not fetched in a preview)"
LLM_NODE_TYPES = frozenset({"llm_text", "llm_tool_loop"})
PAGE = "authoring/author.html"
MAX_WORLDS = 100


def _forbidden_unless_operator(request: HttpRequest) -> None:
    if not is_operator(request.user):
        raise ChukwaError(
            "forbidden",
            "Authoring workflows requires membership of the operators group.",
            status_code=403,
        )


def _rolled_back(work: Callable[[], T]) -> T:
    """Run ``work`` in a transaction that is always rolled back: a dry run writes nothing."""
    with transaction.atomic():
        try:
            return work()
        finally:
            transaction.set_rollback(True)


def _error_dict(exc: ChukwaError) -> dict[str, Any]:
    return {
        "code": exc.code,
        "field": exc.details.get("field", ""),
        "message": exc.message,
        "status": exc.status_code,
    }


def _parse_content(raw: str) -> Any:
    if not raw.strip():
        raise ChukwaError(
            "invalid_json",
            "content: is empty; paste or type the workflow JSON",
            {"field": "content"},
        )
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ChukwaError(
            "invalid_json",
            f"content: not valid JSON: {exc}",
            {"field": "content"},
        ) from None
    except RecursionError:
        raise ChukwaError(
            "invalid_json", "content: JSON is nested too deeply", {"field": "content"}
        ) from None


def _check(content: Any) -> tuple[str, bool]:
    """The store's put path as a dry run: (workflow hash, whether it would be a new row)."""
    return _rolled_back(lambda: Resolver().put_workflow(content))


def _validation(raw: str) -> dict[str, Any]:
    try:
        workflow_hash, would_be_new = _check(_parse_content(raw))
    except ChukwaError as exc:
        return {"valid": False, "error": _error_dict(exc)}
    return {"valid": True, "hash": workflow_hash, "would_be_new": would_be_new}


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


def _picker_context(world_slug: str, subject_id: str) -> dict[str, Any]:
    worlds = list(World.objects.order_by("-created_at", "slug").values("slug", "name")[:MAX_WORLDS])
    return {
        "worlds": worlds,
        "world_slug": world_slug,
        "subjects": _agent_ids(world_slug),
        "subject_id": subject_id,
    }


def _fork_defaults(world_slug: str, subject_id: str) -> dict[str, str]:
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
    labels = dict(
        ResponseSource.objects.filter(
            pk__in={s["source_ref"]["hash"] for s in workflow["ambient_sources"]}
        ).values_list("pk", "label")
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


def _preview(raw: str, world_slug: str, subject_id: str) -> dict[str, Any]:
    content = _parse_content(raw)
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
        workflow_hash, _ = Resolver().put_workflow(content)
        workflow = CognitionWorkflow.objects.values_list("content", flat=True).get(pk=workflow_hash)
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
        **_rolled_back(work),
    }


# --- views ------------------------------------------------------------------------------------


def _skeleton() -> str:
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": {"hash": "<a stored llm_chat_completions source>"},
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": "You control the acting subject."},
                        {
                            "role": "user",
                            "content": "World:\n{{world.projection}}\n\n"
                            "Acting subject:\n{{subject.rendered}}\n\n"
                            "Available tools:\n{{tools.available}}",
                        },
                    ]
                },
                "available_tools": [],
                "max_generation_attempts": 3,
                "max_tool_calls": 0,
                "final_schema_ref": {"hash": world_patch_schema_hash()},
            }
        ],
        "apply": {"from": "act.final"},
    }
    return json.dumps(workflow, indent=2, ensure_ascii=False)


def _page_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    data = request.POST if request.method == "POST" else request.GET
    world_slug = _checked_slug(data.get("world", "").strip())
    subject_id = data.get("subject", "").strip()
    defaults = _fork_defaults(world_slug, subject_id)
    return {
        **_picker_context(world_slug, subject_id),
        "content": data.get("content", ""),
        "scenario": data.get("scenario", "").strip() or defaults["scenario"],
        "label": data.get("label", "").strip() or defaults["label"],
        "fork_name": data.get("name", "").strip(),
        "note": data.get("note", ""),
        "validation": None,
        "preview": None,
        "preview_error": None,
        **extra,
    }


@require_GET
@page
def workflow_author(request: HttpRequest) -> HttpResponse:
    _forbidden_unless_operator(request)
    context = _page_context(request)
    workflow_hash = request.GET.get("workflow", "").strip()
    source_hash = ""
    if workflow_hash:
        if not is_hash(workflow_hash):
            raise ChukwaError(
                "invalid_hash",
                f"workflow: {workflow_hash!r} is not a lowercase sha256 hex",
                {"field": "workflow"},
            )
        stored = CognitionWorkflow.objects.filter(pk=workflow_hash).first()
        if stored is None:
            raise NotFoundError(
                "not_found",
                f"workflow: no stored cognition_workflow has hash {workflow_hash}",
                {"field": "workflow"},
            )
        context["content"] = json.dumps(stored.content, indent=2, ensure_ascii=False)
        source_hash = workflow_hash
    elif not context["content"]:
        context["content"] = _skeleton()
    context["source_hash"] = source_hash
    data = {
        "workflow": source_hash or None,
        "content": context["content"],
        "worlds": context["worlds"],
        "world": context["world_slug"],
        "subjects": context["subjects"],
        "subject": context["subject_id"],
    }
    return respond(request, PAGE, context, data)


@require_GET
@page
def workflow_author_subjects(request: HttpRequest) -> HttpResponse:
    """The subject picker for a world (swapped in when the world picker changes)."""
    _forbidden_unless_operator(request)
    context = _page_context(request)
    data = {"world": context["world_slug"], "subjects": context["subjects"]}
    return respond(request, PAGE, context, data, partial="authoring/_subjects.html")


@require_POST
@page
def workflow_author_validate(request: HttpRequest) -> HttpResponse:
    _forbidden_unless_operator(request)
    validation = _validation(request.POST.get("content", ""))
    context = _page_context(request, validation=validation)
    return respond(request, PAGE, context, validation, partial="authoring/_errors.html")


@require_POST
@page
def workflow_author_preview(request: HttpRequest) -> HttpResponse:
    _forbidden_unless_operator(request)
    try:
        preview = _preview(
            request.POST.get("content", ""),
            request.POST.get("world", "").strip(),
            request.POST.get("subject", "").strip(),
        )
    except ChukwaError as exc:
        error = _error_dict(exc)
        context = _page_context(request, preview_error=error)
        return respond(request, PAGE, context, {"error": error}, partial="authoring/_preview.html")
    context = _page_context(request, preview=preview)
    return respond(request, PAGE, context, preview, partial="authoring/_preview.html")


def _failed_write(request: HttpRequest, exc: ChukwaError) -> HttpResponse:
    """A failed save or fork: the page again with the author's text and the error."""
    validation = {"valid": False, "error": _error_dict(exc)}
    response = respond(request, PAGE, _page_context(request, validation=validation), validation)
    response.status_code = exc.status_code
    return response


@require_POST
@page
def workflow_author_save(request: HttpRequest) -> HttpResponse:
    _forbidden_unless_operator(request)
    try:
        result = cognition_workflow_put(content=_parse_content(request.POST.get("content", "")))
    except ChukwaError as exc:
        return _failed_write(request, exc)
    return HttpResponseRedirect(f"/store/cognition-workflows/{result['hash']}/")


@require_POST
@page
def workflow_author_fork(request: HttpRequest) -> HttpResponse:
    _forbidden_unless_operator(request)
    scenario = request.POST.get("scenario", "").strip()
    label = request.POST.get("label", "").strip()
    name = request.POST.get("name", "").strip()
    note = request.POST.get("note", "").strip()
    try:
        if not is_hash(scenario):
            raise ChukwaError(
                "invalid_hash",
                f"scenario: {scenario!r} is not a lowercase sha256 hex",
                {"field": "scenario"},
            )
        content = _parse_content(request.POST.get("content", ""))
        # Check the edge inputs before storing anything, so a typo stores no workflow.
        _check(content)
        workflow_hash = cognition_workflow_put(content=content)["hash"]
        data: ScenarioForkInput = {
            "primary_parent": {"hash": scenario},
            "changes": {
                "cognition_profile_upserts": {
                    label: {"inline": {"workflow": {"hash": workflow_hash}}}
                }
            },
            "operator": request.user.get_username(),
            "note": note or f"workflow editor: profile {label} uses workflow {workflow_hash}",
        }
        if name:
            data["name"] = name
        result = scenario_fork(data=data)
    except ChukwaError as exc:
        return _failed_write(request, exc)
    return HttpResponseRedirect(f"/scenarios/{result['scenario_hash']}/")
