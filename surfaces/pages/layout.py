"""How long things are cut for a page: memories as lines (an append as its line), agents'
memories as their last lines, several paged lists on one page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from chukwa_core.errors import invalid
from surfaces.api.contract import MAX_OFFSET

MEMORY_TAIL = 5  # memory lines shown per agent on world and turn pages (all on its own page)


def memory_lines(memory: Any) -> list[str]:
    """An agent's memory as its lines (it is stored as one newline-joined text)."""
    if isinstance(memory, list):
        return [str(m) for m in memory]
    return [line for line in str(memory or "").split("\n") if line]


def environments(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each environment with its text and the entities placed in it; an agent's memory as
    its last lines and how many there are."""
    envs = [
        {"label": label, "content": text, "entities": []}
        for label, text in sorted(state.get("environments", {}).items())
    ]
    by_label = {e["label"]: e for e in envs}
    for entity in state.get("entities", []):
        kind = entity.get("kind")
        lines = memory_lines(kind.get("agent", {}).get("memory")) if isinstance(kind, dict) else []
        row = {
            "id": entity["id"],
            "name": entity.get("name", entity["id"]),
            "state": entity.get("state", ""),
            "is_agent": isinstance(kind, dict),
            "memory_count": len(lines),
            "memory_tail": lines[-MEMORY_TAIL:],
        }
        target = by_label.get(entity.get("environment", ""))
        if target is not None:
            target["entities"].append(row)
    return envs


def page_offset(request: HttpRequest, key: str) -> int:
    raw = request.GET.get(key, "") or "0"
    try:
        value = int(raw)
    except ValueError:
        raise invalid("invalid_query", key, f"must be an integer, got {raw[:64]!r}") from None
    if not 0 <= value <= MAX_OFFSET:
        raise invalid("invalid_query", key, f"must be 0…{MAX_OFFSET}, got {value}")
    return value


def query_url(request: HttpRequest, path: str | None = None, **changes: str | None) -> str:
    """This page's URL (or ``path``) with its query's ``changes`` made (None removes a
    parameter), without ``format``."""
    params = request.GET.copy()
    params.pop("format", None)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    query = params.urlencode()
    path = path or request.path
    return f"{path}?{query}" if query else path


def page_links(
    request: HttpRequest,
    key: str,
    *,
    count: int,
    limit: int,
    offset: int,
    path: str | None = None,
) -> dict[str, Any]:
    """Newer/older links for one paged list of a page that has several (``key`` its offset), on
    this page or ``path`` (a form's answer links to the page it redraws)."""

    def link(new_offset: int) -> str:
        return query_url(request, path, **{key: str(new_offset)})

    return {
        "count": count,
        "first": offset + 1 if count else 0,
        "last": min(offset + limit, count),
        "newer": link(max(offset - limit, 0)) if offset > 0 else None,
        "older": link(offset + limit) if offset + limit < count else None,
    }


def appended_line(before: str, after: str) -> str:
    """What a memory append added: the text after the old memory and its newline."""
    if before and after.startswith(before + "\n"):
        return after[len(before) + 1 :]
    return after


def memory_change(before: Any, after: Any) -> dict[str, Any]:
    """Two memories as lines: how many they share at the start, then what each has after."""
    old, new = memory_lines(before), memory_lines(after)
    shared = 0
    while shared < min(len(old), len(new)) and old[shared] == new[shared]:
        shared += 1
    return {"shared": shared, "removed": old[shared:], "added": new[shared:]}
