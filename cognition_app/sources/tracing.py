"""The durable trace rows of a source call: each row is written ``running`` before any
byte is sent and finished as ``succeeded``, ``failed`` or ``interrupted`` whatever happens."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, Protocol
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from chukwa_core.json_values import storable_text
from cognition_app.budgets import BudgetLedger
from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from cognition_app.rows import (
    BatchResults,
    Statement,
    send_batch,
    update_statement,
)
from cognition_app.sources.cancel import CancelScope
from cognition_app.sources.failure import SourceFailure
from cognition_app.sources.variables import scrub

logger = logging.getLogger(__name__)


class ReplaySource(Protocol):
    """What a call needs of its world's replay (``cognition_app.sources.replay.Replay``)."""

    source_world_slug: str
    strict: bool

    def take(self, key: str) -> SourceInvocation | None: ...


@dataclass
class CallContext:
    attempt_id: UUID
    world_id: int
    world_slug: str
    attempted_turn: int
    next_seq: Callable[[], int]
    workflow_hash: str = ""
    node_id: str = ""
    subject_id: str = ""
    ambient_source_id: str = ""
    tool_name: str = ""
    parent_id: UUID | None = None
    generation_attempt: int | None = None
    tool_loop_round: int | None = None
    # a later try of a call (its source's ``retry`` policy): the first try's row
    retry_of: UUID | None = None
    # the world's seed (chukwa_core.seeds): an LLM call whose source fixes no seed sends one
    # derived from it; None for an unseeded world
    world_seed: int | None = None
    # Set when the world replays another: the worlds layer decides which recordings
    # count and hands them down here, since this layer may not look up worlds.
    replay: ReplaySource | None = None
    # the world's budget in force for this attempt, handed down by the worlds layer,
    # with what the attempt's calls in flight could still spend
    budget: BudgetLedger | None = None
    # stops the calls of subjects still thinking once another subject failed
    cancel: CancelScope | None = None
    # writes the attempt's events so far and then the statements opening a call's
    # rows, in one round trip (``open_rows``): a reader of the timeline never sees a call whose
    # preceding events are missing
    write_rows: Callable[[Sequence[Statement]], BatchResults] | None = None
    # finishes a call's rows on the writer thread while the subject goes on
    # (``write_behind.TraceWriter.submit``; the attempt waits for them before it ends)
    write_behind: Callable[[Sequence[Statement], Callable[[], None] | None], None] | None = None

    def check_cancelled(self, what: str) -> None:
        if self.cancel is not None:
            self.cancel.check(what)

    def headers(self, invocation_id: UUID) -> dict[str, str]:
        return {
            "X-Chukwa-World": self.world_slug,
            "X-Chukwa-Attempt": str(self.attempt_id),
            "X-Chukwa-Turn": str(self.attempted_turn),
            "X-Chukwa-Subject": self.subject_id,
            "X-Chukwa-Invocation": str(invocation_id),
        }


def new_invocation(
    ctx: CallContext,
    *,
    kind: str,
    source_hash: str,
    source: Mapping[str, Any],
    request: Any,
    request_key: str,
    input_schema_hash: str = "",
    output_schema_hash: str = "",
) -> SourceInvocation:
    """The (unsaved) row of a new call: write it with :func:`open_rows`."""
    return SourceInvocation(
        attempt_id=ctx.attempt_id,
        world_id=ctx.world_id,
        attempted_turn=ctx.attempted_turn,
        seq=ctx.next_seq(),
        workflow_hash=ctx.workflow_hash,
        node_id=ctx.node_id,
        subject_id=ctx.subject_id,
        source_hash=source_hash,
        source_label=source.get("label", ""),
        kind=kind,
        ambient_source_id=ctx.ambient_source_id,
        tool_name=ctx.tool_name,
        parent_id=ctx.parent_id,
        started_at=timezone.now(),
        request=request,
        request_key=request_key,
        input_schema_hash=input_schema_hash,
        output_schema_hash=output_schema_hash,
        generation_attempt=ctx.generation_attempt,
        tool_loop_round=ctx.tool_loop_round,
        retry_of_id=ctx.retry_of,
    )


@contextmanager
def trace_write() -> Iterator[None]:
    """One transaction for trace rows, committed without waiting for the WAL flush.

    Committed rows are visible to every other session at once (the reviewer's timeline, the
    reaper); only a crash of the PostgreSQL server itself could lose the last few hundred
    milliseconds of trace writes — a worker crash loses nothing. What such a crash loses is what
    a worker crash at the same moment would lose: a call's opening is durable (:func:`open_rows`),
    so a lost finishing write leaves its row ``running`` for the reaper, and a turn's commit is
    synchronous, which flushes every trace write before it. Each generation writes its
    rows in a handful of such transactions instead of one synchronous commit per statement.
    The hot path sends its statements with :func:`trace_batch` instead (one round trip).
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_SYNC_COMMIT_OFF)
        yield


def trace_batch(statements: Sequence[Statement]) -> BatchResults:
    """Trace writes in one round trip and one transaction (the caller's, if one is open):
    ``synchronous_commit`` off for the transaction, and the statements (``cognition_app.rows.
    send_batch``) — what :func:`trace_write` does in ``2 + len(statements)`` round trips.

    Returns, per statement, the rows it returned (a SELECT, an ``… RETURNING``), else None."""
    if not statements:
        return []
    return send_batch([(_SYNC_COMMIT_OFF, []), *statements])[1:]


# For the batch's transaction only (is_local). Not ``SET LOCAL``: outside a transaction block (a
# pipeline's implicit transaction, on the writer thread or a subject's autocommit connection) it
# takes effect too, but PostgreSQL warns, to the client and into its log, once per batch.
_SYNC_COMMIT_OFF = "SELECT set_config('synchronous_commit', 'off', true)"


def open_rows(ctx: CallContext, statements: Sequence[Statement]) -> BatchResults:
    """Write the rows a call opens (or a call that never went out writes, already finished)
    after the attempt's pending events, in one round trip: every first write of an invocation
    goes through here, before any byte is sent."""
    if ctx.write_rows is not None:
        return ctx.write_rows(statements)
    return send_batch(statements)  # committed durably, as an event log's opening is


def finish_statement(inv: SourceInvocation, status: str, **fields: Any) -> Statement:
    """The UPDATE that finishes an invocation row (status, end, duration and ``fields``); the
    instance is updated too. Send it with :func:`trace_batch`, then :func:`log_finished`. It
    finishes a row still ``running`` only: a worker that wakes after the reaper interrupted its
    attempt leaves the row ``interrupted``, as the attempt is, instead of rewriting it."""
    now = timezone.now()
    fields.update(status=status, ended_at=now, duration_ms=_ms_since(inv.started_at, now))
    statement = update_statement(SourceInvocation, inv.pk, fields, while_running=True)
    for key, value in fields.items():
        setattr(inv, key, value)
    return statement


def log_finished(inv: SourceInvocation) -> None:
    # Ids and outcome only: never the request (its headers carry keys) nor the response.
    logger.info(
        "source call finished",
        extra={
            "invocation": str(inv.pk),
            "kind": inv.kind,
            "source": inv.source_label or inv.source_hash[:12],
            "node": inv.node_id,
            "status": inv.status,
            "failure_class": inv.failure_class,
            "duration_ms": inv.duration_ms,
        },
    )


def finish_invocation(inv: SourceInvocation, status: str, **fields: Any) -> None:
    trace_batch([finish_statement(inv, status, **fields)])
    log_finished(inv)


def finish_rows(
    ctx: CallContext, statements: Sequence[Statement], after: Callable[[], None] | None = None
) -> None:
    """The statements finishing a call that succeeded, then ``after``: handed to the attempt's
    writer thread when it has one (``write_behind``; the subject does not wait for the round
    trip), else sent now. Inside a transaction they are sent now, in it: another connection
    could not see the rows they finish."""
    if ctx.write_behind is not None and not connection.in_atomic_block:
        ctx.write_behind(statements, after)
        return
    try:
        trace_batch(statements)
    finally:
        if after is not None:
            after()


def finish_succeeded(ctx: CallContext, inv: SourceInvocation, **fields: Any) -> None:
    """:func:`finish_invocation` as ``succeeded``, through :func:`finish_rows`."""
    finish_rows(ctx, [finish_statement(inv, InvocationStatus.SUCCEEDED, **fields)])
    log_finished(inv)


def _ms_since(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds() * 1000)


@contextmanager
def finished_on_error(inv: SourceInvocation, call: LlmCall | None = None) -> Iterator[None]:
    """Whatever escapes between opening a row and finishing it (a bug, a stopped thread, a
    database error) still finishes the row as ``failed`` before it propagates."""
    try:
        yield
    except SourceFailure:
        raise  # raised by a path that finished its rows
    except BaseException as exc:
        message = scrub(f"internal error: {type(exc).__name__}: {exc}")[:2000]
        now = timezone.now()
        try:
            with trace_write():
                SourceInvocation.objects.filter(pk=inv.pk, status=InvocationStatus.RUNNING).update(
                    status=InvocationStatus.FAILED,
                    failure_class="internal_error",
                    failure_message=storable_text(message),
                    ended_at=now,
                    duration_ms=_ms_since(inv.started_at, now),
                )
                if call is not None:
                    LlmCall.objects.filter(pk=call.pk, status=InvocationStatus.RUNNING).update(
                        status=InvocationStatus.FAILED, ended_at=now, error=storable_text(message)
                    )
        except Exception:  # noqa: BLE001 - the database itself failed; the reaper finishes it
            logger.warning("could not finish invocation %s after %s", inv.pk, type(exc).__name__)
        raise


def fail_invocation(
    inv: SourceInvocation, failure_class: str, message: str, **fields: Any
) -> NoReturn:
    message = storable_text(scrub(message))
    finish_invocation(
        inv, InvocationStatus.FAILED, failure_class=failure_class, failure_message=message, **fields
    )
    raise SourceFailure(
        failure_class,
        message,
        invocation_id=inv.pk,
        http_status=fields.get("http_status"),
        retry_after=(fields.get("response_headers") or {}).get("retry-after"),
    )


def _close_running(attempt_id: UUID, status: str, failure_class: str, reason: str) -> int:
    now = timezone.now()
    ids = list(
        SourceInvocation.objects.filter(
            attempt_id=attempt_id, status=InvocationStatus.RUNNING
        ).values_list("pk", flat=True)
    )
    if not ids:
        return 0
    SourceInvocation.objects.filter(pk__in=ids).update(
        status=status, ended_at=now, failure_class=failure_class, failure_message=reason
    )
    LlmCall.objects.filter(invocation_id__in=ids, status=InvocationStatus.RUNNING).update(
        status=status, ended_at=now, error=reason
    )
    return len(ids)


def interrupt_running(*, attempt_id: UUID, reason: str) -> int:
    """The reaper's part: running rows of a dead attempt become ``interrupted``."""
    return _close_running(attempt_id, InvocationStatus.INTERRUPTED, "interrupted", reason)


def finish_running(*, attempt_id: UUID, reason: str) -> int:
    """When an attempt fails, rows it left open become ``failed`` (every row opened is
    finished); normally there are none, since each call finishes its own rows."""
    return _close_running(attempt_id, InvocationStatus.FAILED, "attempt_ended", reason)
