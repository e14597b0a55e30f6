"""What every authoring view shares: the operator check, the dry run that writes nothing, the
parsing of the edited JSON (with the line and column of a syntax error) and the error shape the
editor marks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.http import HttpRequest

from chukwa_core.errors import ChukwaError
from chukwa_core.ids import label_problem
from scenarios_app.services import nothing_stored, workflow_draft
from surfaces.permissions import is_operator

T = TypeVar("T")


def forbidden_unless_operator(request: HttpRequest, what: str = "Authoring workflows") -> None:
    """403 naming what the reader tried (``what`` requires operators)."""
    if not is_operator(request.user):
        raise ChukwaError(
            "forbidden",
            f"{what} requires membership of the operators group.",
            status_code=403,
        )


def rolled_back(work: Callable[[], T]) -> T:
    """Run ``work`` in a transaction that is always rolled back: a dry run writes nothing."""
    return nothing_stored(work)


def error_dict(exc: ChukwaError) -> dict[str, Any]:
    """An error as the editor shows it: the field path it marks, and for JSON syntax errors the
    line and column."""
    error: dict[str, Any] = {
        "code": exc.code,
        "field": exc.details.get("field", ""),
        "message": exc.message,
        "status": exc.status_code,
    }
    for key in ("line", "column"):
        if isinstance(exc.details.get(key), int):
            error[key] = exc.details[key]
    return error


def parse_content(raw: str) -> Any:
    if not raw.strip():
        raise ChukwaError(
            "invalid_json",
            "content: is empty; paste or type the workflow JSON",
            {"field": "content"},
        )
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ChukwaError(
            "invalid_json",
            f"content: not valid JSON: {exc}",
            {"field": "content", "line": exc.lineno, "column": exc.colno},
        ) from None
    except ValueError as exc:
        raise ChukwaError(
            "invalid_json",
            f"content: not valid JSON: {exc}",
            {"field": "content"},
        ) from None
    except RecursionError:
        raise ChukwaError(
            "invalid_json", "content: JSON is nested too deeply", {"field": "content"}
        ) from None


def check(content: Any) -> tuple[str, bool]:
    """The store's put path as a dry run: (workflow hash, whether it would be a new row)."""
    workflow_hash, would_be_new, _ = rolled_back(lambda: workflow_draft(content))
    return workflow_hash, would_be_new


def validation(raw: str) -> dict[str, Any]:
    try:
        workflow_hash, would_be_new = check(parse_content(raw))
    except ChukwaError as exc:
        return {"valid": False, "error": error_dict(exc)}
    return {"valid": True, "hash": workflow_hash, "would_be_new": would_be_new}


def checked_slug(slug: str) -> str:
    """The world picker's value, checked before it is looked up (NUL or 10 KB is not a slug)."""
    problem = label_problem(slug) if slug else None
    if problem is not None:
        raise ChukwaError(
            "invalid_slug", f"world: {slug[:64]!r} {problem}", {"field": "world"}, status_code=400
        )
    return slug
