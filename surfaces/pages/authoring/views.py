"""The workflow authoring page for operators: edit a workflow's JSON in a code editor with live
validation (errors marked at their line), edit its prompts as plain multi-line text, pick stored
components instead of pasting hashes, preview the exact messages a subject of a world would
receive at its next turn, review the difference from the version it derives from, then save it as
a new content-addressed version ("derived from" kept) or fork a scenario with it in one step.

Validation, preview and review run the store's own put path (the same validator as the API)
inside a transaction that is always rolled back, so none of them writes a row. A preview never
calls a source: ambient sources are shown with the request body they would be sent.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_GET, require_POST

from chukwa_core.errors import ChukwaError
from chukwa_core.ids import is_hash
from chukwa_core.patch_schema import world_patch_schema_hash
from scenarios_app.pickers import (
    component_choices,
    profile_labels,
    scenario_choices,
    workflow_binding,
    workflow_choices,
)
from scenarios_app.selectors import workflow_content, workflow_versions
from scenarios_app.services import ScenarioForkInput, cognition_workflow_derive, scenario_fork
from surfaces.pages.authoring.common import (
    check,
    checked_slug,
    error_dict,
    forbidden_unless_operator,
    parse_content,
    validation,
)
from surfaces.pages.authoring.review import review
from surfaces.pages.rendering import page, respond
from worlds_app.workflow_preview import fork_defaults, picker_context, preview

PAGE = "authoring/author.html"


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


def _derived_from(data: Any) -> str:
    """The version being edited (a hidden field of the form), checked: "" when there is none."""
    value = str(data.get("derived_from", "")).strip()
    if value and not is_hash(value):
        raise ChukwaError(
            "invalid_hash",
            f"derived_from: {value[:80]!r} is not a lowercase sha256 hex",
            {"field": "derived_from"},
        )
    return value


def _page_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    data = request.POST if request.method == "POST" else request.GET
    world_slug = checked_slug(data.get("world", "").strip())
    subject_id = data.get("subject", "").strip()
    derived_from = _derived_from(data) or str(extra.get("source_hash", ""))
    defaults = fork_defaults(world_slug, subject_id)
    scenario = data.get("scenario", "").strip() or defaults["scenario"]
    # The fork's profile follows the workflow loaded: the label that runs it in that scenario
    # (or, with no scenario chosen, where it runs), before the chosen subject's own.
    loaded = workflow_binding(derived_from, scenario)
    scenario = scenario or loaded["scenario"]
    return {
        **picker_context(world_slug, subject_id),
        "content": data.get("content", ""),
        "source_hash": derived_from,
        "versions": workflow_versions(workflow_hash=derived_from) if derived_from else None,
        "scenario": scenario,
        "label": data.get("label", "").strip() or loaded["label"] or defaults["label"],
        "labels": profile_labels(scenario) if is_hash(scenario) else [],
        "fork_name": data.get("name", "").strip(),
        "note": data.get("note", ""),
        "workflows": workflow_choices(),
        "components": component_choices(),
        "scenarios": scenario_choices(),
        "validation": None,
        "preview": None,
        "preview_error": None,
        "review": None,
        "review_error": None,
        **extra,
    }


@require_GET
@page
def workflow_author(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request)
    workflow_hash = request.GET.get("workflow", "").strip()
    if workflow_hash:
        if not is_hash(workflow_hash):
            raise ChukwaError(
                "invalid_hash",
                f"workflow: {workflow_hash!r} is not a lowercase sha256 hex",
                {"field": "workflow"},
            )
        stored = workflow_content(workflow_hash=workflow_hash, field="workflow")
        content = json.dumps(stored, indent=2, ensure_ascii=False)
        context = _page_context(request, content=content, source_hash=workflow_hash)
        context["versions"] = workflow_versions(workflow_hash=workflow_hash)
    else:
        context = _page_context(request)
        if not context["content"]:
            context["content"] = _skeleton()
    data = {
        "workflow": context["source_hash"] or None,
        "content": context["content"],
        "versions": context["versions"],
        "worlds": context["worlds"],
        "world": context["world_slug"],
        "subjects": context["subjects"],
        "subject": context["subject_id"],
        "components": context["components"],
    }
    return respond(request, PAGE, context, data)


@require_GET
@page
def workflow_author_subjects(request: HttpRequest) -> HttpResponse:
    """The subject picker for a world (swapped in when the world picker changes)."""
    forbidden_unless_operator(request)
    context = _page_context(request)
    data = {"world": context["world_slug"], "subjects": context["subjects"]}
    return respond(request, PAGE, context, data, partial="authoring/_subjects.html")


@require_GET
@page
def workflow_author_profiles(request: HttpRequest) -> HttpResponse:
    """The profile-label picker for a scenario (swapped in when the scenario picker changes)."""
    forbidden_unless_operator(request)
    scenario = request.GET.get("scenario", "").strip()
    if scenario and not is_hash(scenario):
        raise ChukwaError(
            "invalid_hash",
            f"scenario: {scenario[:80]!r} is not a lowercase sha256 hex",
            {"field": "scenario"},
        )
    labels = profile_labels(scenario)
    # the profile that runs the workflow being edited, when this scenario has one
    loaded = workflow_binding(_derived_from(request.GET), scenario) if scenario else {"label": ""}
    context = {"labels": labels, "label": request.GET.get("label", "").strip() or loaded["label"]}
    return respond(
        request,
        "authoring/_labels.html",
        context,
        {"scenario": scenario, "labels": labels},
        partial="authoring/_labels.html",
    )


@require_POST
@page
def workflow_author_validate(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request)
    result = validation(request.POST.get("content", ""))
    context = _page_context(request, validation=result)
    return respond(request, PAGE, context, result, partial="authoring/_errors.html")


@require_POST
@page
def workflow_author_preview(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request)
    try:
        result = preview(
            parse_content(request.POST.get("content", "")),
            request.POST.get("world", "").strip(),
            request.POST.get("subject", "").strip(),
        )
    except ChukwaError as exc:
        error = error_dict(exc)
        context = _page_context(request, preview_error=error)
        return respond(request, PAGE, context, {"error": error}, partial="authoring/_preview.html")
    context = _page_context(request, preview=result)
    return respond(request, PAGE, context, result, partial="authoring/_preview.html")


@require_POST
@page
def workflow_author_review(request: HttpRequest) -> HttpResponse:
    """What saving would store, and the difference from the version it derives from."""
    forbidden_unless_operator(request)
    try:
        result = review(request.POST.get("content", ""), _derived_from(request.POST))
    except ChukwaError as exc:
        error = error_dict(exc)
        context = _page_context(request, review_error=error)
        response = respond(
            request, PAGE, context, {"error": error}, partial="authoring/_review.html"
        )
        if not getattr(request, "htmx", False):
            response.status_code = exc.status_code
        return response
    context = _page_context(request, review=result)
    return respond(request, PAGE, context, result, partial="authoring/_review.html")


def _failed_write(request: HttpRequest, exc: ChukwaError) -> HttpResponse:
    """A failed save or fork: the page again with the author's text and the error."""
    result = {"valid": False, "error": error_dict(exc)}
    response = respond(request, PAGE, _page_context(request, validation=result), result)
    response.status_code = exc.status_code
    return response


@require_POST
@page
def workflow_author_save(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request)
    try:
        result = cognition_workflow_derive(
            content=parse_content(request.POST.get("content", "")),
            parent_hash=_derived_from(request.POST),
            operator=request.user.get_username(),
            note=request.POST.get("save_note", "").strip(),
        )
    except ChukwaError as exc:
        return _failed_write(request, exc)
    return HttpResponseRedirect(f"/store/cognition-workflows/{result['hash']}/")


@require_POST
@page
def workflow_author_fork(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request)
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
        content = parse_content(request.POST.get("content", ""))
        # Check the edge inputs before storing anything, so a typo stores no workflow.
        check(content)
        workflow_hash = cognition_workflow_derive(
            content=content,
            parent_hash=_derived_from(request.POST),
            operator=request.user.get_username(),
            note=note,
        )["hash"]
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
