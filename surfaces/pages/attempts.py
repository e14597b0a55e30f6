"""The attempt timeline page: a live waterfall tree of every call of one attempt.

While the attempt runs the page polls itself every second and the answer is morphed into the
page (``surfaces/pages/live.py``): rows are updated in place, a section the reviewer opened stays
open, the selected row stays selected.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from cognition_app.verdicts import trace_details
from surfaces.pages.live import stop_polling_when
from surfaces.pages.rendering import page, respond
from surfaces.pages.timeline import build_timeline, timeline_json
from worlds_app import selectors

FINISHED = ("committed", "failed", "interrupted", "cancelled")


@page
def attempt_page(request: HttpRequest, attempt_id: str) -> HttpResponse:
    data = selectors.attempt_get(attempt_id=attempt_id)
    timeline = build_timeline(data, trace_details(attempt_id=UUID(data["id"])))
    verdicts = timeline.pop("verdicts")
    generations = [i for i in data["source_invocations"] if i["kind"] == "llm_generation"]
    finished = data["status"] in FINISHED
    context = {
        "attempt": data,
        "timeline": timeline,
        "finished": finished,
        "url": reverse("page-attempt", args=[data["id"]]),
        "stats": {
            "invocations": len(data["source_invocations"]),
            "generations": len(generations),
            "running": sum(1 for i in data["source_invocations"] if i["status"] == "running"),
            "retries": sum(1 for g in generations if verdicts[str(g["id"])]["code"] == "rejected"),
            "prompt_tokens": sum(i["prompt_tokens"] or 0 for i in generations),
            "completion_tokens": sum(i["completion_tokens"] or 0 for i in generations),
        },
    }
    payload: dict[str, Any] = {**data, "timeline": timeline_json(timeline)}
    response = respond(
        request,
        "worlds_app/attempt_detail.html",
        context,
        payload,
        partial="worlds_app/_timeline.html",
    )
    stop_polling_when(response, request, finished)
    return response
