"""Trace pages: one source invocation, one LLM call (HTML, every page also ?format=json)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from cognition_app import selectors
from cognition_app.models import LlmCall, SourceInvocation
from surfaces.pages.rendering import page, respond


@page
def invocation_page(request: HttpRequest, invocation_id: str) -> HttpResponse:
    data = selectors.invocation_get(invocation_id=invocation_id)
    data["children"] = list(
        SourceInvocation.objects.filter(parent_id=data["id"])
        .order_by("seq")
        .values("id", "seq", "kind", "tool_name", "status", "duration_ms")
    )
    return respond(request, "cognition_app/invocation_detail.html", {"inv": data}, data)


def _corrective_message(data: dict[str, Any]) -> dict[str, Any] | None:
    """The message the kernel sent after this generation: the next generation (same attempt,
    subject and node, generation_attempt + 1) ends with it."""
    if data["generation_attempt"] is None:
        return None
    nxt = (
        LlmCall.objects.filter(
            invocation__attempt_id=data["attempt_id"],
            invocation__subject_id=data["subject_id"],
            invocation__node_id=data["node_id"],
            invocation__generation_attempt=data["generation_attempt"] + 1,
        )
        .order_by("invocation__seq")
        .values("id", "messages")
        .first()
    )
    if nxt is None or not nxt["messages"] or nxt["messages"][-1].get("role") != "user":
        return None
    return {"llm_call_id": nxt["id"], "content": nxt["messages"][-1].get("content", "")}


@page
def llm_call_page(request: HttpRequest, call_id: str) -> HttpResponse:
    data = selectors.llm_call_get(call_id=call_id)
    data["corrective_message"] = _corrective_message(data)
    last = data["chunks"][-1]["offset_ms"] if data["chunks"] else 0
    span = max(last, 1)
    chunk_rows = [{**c, "left": c["offset_ms"] / span * 100} for c in data["chunks"]]
    context = {"call": data, "chunk_rows": chunk_rows, "chunk_span_ms": last}
    return respond(request, "cognition_app/llm_call_detail.html", context, data)
