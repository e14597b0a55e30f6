"""What the JSON sources (``http_json``, ``mcp_tool``) share once a reply is in hand: the result
they return, the check against the call's result schema, and serving a call from a recording."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.utils import timezone

from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationStatus, SourceInvocation
from cognition_app.recording import CallRecord
from cognition_app.sources.components import schema_errors, schema_validator
from cognition_app.sources.context import CallContext
from cognition_app.sources.replay import fail_miss, open_replayed


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


def serve_replayed(
    call: CallRecord, record: SourceInvocation, result_schema_hash: str
) -> JsonResult:
    """Serve the call from ``record``: its reply, traced as this call's, no byte sent, so the row
    is written once, already finished. The reply is checked against *this* call's result schema
    (a fork may have changed the schema without changing the request)."""
    call.invocation.request["url"] = record.request.get("url", "")
    value = record.response_json
    errors, problem = result_schema_problem(value, result_schema_hash)
    fields: dict[str, Any] = {
        "http_status": record.http_status,
        "response_headers": record.response_headers,
        "response_text": record.response_text,
        "response_json": value,
    }
    if result_schema_hash:
        fields["validation_status"] = "invalid" if errors else "valid"
        fields["validation_errors"] = errors
    message = ""
    if errors:
        message = f"replayed response does not match its result schema: {problem}"
        fields.update(failure_class="schema_invalid", failure_message=message)
    status = InvocationStatus.FAILED if errors else InvocationStatus.SUCCEEDED
    call.write_finished(status, ended_at=timezone.now(), **fields)
    if errors:
        raise SourceFailure("schema_invalid", message, invocation_id=call.pk)
    return JsonResult(value, call.pk)


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
) -> JsonResult | CallRecord:
    """Serve the call from the world's recording when it replays one: the recorded reply, or
    a traced miss in strict mode (which raises). Otherwise the call goes live: its new record,
    not yet written (the caller opens it before sending)."""
    record = ctx.replay.take(key) if ctx.replay is not None else None
    if record is not None:
        return serve_replayed(
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
    return CallRecord.new(
        ctx,
        kind=kind,
        source_hash=source_hash,
        source=source,
        request=request,
        request_key=key,
        input_schema_hash=input_schema_hash,
        output_schema_hash=result_schema_hash,
    )
