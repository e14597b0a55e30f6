"""The rows of one source call: its ``SourceInvocation``, written ``running`` before any byte is
sent and finished as ``succeeded``, ``failed``, ``cancelled`` or ``interrupted`` whatever
happens. A source does the transport and judges the reply; what it hands here is written (the
SQL is built in this package only)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn, Protocol
from uuid import UUID

from django.utils import timezone

from chukwa_core.json_values import storable_text
from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from cognition_app.recording.port import Recorder, trace_batch, trace_write
from cognition_app.redaction import scrub
from cognition_app.rows import Statement, insert_statement, update_statement

logger = logging.getLogger(__name__)


class CallOwner(Protocol):
    """Where a call is made: the identity its rows carry and the recorder they are written with
    (``cognition_app.sources.CallContext`` is one)."""

    attempt_id: UUID | None
    world_id: int | None
    attempted_turn: int
    workflow_hash: str
    node_id: str
    subject_id: str
    ambient_source_id: str
    tool_name: str
    parent_id: UUID | None
    generation_attempt: int | None
    tool_loop_round: int | None
    retry_of: UUID | None
    recorder: Recorder

    def next_seq(self) -> int:
        """The next invocation number of the attempt (in the order rows are opened)."""
        ...


class CallRecord:
    """One call's invocation row and the recorder it is written with."""

    # The JSON fields of the invocation row that the caller built from canonical JSON (the
    # request): written without being checked again (``insert_statement(checked=…)``).
    checked: tuple[str, ...] = ()

    def __init__(self, invocation: SourceInvocation, recorder: Recorder) -> None:
        self.invocation = invocation
        self.recorder = recorder
        # fields of the row settled after it was opened (:meth:`waited`), written with its
        # finish
        self._settled: dict[str, Any] = {}

    @classmethod
    def new(
        cls,
        owner: CallOwner,
        *,
        kind: str,
        source_hash: str,
        source: Mapping[str, Any],
        request: Any,
        request_key: str,
        input_schema_hash: str = "",
        output_schema_hash: str = "",
        replayed_from: UUID | None = None,
        reuse_key: str = "",
        reused_from: UUID | None = None,
    ) -> CallRecord:
        """The record of a new call, not written yet (:meth:`open` it before sending)."""
        return cls(
            SourceInvocation(
                attempt_id=owner.attempt_id,
                world_id=owner.world_id,
                attempted_turn=owner.attempted_turn,
                seq=owner.next_seq(),
                workflow_hash=owner.workflow_hash,
                node_id=owner.node_id,
                subject_id=owner.subject_id,
                source_hash=source_hash,
                source_label=source.get("label", ""),
                kind=kind,
                ambient_source_id=owner.ambient_source_id,
                tool_name=owner.tool_name,
                parent_id=owner.parent_id,
                started_at=timezone.now(),
                request=request,
                request_key=request_key,
                input_schema_hash=input_schema_hash,
                output_schema_hash=output_schema_hash,
                generation_attempt=owner.generation_attempt,
                tool_loop_round=owner.tool_loop_round,
                retry_of_id=owner.retry_of,
                replayed_from=replayed_from,
                reuse_key=reuse_key,
                reused_from=reused_from,
            ),
            owner.recorder,
        )

    @property
    def pk(self) -> UUID:
        return self.invocation.pk

    # --- opening -----------------------------------------------------------------------

    def open(self) -> None:
        """Write the row ``running``: before any byte is sent."""
        self.recorder.open(self._opening())

    def _opening(self) -> list[Statement]:
        return [insert_statement(self.invocation, checked=self.checked)]

    def waited(self, waited_ms: int | None, limit: str) -> None:
        """The row was opened before the call's limits were passed (holding no slot
        meanwhile), and they have answered: the call starts now, with what it waited for.
        Written with its finish, so that the finished row reads as one opened after the wait."""
        self.invocation.started_at = timezone.now()
        self.invocation.limit_wait_ms, self.invocation.limit_wait = waited_ms, limit
        self._settled = {
            "started_at": self.invocation.started_at,
            "limit_wait_ms": waited_ms,
            "limit_wait": limit,
        }

    def write_finished(
        self, status: str, *, ended_at: datetime | None = None, **fields: Any
    ) -> None:
        """Write the row once, already finished (a call served from a recording, or refused
        before anything was sent): it never runs. ``ended_at`` defaults to its start."""
        inv = self.invocation
        ended_at = ended_at or inv.started_at
        for name, value in {**fields, "status": status, "ended_at": ended_at}.items():
            setattr(inv, name, value)
        inv.duration_ms = _ms_since(inv.started_at, ended_at)
        self.recorder.open(self._opening())

    def refused(self, failure: SourceFailure) -> SourceFailure:
        """A call refused before any byte was sent (a variable missing, a replay miss, a budget
        spent…): its row written once, failed; returns ``failure`` naming it."""
        self.write_finished(
            InvocationStatus.FAILED,
            failure_class=failure.failure_class,
            failure_message=failure.message,
        )
        failure.invocation_id = self.pk
        return failure

    # --- finishing -----------------------------------------------------------------------

    def succeed(self, after: Callable[[], None] | None = None, **fields: Any) -> None:
        """Finish the row ``succeeded`` with ``fields``, through the recorder (perhaps on its
        writer thread), then ``after``."""
        self.recorder.finish([self.finish_statement(InvocationStatus.SUCCEEDED, **fields)], after)
        log_finished(self.invocation)

    def succeed_now(self, **fields: Any) -> None:
        """:meth:`succeed`, written before this returns (a check whose verdict other calls
        wait for)."""
        trace_batch(
            [
                *self.finishing_rows(InvocationStatus.SUCCEEDED),
                self.finish_statement(InvocationStatus.SUCCEEDED, **fields),
            ]
        )
        log_finished(self.invocation)

    def finishing_rows(self, status: str, error: str = "") -> list[Statement]:
        """The statements finishing this call's other rows with its invocation (none here; a
        conformance check's LLM call, ``CheckRecord``)."""
        return []

    def fail(self, failure_class: str, message: str, **fields: Any) -> NoReturn:
        """Finish the row ``failed`` now (the message scrubbed of every key) and raise the
        :class:`SourceFailure` naming it."""
        message = storable_text(scrub(message))
        trace_batch(
            [
                *self.finishing_rows(InvocationStatus.FAILED, message),
                self.finish_statement(
                    InvocationStatus.FAILED,
                    failure_class=failure_class,
                    failure_message=message,
                    **fields,
                ),
            ]
        )
        log_finished(self.invocation)
        raise SourceFailure(
            failure_class,
            message,
            invocation_id=self.pk,
            http_status=fields.get("http_status"),
            retry_after=(fields.get("response_headers") or {}).get("retry-after"),
        )

    def finish_statement(self, status: str, **fields: Any) -> Statement:
        """The UPDATE finishing the row (status, end, duration and ``fields``; the instance is
        updated too). It finishes a row still ``running`` only: a worker that wakes after the
        reaper interrupted its attempt leaves the row ``interrupted``, as the attempt is."""
        inv = self.invocation
        now = timezone.now()
        fields.update(self._settled)
        fields.update(status=status, ended_at=now, duration_ms=_ms_since(inv.started_at, now))
        statement = update_statement(SourceInvocation, inv.pk, fields, while_running=True)
        for key, value in fields.items():
            setattr(inv, key, value)
        return statement

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Whatever escapes between opening the rows and finishing them (a bug, a stopped
        thread, a database error) still finishes them as ``failed`` before it propagates."""
        try:
            yield
        except SourceFailure:
            raise  # raised by a path that finished its rows
        except BaseException as exc:
            self._failed_internally(scrub(f"internal error: {type(exc).__name__}: {exc}")[:2000])
            raise

    def _failed_internally(self, message: str, call: LlmCall | None = None) -> None:
        inv = self.invocation
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
            logger.warning("could not finish invocation %s after an internal error", inv.pk)


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


def _ms_since(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds() * 1000)
