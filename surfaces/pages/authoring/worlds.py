"""Creating a world in the browser (operators), with every option of the API: a scenario picked
from the store (or a branch of another world at one of its turns), a slug, and optionally a
name, start time, seed, budget and replay; the world service checks everything, as for the
API."""

from __future__ import annotations

from typing import Any, cast

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError, invalid
from cognition_app.sources import REPLAY_MODES
from scenarios_app.pickers import scenario_choices
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.rendering import page, respond, wants_json
from worlds_app.services import BudgetInput, WorldCreateInput, world_create
from worlds_app.services.budgets import BUDGET_FIELDS, COST_LIMITS, TOKEN_LIMITS

PAGE = "authoring/create_world.html"


FIELDS = (
    "scenario",
    "slug",
    "name",
    "start_time",
    "seed",
    "branch_world",
    "branch_turn",
    "replay_world",
    "replay_mode",
    *BUDGET_FIELDS,
)


def _whole_number(raw: str, field: str) -> int:
    if not raw.isdigit():
        raise invalid("invalid_input", field, f"must be a whole number, got {raw!r}")
    return int(raw)


def _body(form: dict[str, str]) -> WorldCreateInput:
    """The API's body from the form's fields: empty fields are left out, numbers are read as
    numbers; the world service checks everything else, as for the API."""
    body: WorldCreateInput = {"slug": form["slug"]}
    if form["scenario"]:
        body["scenario_ref"] = {"hash": form["scenario"]}
    if form["name"]:
        body["name"] = form["name"]
    if form["start_time"]:
        body["start_time"] = form["start_time"]
    if form["seed"]:
        body["seed"] = _whole_number(form["seed"], "seed")
    if form["branch_world"] or form["branch_turn"]:
        body["branch_from"] = {
            "world": form["branch_world"],
            "turn": _whole_number(form["branch_turn"], "branch_from.turn"),
        }
    if form["replay_world"]:
        body["replay_from"] = {"world": form["replay_world"], "mode": form["replay_mode"]}
    budget: dict[str, Any] = {}
    for name in TOKEN_LIMITS:
        if form[name]:
            budget[name] = _whole_number(form[name], f"budget.{name}")
    for name in COST_LIMITS:
        if form[name]:
            budget[name] = form[name]
    if budget:
        body["budget"] = cast(BudgetInput, budget)
    return body


@require_http_methods(["GET", "HEAD", "POST"])
@page
def create_world_page(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request, "Creating worlds")
    data = request.POST if request.method == "POST" else request.GET
    form = {name: data.get(name, "").strip() for name in FIELDS}
    context: dict[str, Any] = {
        "form": form,
        "scenarios": scenario_choices(),
        "replay_modes": REPLAY_MODES,
        "error": None,
    }
    if request.method != "POST":
        return respond(request, PAGE, context, {"scenarios": context["scenarios"], **form})
    try:
        world = world_create(data=_body(form), created_by=request.user.get_username())
    except ChukwaError as exc:
        if wants_json(request):
            raise
        context["error"] = error_dict(exc)
        response = respond(request, PAGE, context, {"error": context["error"]})
        response.status_code = exc.status_code
        return response
    return HttpResponseRedirect(f"/worlds/{world.slug}/")
