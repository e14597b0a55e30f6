"""The one error a source call raises when it fails for a reason other than the model's content."""

from __future__ import annotations

from uuid import UUID


class SourceFailure(Exception):
    """A source call that failed for a reason other than the model's content: configuration,
    transport, HTTP status, a non-JSON or schema-invalid body. Fails the attempt, unless the
    source's ``retry`` policy tries a transport failure again (``cognition_app.sources.retry``).

    ``http_status`` is the status the failure is about, if any (an HTTP 503, a body too large
    behind a 200); ``retry_after`` the endpoint's ``Retry-After`` header as sent."""

    def __init__(
        self,
        failure_class: str,
        message: str,
        *,
        invocation_id: UUID | None = None,
        http_status: int | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.invocation_id = invocation_id
        self.http_status = http_status
        self.retry_after = retry_after
