"""Recording source calls: the one place that writes their trace rows.

A source (``cognition_app.sources``) does the transport and judges what came back; the rows of
its call are a :class:`CallRecord` (a generation's: :class:`GenerationRecord`) that it opens
before any byte is sent and then tells how the call ended — its chunks, ``succeed``, ``fail`` —
and that builds every statement. How the statements reach the database is the
:class:`Recorder`'s: :data:`DIRECT` outside any attempt, the attempt's own recorder
(``worlds_app.services.attempt_recorder``) inside one. See ``docs/architecture.md``.
"""

from cognition_app.recording.calls import CallOwner, CallRecord, log_finished
from cognition_app.recording.closing import (
    finish_running,
    interrupt_running,
    interrupt_running_of,
    interrupt_stale_unattached,
)
from cognition_app.recording.generations import CheckRecord, GenerationRecord, Verdict
from cognition_app.recording.port import DIRECT, DirectRecorder, Recorder, trace_batch
from cognition_app.recording.write_behind import Held, TraceWriter

__all__ = [
    "DIRECT",
    "CallOwner",
    "CallRecord",
    "CheckRecord",
    "DirectRecorder",
    "GenerationRecord",
    "Held",
    "Recorder",
    "TraceWriter",
    "Verdict",
    "finish_running",
    "interrupt_running",
    "interrupt_running_of",
    "interrupt_stale_unattached",
    "log_finished",
    "trace_batch",
]
