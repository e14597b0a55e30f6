"""The attempt timeline page: a live waterfall tree of every call of one attempt.

While the attempt runs the page polls itself every second and the answer is morphed into the
page (``surfaces/pages/live.py``): rows are updated in place, a section the reviewer opened stays
open, the selected row stays selected.

An attempt of many subjects (a rule-policy turn of 500 agents: 2,000 rows, 1,000 events) shows
its subjects :data:`SUBJECTS_PER_PAGE` at a time (``?subject_offset=``), or only those that had
a problem, a rejected reply or are still running (``?only=problems``); the rows of the turn
itself (once-per-turn calls, the commit or the failure) are on every page, the figures at the
top count the whole attempt, and ``?format=json`` gives all of it. Rendered whole, such a page
was 4 MB and took 3 s.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from chukwa_core.errors import ChukwaError, ConflictError, invalid
from cognition_app.verdicts import trace_details
from scenarios_app.hash_names import hash_names
from surfaces.pages.layout import page_links, page_offset, query_url
from surfaces.pages.live import stop_polling_when
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.pages.timeline import build_timeline, flatten, timeline_json
from surfaces.permissions import is_operator
from worlds_app import selectors
from worlds_app.services import turn_attempt_retry
from worlds_app.services.attempts import RETRY_WARNINGS, turn_attempt_retryable

FINISHED = selectors.FINISHED_STATUSES
SUBJECTS_PER_PAGE = 50
ONLY = ("", "problems")


def _noteworthy(group: dict[str, Any]) -> bool:
    return bool(group["problem"] or group["running"] or group["rejected"])


def _subject_window(
    request: HttpRequest, timeline: dict[str, Any], events: list[dict[str, Any]]
) -> dict[str, Any]:
    """Keep :data:`SUBJECTS_PER_PAGE` subject groups of the tree (the rows of the turn itself
    stay); the window's links, and the events of the subjects shown."""
    only = request.GET.get("only", "")
    if only not in ONLY:
        raise invalid("invalid_query", "only", f"must be 'problems' or absent, got {only[:64]!r}")
    offset = page_offset(request, "subject_offset")
    tree = timeline["tree"]
    subjects = [r for r in tree if r["type"] == "group" and r["kind"] == "subject"]
    listed = [r for r in subjects if _noteworthy(r)] if only else subjects
    window = {
        "count": len(subjects),
        "noteworthy": sum(1 for r in subjects if _noteworthy(r)),
        "only": only,
        "pages": page_links(
            request, "subject_offset", count=len(listed), limit=SUBJECTS_PER_PAGE, offset=offset
        ),
        "events_total": len(events),
    }
    if len(subjects) <= SUBJECTS_PER_PAGE and not only:
        window["paged"] = False
        window["events"] = events
        return window
    shown = {id(r) for r in listed[offset : offset + SUBJECTS_PER_PAGE]}
    hidden = {id(r) for r in subjects} - shown
    timeline["tree"] = [r for r in tree if id(r) not in hidden]
    timeline["rows"] = list(flatten(timeline["tree"]))
    names = {r["label"] for r in subjects if id(r) in shown}
    window["paged"] = True
    window["events"] = [e for e in events if not e["subject_id"] or e["subject_id"] in names]
    window["all_url"] = query_url(request, subject_offset=None, only=None)
    window["problems_url"] = query_url(request, subject_offset=None, only="problems")
    return window


@page
def attempt_page(request: HttpRequest, attempt_id: str) -> HttpResponse:
    data = selectors.attempt_get(attempt_id=attempt_id)
    timeline = build_timeline(data, trace_details(attempt_id=UUID(data["id"])))
    # the whole attempt, for ?format=json only (the rows of 500 subjects cost 50 ms to list)
    payload: dict[str, Any] = (
        {**data, "timeline": timeline_json(timeline)} if wants_json(request) else {}
    )
    window = _subject_window(request, timeline, data["events"])
    verdicts = timeline.pop("verdicts")
    generations = [i for i in data["source_invocations"] if i["kind"] == "llm_generation"]
    finished = data["status"] in FINISHED
    operator = is_operator(request.user)
    context = {
        "attempt": data,
        "is_operator": operator,
        # the button only where the retry would be accepted now
        "retryable": (
            operator
            and data["status"] in selectors.RETRYABLE_STATUSES
            and turn_attempt_retryable(attempt_id=data["id"])
        ),
        "retry_left": data["batch_size"] - data["batch_index"] - 1,
        "timeline": timeline,
        # what names each workflow the attempt ran (a node's detail shows it beside the hash)
        "hash_names": hash_names(hashes={i["workflow_hash"] for i in data["source_invocations"]}),
        "finished": finished,
        "subjects": window,
        # the page polls itself with its own window of subjects
        "url": request.get_full_path(),
        "stats": {
            "invocations": len(data["source_invocations"]),
            "generations": len(generations),
            "running": sum(1 for i in data["source_invocations"] if i["status"] == "running"),
            "retries": sum(1 for g in generations if verdicts[str(g["id"])]["code"] == "rejected"),
            # every call that spent tokens: the conformance check's too
            "prompt_tokens": sum(i["prompt_tokens"] or 0 for i in data["source_invocations"]),
            "completion_tokens": sum(
                i["completion_tokens"] or 0 for i in data["source_invocations"]
            ),
        },
    }
    response = respond(
        request,
        "worlds_app/attempt_detail.html",
        context,
        payload,
        partial="worlds_app/_timeline.html",
    )
    stop_polling_when(response, request, finished)
    return response


@page
@require_POST
def attempt_retry_page(request: HttpRequest, attempt_id: str) -> HttpResponse:
    """ "Retry from here" (operators): the attempt's turn and the rest of its batch queued again;
    the first new attempt's timeline opens. A refusal is an error page saying why; while the
    failure's cause is still there, a confirmation saying so (409), whose button retries anyway
    (``force``)."""
    if not is_operator(request.user):
        raise ChukwaError(
            "forbidden",
            "Retrying attempts requires membership of the operators group.",
            status_code=403,
        )
    try:
        result = turn_attempt_retry(
            attempt_id=attempt_id,
            requested_by=request.user.get_username(),
            force=request.POST.get("force") == "1",
        )
    except ConflictError as exc:
        if exc.code not in RETRY_WARNINGS:
            raise
        context = {"warning": exc, "attempt_id": attempt_id}
        return render(request, "worlds_app/retry_confirm.html", context, status=409)
    return redirect("page-attempt", attempt_id=result["attempt_ids"][0])
