"""The source layer: one way to invoke any response source, traced durably (SPEC §5, §7).

Every call starts by writing its SourceInvocation row (and, for LLM generations, its LlmCall
row) with status ``running`` in a transaction of its own, before any byte is sent; streamed
chunks are appended in small batches; the rows are finished as ``succeeded`` or ``failed``.
URLs and keys come only from ``CHUKWA_*`` environment variables named by the source.
``mcp_tool`` is reserved and not executable (chukwa_core.component_validation).

The package's modules each hold one part (see their docstrings); this module names what the
other layers call, so that they import ``cognition_app.sources`` and nothing below it.
"""

from cognition_app.sources.cancel import CANCELLED, CancelScope
from cognition_app.sources.client import http_client
from cognition_app.sources.components import (
    schema_content,
    schema_errors,
    schema_validator,
    source_content,
)
from cognition_app.sources.failure import SourceFailure
from cognition_app.sources.generation import Generation, Judge, Judgement
from cognition_app.sources.http_json import invoke_http_json
from cognition_app.sources.llm import invoke_llm
from cognition_app.sources.replay import REPLAY_MODES, REPLAY_STRICT, Replay
from cognition_app.sources.tracing import (
    CallContext,
    finish_running,
    interrupt_running,
)
from cognition_app.sources.variables import scrub

__all__ = [
    "CANCELLED",
    "REPLAY_MODES",
    "REPLAY_STRICT",
    "CallContext",
    "CancelScope",
    "Generation",
    "Judge",
    "Judgement",
    "Replay",
    "SourceFailure",
    "finish_running",
    "http_client",
    "interrupt_running",
    "invoke_http_json",
    "invoke_llm",
    "schema_content",
    "schema_errors",
    "schema_validator",
    "scrub",
    "source_content",
]
