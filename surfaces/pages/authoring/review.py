"""The review before saving: what the edited workflow would be stored as (its hash, with inline
parts resolved, in a dry run) and how it differs from the version it was derived from.

The diff is over flattened paths (``/nodes/0/max_tool_calls = 3``) rather than pretty JSON, and
a multi-line string is shown line by line under its path, so a one-word change in a prompt is one
changed line, not a changed 2,000-character JSON string.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from chukwa_core.errors import invalid
from chukwa_core.ids import is_hash
from scenarios_app.selectors import workflow_content
from scenarios_app.services import workflow_draft
from surfaces.pages.authoring.common import parse_content, rolled_back
from surfaces.pages.word_diff import mark_words

CONTEXT_LINES = 3
MAX_DIFF_LINES = 2000


def flatten(value: Any, path: str = "") -> list[str]:
    """One line per scalar, ``<json pointer> = <json value>``; keys sorted; a string with line
    breaks becomes its path followed by its lines, indented."""
    if isinstance(value, dict):
        if not value:
            return [f"{path or '/'} = {{}}"]
        lines: list[str] = []
        for key in sorted(value):
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            lines.extend(flatten(value[key], f"{path}/{escaped}"))
        return lines
    if isinstance(value, list):
        if not value:
            return [f"{path or '/'} = []"]
        lines = []
        for index, item in enumerate(value):
            lines.extend(flatten(item, f"{path}/{index}"))
        return lines
    if isinstance(value, str) and "\n" in value:
        return [f"{path} ="] + [f"    {line}" for line in value.split("\n")]
    return [f"{path or '/'} = {json.dumps(value, ensure_ascii=False)}"]


def diff_rows(before: list[str], after: list[str]) -> list[dict[str, Any]]:
    """The unified diff as rows, a line edited in place marked word by word."""
    rows: list[dict[str, Any]] = []
    for line in difflib.unified_diff(before, after, n=CONTEXT_LINES, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        kind = {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "ctx")
        rows.append({"kind": kind, "text": line[1:] if kind != "hunk" else line})
    return mark_words(rows)


def parent_content(derived_from: str) -> Any:
    if not is_hash(derived_from):
        raise invalid(
            "invalid_hash", "derived_from", f"{derived_from[:80]!r} is not a lowercase sha256 hex"
        )
    return workflow_content(workflow_hash=derived_from, field="derived_from")


def review(raw: str, derived_from: str) -> dict[str, Any]:
    """The dry-run save of ``raw`` compared with the stored ``derived_from`` ("" for none)."""
    content = parse_content(raw)

    workflow_hash, would_be_new, resolved = rolled_back(lambda: workflow_draft(content))
    before = flatten(parent_content(derived_from)) if derived_from else []
    rows = diff_rows(before, flatten(resolved))
    return {
        "hash": workflow_hash,
        "would_be_new": would_be_new,
        "derived_from": derived_from or None,
        "unchanged": workflow_hash == derived_from,
        "added": sum(1 for r in rows if r["kind"] == "add"),
        "removed": sum(1 for r in rows if r["kind"] == "del"),
        "diff": rows[:MAX_DIFF_LINES],
        "diff_truncated": len(rows) > MAX_DIFF_LINES,
    }
