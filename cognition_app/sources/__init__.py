"""The source layer: one way to invoke any response source, traced durably.

A source does the transport and judges what came back; its call's rows are recorded through
``cognition_app.recording``: the SourceInvocation row (and, for LLM generations, its LlmCall
row) written ``running`` before any byte is sent, streamed chunks appended in small batches,
the rows finished as ``succeeded``, ``failed`` or ``cancelled``.
URLs and keys come only from ``CHUKWA_*`` environment variables named by the source.
``http_json`` and ``mcp_tool`` sources are called through one entry (``json_sources``).

The package's modules each hold one part (see their docstrings); this module names what the
other layers call, so that they import ``cognition_app.sources`` and nothing below it.
"""

from cognition_app.failures import SourceFailure
from cognition_app.redaction import scrub, scrub_json
from cognition_app.sources.cancel import CANCELLED, CancelScope
from cognition_app.sources.components import (
    schema_content,
    schema_errors,
    schema_validator,
    source_content,
)
from cognition_app.sources.context import CallContext
from cognition_app.sources.generation import Generation, Judge, Judgement
from cognition_app.sources.json_sources import invoke_json_source
from cognition_app.sources.llm import invoke_llm
from cognition_app.sources.replay import REPLAY_MODES, REPLAY_STRICT, Replay
from cognition_app.sources.results import JsonResult
from cognition_app.sources.reuse import REUSE_MODES

# The name the ambient, rule-plan and tool-loop callers have always used: it dispatches on the
# source's interface (http_json or mcp_tool), so adding mcp_tool changed none of those callers.
invoke_http_json = invoke_json_source

__all__ = [
    "CANCELLED",
    "REPLAY_MODES",
    "REPLAY_STRICT",
    "REUSE_MODES",
    "CallContext",
    "CancelScope",
    "Generation",
    "JsonResult",
    "Judge",
    "Judgement",
    "Replay",
    "SourceFailure",
    "invoke_http_json",
    "invoke_json_source",
    "invoke_llm",
    "schema_content",
    "schema_errors",
    "schema_validator",
    "scrub",
    "scrub_json",
    "source_content",
]
