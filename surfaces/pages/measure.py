"""A world's "measure" control (operators; docs/measurement.md, "Measuring"): choose stored
metrics, and every committed turn of the world is measured with them by a worker — the service
behind ``POST /api/worlds/<slug>/measurements/``. The world page loads the form with HTMX (a
link to the same page works without JavaScript)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError
from scenarios_app.pickers import metric_choices
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.rendering import page, respond, wants_json
from worlds_app.selectors import require_slug, world_current_turn
from worlds_app.services.measurements import measurement_request

PAGE = "worlds_app/measure.html"
PARTIAL = "worlds_app/_measure_form.html"


@require_http_methods(["GET", "HEAD", "POST"])
@page
def world_measure_page(request: HttpRequest, slug: str) -> HttpResponse:
    forbidden_unless_operator(request, "Measuring worlds")
    require_slug(slug)
    current = world_current_turn(slug=slug)
    chosen = request.POST.getlist("metrics") if request.method == "POST" else []
    context: dict[str, Any] = {
        "slug": slug,
        "current_turn": current,
        "metric_choices": metric_choices(),
        "chosen": chosen,
        "error": None,
        "queued": None,
    }
    if request.method == "POST":
        try:
            context["queued"] = measurement_request(
                slug=slug, metrics=[{"hash": h} for h in chosen]
            )
        except ChukwaError as exc:
            if wants_json(request) or exc.status_code not in (400, 404):
                raise
            context["error"] = error_dict(exc)
        if context["queued"] is not None and not getattr(request, "htmx", False):
            if wants_json(request):
                return respond(request, "", {}, context["queued"])
            return HttpResponseRedirect(f"{reverse('page-world-detail', args=[slug])}#metrics")
    data = {k: context[k] for k in ("slug", "current_turn", "chosen", "error", "queued")}
    response = respond(request, PAGE, context, data, partial=PARTIAL)
    if context["error"] is not None and not getattr(request, "htmx", False):
        response.status_code = context["error"]["status"]
    return response
