"""A world's interventions on its page: the list (pending and consumed) and the operator's form,
whose patch is checked as it is typed (the same checks the API runs at the request, plus the
targets against the world's current state, which the turn checks again when it runs)."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from chukwa_core.errors import ChukwaError
from chukwa_core.patching import PatchRejected, validate_patch
from chukwa_core.world_state import WorldState
from surfaces.pages.rendering import page
from surfaces.permissions import is_operator
from worlds_app import selectors
from worlds_app.services.interventions import (
    InterventionInput,
    intervention_create,
    intervention_delete,
)

PATCH_EXAMPLE = {"narration": "It starts to rain.", "effects": []}


def _require_operator(request: HttpRequest) -> None:
    if not is_operator(request.user):
        raise ChukwaError(
            "forbidden",
            "Adding or deleting interventions requires membership of the operators group.",
            status_code=403,
        )


def intervention_context(request: HttpRequest, slug: str) -> dict[str, Any]:
    """What the world page's interventions card shows."""
    return {
        "interventions": selectors.intervention_list(slug=slug),
        "patch_example": json.dumps(PATCH_EXAMPLE, indent=2),
    }


def _check(slug: str, text: str) -> tuple[Any, str]:
    """The patch typed, and what is wrong with it ("" when nothing): JSON, the WorldPatch shape,
    and its targets against the world as it is now."""
    try:
        patch = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    world = selectors.world_get(slug=slug)
    try:
        validate_patch(patch, WorldState.from_snapshot(world["state"]))
    except PatchRejected as exc:
        return patch, exc.message
    return patch, ""


@page
@require_POST
def intervention_validate(request: HttpRequest, slug: str) -> HttpResponse:
    """The form's live check (HTMX, as the operator types)."""
    _require_operator(request)
    _, problem = _check(slug, request.POST.get("patch", ""))
    return render(request, "worlds_app/_intervention_check.html", {"problem": problem})


@page
@require_POST
def intervention_add(request: HttpRequest, slug: str) -> HttpResponse:
    _require_operator(request)
    text = request.POST.get("patch", "")
    patch, problem = _check(slug, text)
    data: InterventionInput = {"note": request.POST.get("note", "")}
    raw_turn = request.POST.get("turn", "").strip()
    if raw_turn:
        if not raw_turn.isdigit():
            problem = problem or f"turn: must be a turn number, got {raw_turn!r}"
        else:
            data["turn"] = int(raw_turn)
    if not problem:
        try:
            data["patch"] = patch
            intervention_create(slug=slug, data=data, created_by=request.user.get_username())
        except ChukwaError as exc:
            if exc.status_code == 404:
                raise
            problem = exc.message
    if not problem:
        return redirect(f"/worlds/{slug}/#interventions")
    context = {
        "world": selectors.world_get(slug=slug),
        **intervention_context(request, slug),
        "form_patch": text,
        "form_note": data["note"],
        "form_turn": raw_turn,
        "form_problem": problem,
        "is_operator": True,
        "standalone": True,
    }
    return render(request, "worlds_app/intervention_form.html", context, status=400)


@page
@require_POST
def intervention_remove(request: HttpRequest, slug: str, intervention_id: int) -> HttpResponse:
    _require_operator(request)
    intervention_delete(slug=slug, intervention_id=intervention_id)
    return redirect(f"/worlds/{slug}/#interventions")
