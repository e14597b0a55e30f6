"""Creating a world from a scenario in the browser (operators): the scenario is picked from the
store, the slug typed; the world service checks everything, as for the API."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.authoring.pickers import scenario_choices
from surfaces.pages.rendering import page, respond, wants_json
from worlds_app.services import WorldCreateInput, world_create

PAGE = "authoring/create_world.html"


@require_http_methods(["GET", "HEAD", "POST"])
@page
def create_world_page(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request)
    data = request.POST if request.method == "POST" else request.GET
    form = {
        "scenario": data.get("scenario", "").strip(),
        "slug": data.get("slug", "").strip(),
        "name": data.get("name", "").strip(),
    }
    context: dict[str, Any] = {"form": form, "scenarios": scenario_choices(), "error": None}
    if request.method != "POST":
        return respond(request, PAGE, context, {"scenarios": context["scenarios"], **form})
    body: WorldCreateInput = {"slug": form["slug"], "scenario_ref": {"hash": form["scenario"]}}
    if form["name"]:
        body["name"] = form["name"]
    try:
        world = world_create(data=body, created_by=request.user.get_username())
    except ChukwaError as exc:
        if wants_json(request):
            raise
        context["error"] = error_dict(exc)
        response = respond(request, PAGE, context, {"error": context["error"]})
        response.status_code = exc.status_code
        return response
    return HttpResponseRedirect(f"/worlds/{world.slug}/")
