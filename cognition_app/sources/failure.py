"""The one error a source call raises when it fails for a reason other than the model's content."""

from __future__ import annotations

from uuid import UUID


class SourceFailure(Exception):
    """A source call that failed for a reason other than the model's content: configuration,
    transport, HTTP status, a non-JSON or schema-invalid body. Fails the attempt (no retry)."""

    def __init__(
        self, failure_class: str, message: str, *, invocation_id: UUID | None = None
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.invocation_id = invocation_id
