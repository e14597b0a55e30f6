"""A world's interviews (docs/populations.md, "Interviewing without disturbing"): every one
with its answers and the world's state hash before and after; operators queue new ones with a
form (the service behind ``POST /api/worlds/<slug>/interviews/``). A queued or running
interview's card polls the page every second (htmx, selecting its own card) until it ends."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError
from scenarios_app.pickers import component_choices
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.rendering import page, respond, wants_json
from worlds_app.interview_selectors import interview_list
from worlds_app.selectors import require_slug, world_current_turn
from worlds_app.services.interviews import interview_create


def _shown(interview: Any) -> dict[str, Any]:
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for answer in interview.answers:
        by_subject.setdefault(answer["subject"], []).append(answer)
    return {
        "id": interview.pk,
        "turn": interview.turn_number,
        "created_at": interview.created_at,
        "created_by": interview.created_by,
        "status": interview.status,
        "error_code": interview.error_code,
        "error_message": interview.error_message,
        "state_hash_before": interview.state_hash_before,
        "state_hash_after": interview.state_hash_after,
        "unchanged": interview.state_hash_before == interview.state_hash_after,
        "live": interview.status in ("queued", "running"),
        "tries": interview.tries,
        "answered": len(interview.answers),
        "asked": len(interview.subjects) * len(interview.questions),
        "subjects": [{"id": s, "answers": a} for s, a in by_subject.items()],
        "questions": interview.questions,
    }


@require_http_methods(["GET", "HEAD", "POST"])
@page
def world_interviews_page(request: HttpRequest, slug: str) -> HttpResponse:
    require_slug(slug)
    current = world_current_turn(slug=slug)
    form = {"turn": str(current), "subjects": "all", "questions": "", "source": ""}
    error = None
    if request.method == "POST":
        forbidden_unless_operator(request, "Interviewing agents")
        form = {key: request.POST.get(key, "").strip() for key in form}
        subjects = form["subjects"]
        body: dict[str, Any] = {
            "turn": int(form["turn"]) if form["turn"].isdigit() else form["turn"],
            "subjects": "all" if subjects in ("", "all") else subjects.replace(",", " ").split(),
            "questions": [q.strip() for q in form["questions"].splitlines() if q.strip()],
            "source": {"hash": form["source"]},
        }
        try:
            interview_create(slug=slug, data=body, created_by=request.user.get_username())
        except ChukwaError as exc:
            if wants_json(request) or exc.status_code not in (400, 404):
                raise
            error = error_dict(exc)
        else:
            return HttpResponseRedirect(reverse("page-world-interviews", args=[slug]))
    interviews = [_shown(i) for i in interview_list(slug=slug)]
    context = {
        "slug": slug,
        "current_turn": current,
        "interviews": interviews,
        "sources": component_choices()["llm_sources"],
        "form": form,
        "error": error,
    }
    data = {"slug": slug, "interviews": interviews}
    response = respond(request, "worlds_app/interviews.html", context, data)
    if error is not None:
        response.status_code = error["status"]
    return response
