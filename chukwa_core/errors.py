"""One error family for services, mapped centrally to API responses, pages and CLI messages.

Pure: no Django imports, so plain modules (validators, hashing) can raise it.
"""

from __future__ import annotations

from typing import Any


class ChukwaError(Exception):
    """A failure the caller can act on: a stable code, a message naming the field, details."""

    status_code: int = 400

    def __init__(
        self,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}
        if status_code is not None:
            self.status_code = status_code

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class NotFoundError(ChukwaError):
    status_code = 404


class ConflictError(ChukwaError):
    status_code = 409


def invalid(code: str, field: str, message: str, **details: Any) -> ChukwaError:
    """A 400 whose message starts with the field it names."""
    return ChukwaError(code, f"{field}: {message}", {"field": field, **details})
