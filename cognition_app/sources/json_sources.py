"""One entry for the JSON sources a workflow calls (ambient sources, model-elected tools, rule
plans): the source's interface picks ``http_json`` or ``mcp_tool``; both trace, validate and
replay the same way and return the same :class:`JsonResult`."""

from __future__ import annotations

from typing import Any

from cognition_app.sources.components import source_content
from cognition_app.sources.context import CallContext
from cognition_app.sources.http_json import invoke_http_json
from cognition_app.sources.mcp_tool import invoke_mcp_tool
from cognition_app.sources.results import JsonResult


def invoke_json_source(
    *,
    source_hash: str,
    body: Any,
    ctx: CallContext,
    kind: str,
    result_schema_hash: str = "",
    input_schema_hash: str = "",
) -> JsonResult:
    invoke = (
        invoke_mcp_tool
        if source_content(source_hash)["interface"]["name"] == "mcp_tool"
        else invoke_http_json
    )
    return invoke(
        source_hash=source_hash,
        body=body,
        ctx=ctx,
        kind=kind,
        result_schema_hash=result_schema_hash,
        input_schema_hash=input_schema_hash,
    )
