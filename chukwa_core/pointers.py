"""JSON pointers (RFC 6901) over the context trees of a turn. Pure: no Django."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def pointer_get(tree: Mapping[str, Any], pointer: str) -> tuple[bool, Any]:
    """(found, value) of ``pointer`` in ``tree``; a missing step is (False, None)."""
    current: Any = tree
    for raw in pointer.split("/")[1:]:
        part = unescape(raw)
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current
