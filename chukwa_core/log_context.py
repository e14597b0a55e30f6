"""The ids of the turn being run (world, attempt, subject), carried to every log record."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# One variable per id: the attempt runner (worlds layer) binds world and attempt, the subject
# runner (cognition layer) binds subject; both sit above this module, so neither imports the
# other. Context variables rather than thread-locals so a copied context (the lease heartbeat's
# thread) carries them too.
_world: ContextVar[str] = ContextVar("chukwa_log_world", default="")
_attempt: ContextVar[str] = ContextVar("chukwa_log_attempt", default="")
_subject: ContextVar[str] = ContextVar("chukwa_log_subject", default="")

FIELDS = ("world", "attempt", "subject")


@contextmanager
def bound(
    *, world: str | None = None, attempt: str | None = None, subject: str | None = None
) -> Iterator[None]:
    """Within the block, every log record carries the given ids (the others stay as they are)."""
    tokens = [
        (var, var.set(value))
        for var, value in ((_world, world), (_attempt, attempt), (_subject, subject))
        if value is not None
    ]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current() -> dict[str, str]:
    """The ids bound now; an unbound id is absent rather than empty."""
    values = {"world": _world.get(), "attempt": _attempt.get(), "subject": _subject.get()}
    return {name: value for name, value in values.items() if value}


class LogContextFilter(logging.Filter):
    """Copies the bound ids onto each record (as attributes named in FIELDS) for formatters."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in current().items():
            setattr(record, name, value)
        return True
