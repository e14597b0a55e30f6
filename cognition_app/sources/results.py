"""What the JSON sources (``http_json``, ``mcp_tool``) share once a reply is in hand: the result
they return, the check against the call's result schema, and serving a call from a recording."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.utils import timezone

from cognition_app.models import InvocationStatus, SourceInvocation
from cognition_app.rows import insert_statement
from cognition_app.sources.components import schema_errors, schema_validator
from cognition_app.sources.failure import SourceFailure
from cognition_app.sources.replay import fail_miss, open_replayed
from cognition_app.sources.tracing import CallContext, new_invocation, open_rows


@dataclass(frozen=True)
class JsonResult:
    value: Any
    invocation_id: UUID


def result_schema_problem(value: Any, result_schema_hash: str) -> tuple[list[dict[str, str]], str]:
    """The validation errors of ``value`` against the call's result schema (none when the call
    names no schema) and the message naming the first one."""
    if not result_schema_hash:
        return [], ""
    errors = schema_errors(schema_validator(result_schema_hash), value)
    if not errors:
        return [], ""
    return errors, f"{errors[0]['pointer'] or '(root)'}: {errors[0]['message']}"


def fail_unsent(ctx: CallContext, inv: SourceInvocation, exc: SourceFailure) -> SourceFailure:
    """A call refused before any byte was sent (a variable missing or malformed, arguments an
    interface cannot carry): its row is written once, already failed, and ``exc`` names it."""
    inv.status = InvocationStatus.FAILED
    inv.failure_class, inv.failure_message = exc.failure_class, exc.message
    inv.ended_at = inv.started_at
    inv.duration_ms = 0
    open_rows(ctx, [insert_statement(inv)])
    exc.invocation_id = inv.pk
    return exc


def serve_replayed(
    ctx: CallContext, inv: SourceInvocation, record: SourceInvocation, result_schema_hash: str
) -> JsonResult:
    """Serve the call from ``record``: its reply, traced as this call's, no byte sent, so the row
    is written once, already finished. The reply is checked against *this* call's result schema
    (a fork may have changed the schema without changing the request)."""
    inv.request["url"] = record.request.get("url", "")
    inv.http_status = record.http_status
    inv.response_headers = record.response_headers
    inv.response_text = record.response_text
    inv.response_json = value = record.response_json
    errors, problem = result_schema_problem(value, result_schema_hash)
    if result_schema_hash:
        inv.validation_status = "invalid" if errors else "valid"
        inv.validation_errors = errors
    message = ""
    if errors:
        message = f"replayed response does not match its result schema: {problem}"
        inv.status, inv.failure_class, inv.failure_message = (
            InvocationStatus.FAILED,
            "schema_invalid",
            message,
        )
    else:
        inv.status = InvocationStatus.SUCCEEDED
    inv.ended_at = timezone.now()
    inv.duration_ms = int((inv.ended_at - inv.started_at).total_seconds() * 1000)
    open_rows(ctx, [insert_statement(inv)])
    if errors:
        raise SourceFailure("schema_invalid", message, invocation_id=inv.pk)
    return JsonResult(value, inv.pk)


def replayed_or_new(
    ctx: CallContext,
    *,
    kind: str,
    source_hash: str,
    source: dict[str, Any],
    request: dict[str, Any],
    key: str,
    input_schema_hash: str,
    result_schema_hash: str,
    what: str,
) -> JsonResult | SourceInvocation:
    """Serve the call from the world's recording when it replays one: the recorded reply, or
    a traced miss in strict mode (which raises). Otherwise the call goes live: its new row,
    not yet written (the caller opens it with ``open_rows`` before sending)."""
    record = ctx.replay.take(key) if ctx.replay is not None else None
    if record is not None:
        return serve_replayed(
            ctx,
            open_replayed(
                ctx,
                kind=kind,
                source_hash=source_hash,
                source=source,
                request=request,
                key=key,
                record=record,
                input_schema_hash=input_schema_hash,
                output_schema_hash=result_schema_hash,
            ),
            record,
            result_schema_hash,
        )
    if ctx.replay is not None and ctx.replay.strict:
        fail_miss(
            ctx,
            kind=kind,
            source_hash=source_hash,
            source=source,
            request=request,
            key=key,
            what=what,
        )
    return new_invocation(
        ctx,
        kind=kind,
        source_hash=source_hash,
        source=source,
        request=request,
        request_key=key,
        input_schema_hash=input_schema_hash,
        output_schema_hash=result_schema_hash,
    )
