"""What a traced source call came to, as a reviewer must read it (a rejected generation
never looks accepted, not even while the attempt runs).

A generation's row says ``succeeded`` once its stream ended, whatever Chukwa then made of the
text; the verdict is written with the finished row (``validation_status``, ``model_output_kind``,
``failure_class``), so it is readable the moment the generation ends — long before the attempt's
events are. Every page derives its badge here, from those columns, never from the transport
status alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict
from uuid import UUID

from django.db.models import OuterRef, Subquery
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Substr

from cognition_app.models import LlmChunk, SourceInvocation

# Failure classes that are the network's or the endpoint's fault (connection, timeout,
# HTTP 5xx/429), not the model's and not the configuration's. ``server_error`` is the
# conformance check's name for a 5xx.
TRANSPORT_CLASSES = frozenset({"transport", "server_error"})
LABELS = {
    "running": "running",
    "accepted": "accepted",
    "rejected": "rejected",
    "transport_failed": "transport failed",
    "failed": "failed",
    "interrupted": "interrupted",
    "cancelled": "cancelled",
    "succeeded": "succeeded",
}


class Verdict(TypedDict):
    code: str  # one of LABELS: also the CSS class suffix
    label: str  # what the badge says
    why: str  # the rejection or the failure, "" when there is nothing to explain
    output_kind: str  # tool_call | final_patch | text | invalid | ""


def verdict(
    *,
    kind: str,
    status: str,
    validation_status: str = "",
    model_output_kind: str = "",
    validation_errors: Iterable[Any] = (),
    parse_error: str = "",
    failure_class: str = "",
    failure_message: str = "",
    rejection: str = "",
) -> Verdict:
    """The badge of one source invocation. The row's validation errors (or parse error) say why
    a generation was rejected; ``rejection``, the retry lane's complaint from the attempt's
    ``generation_rejected`` event, is used only when the row says nothing."""

    def made(code: str, why: str = "") -> Verdict:
        return {"code": code, "label": LABELS[code], "why": why, "output_kind": model_output_kind}

    if status == "running":
        return made("running")
    if status == "interrupted":
        return made("interrupted", failure_message)
    if status == "cancelled" or failure_class == "attempt_ended":
        return made("cancelled", failure_message)
    if status == "failed":
        why = f"{failure_class}: {failure_message}" if failure_class else failure_message
        return made("transport_failed" if failure_class in TRANSPORT_CLASSES else "failed", why)
    if kind != "llm_generation":
        return made("succeeded")
    if validation_status == "invalid" or model_output_kind == "invalid":
        # The row's own reason first, so the text read while the attempt runs is the text read
        # after it commits (the event's complaint arrives later, and only as a fallback).
        errors = [e.get("message", e) if isinstance(e, dict) else e for e in validation_errors]
        why = str(errors[0]) if errors else ""
        if not why and parse_error:
            why = f"not valid JSON: {parse_error}"
        return made("rejected", why or rejection or "the output failed validation")
    if validation_status == "valid":
        return made("accepted")
    # A generation nothing judged (no node asked for a verdict): the stream ended, no more.
    return made("succeeded")


class TraceDetail(TypedDict):
    validation_errors: list[Any]
    parse_error: str
    live_ttft_ms: int | None  # the first chunk's arrival while the call still streams
    last_message: Any  # the generation's last request message (the corrective one on a retry)
    previous_message: Any  # the one before it (the user turn a corrective message follows)
    reply: str  # the generation's reply as it streamed, its first REPLY_CHARS characters
    request: Any  # non-LLM calls only: what was sent
    response_json: Any  # non-LLM calls only: what came back


REPLY_CHARS = 8000


def trace_details(*, attempt_id: UUID) -> dict[str, TraceDetail]:
    """What the timeline needs beyond the invocation summaries, keyed by invocation id (as
    text): one query whatever the number of calls. The last request message is read inside
    PostgreSQL (``messages -> -1``), so a long conversation is never loaded to show it."""
    first_chunk = LlmChunk.objects.filter(call_id=OuterRef("llm_call__id"), seq=0).values(
        "offset_ms"
    )[:1]
    rows = (
        SourceInvocation.objects.filter(attempt_id=attempt_id)
        .annotate(
            first_chunk_ms=Subquery(first_chunk),
            last_message=KeyTransform("-1", "llm_call__messages"),
            previous_message=KeyTransform("-2", "llm_call__messages"),
            reply=Substr("llm_call__raw_text", 1, REPLY_CHARS),
        )
        .values(
            "id",
            "kind",
            "validation_errors",
            "llm_call__parse_error",
            "first_chunk_ms",
            "last_message",
            "previous_message",
            "reply",
            "request",
            "response_json",
        )
    )
    details: dict[str, TraceDetail] = {}
    for row in rows:
        llm = row["kind"] == "llm_generation"
        details[str(row["id"])] = {
            "validation_errors": row["validation_errors"] or [],
            "parse_error": row["llm_call__parse_error"] or "",
            "live_ttft_ms": row["first_chunk_ms"],
            "last_message": row["last_message"] if llm else None,
            "previous_message": row["previous_message"] if llm else None,
            "reply": (row["reply"] or "") if llm else "",
            "request": None if llm else row["request"],
            "response_json": None if llm else row["response_json"],
        }
    return details


def invocation_verdict(row: Mapping[str, Any], rejection: str = "") -> Verdict:
    """The verdict of an invocation read as a dict (summary or full row)."""
    return verdict(
        kind=row["kind"],
        status=row["status"],
        validation_status=row.get("validation_status") or "",
        model_output_kind=row.get("model_output_kind") or "",
        validation_errors=row.get("validation_errors") or (),
        parse_error=row.get("parse_error") or "",
        failure_class=row.get("failure_class") or "",
        failure_message=row.get("failure_message") or "",
        rejection=rejection,
    )


class NodeGeneration(TypedDict):
    invocation_id: UUID
    llm_call_id: UUID | None
    generation_attempt: int | None
    verdict: Verdict
    tool_name: str  # the tool its accepted tool call ran, "" otherwise


def node_generations(*, attempt_id: UUID, subject_id: str, node_id: str) -> list[NodeGeneration]:
    """Every generation of one node of one subject in one attempt, in order, with its verdict:
    what a conversation's appended messages answered (one query)."""
    rows = (
        SourceInvocation.objects.filter(
            attempt_id=attempt_id, subject_id=subject_id, node_id=node_id, kind="llm_generation"
        )
        .order_by("seq")
        .values(
            "id",
            "kind",
            "status",
            "generation_attempt",
            "validation_status",
            "model_output_kind",
            "validation_errors",
            "failure_class",
            "failure_message",
            "llm_call__id",
            "llm_call__parse_error",
            "children__tool_name",
        )
    )
    seen: dict[UUID, NodeGeneration] = {}
    for row in rows:
        if row["id"] in seen:
            continue
        seen[row["id"]] = {
            "invocation_id": row["id"],
            "llm_call_id": row["llm_call__id"],
            "generation_attempt": row["generation_attempt"],
            "verdict": invocation_verdict({**row, "parse_error": row["llm_call__parse_error"]}),
            "tool_name": row["children__tool_name"] or "",
        }
    return list(seen.values())
