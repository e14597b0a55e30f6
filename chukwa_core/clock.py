"""Simulation time on the calendar Python and the world rows can hold (years 0001…9999, UTC).
Pure: no Django."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

CALENDAR_END = datetime.max.replace(tzinfo=UTC)

# ISO 8601 extended date and time with a mandatory offset. Checked before parsing because
# datetime.fromisoformat accepts far more (week dates, basic format, stray characters).
_INSTANT_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,6})?)?(?:[Zz]|[+-]\d{2}:?\d{2})"
)


class CalendarOverflow(ValueError):
    """Simulation time would leave the calendar; the message says where it stood."""


class NotAnInstant(ValueError):
    """Not an ISO 8601 instant with an offset; the message says what is expected."""


def parse_instant(raw: str) -> datetime:
    """``YYYY-MM-DDTHH:MM[:SS[.ffffff]]`` with ``Z`` or ``±HH:MM``, in UTC. Leap seconds
    (second 60), offsets of 24 h or more and instants outside years 0001…9999 in UTC are refused."""
    if _INSTANT_RE.fullmatch(raw) is None:
        raise NotAnInstant(
            "must be an ISO 8601 date and time with an offset, e.g. 2030-01-01T09:00:00+02:00"
        )
    try:
        parsed = datetime.fromisoformat(raw.replace("z", "Z").replace("t", "T"))
    except ValueError as exc:  # month 13, second 60, offset +24:00
        raise NotAnInstant(f"is not a valid instant ({exc})") from None
    return to_utc(parsed)


def advance(instant: datetime, seconds: int) -> datetime:
    """``instant`` plus one chronon of ``seconds``, or CalendarOverflow past 9999-12-31."""
    try:
        return instant + timedelta(seconds=seconds)
    except OverflowError:
        raise CalendarOverflow(
            f"simulation time {instant.isoformat()} plus {seconds} s is past the end of the "
            f"calendar ({CALENDAR_END.isoformat()})"
        ) from None


def to_utc(instant: datetime) -> datetime:
    """An aware instant in UTC, or CalendarOverflow when the conversion leaves years 0001…9999
    (e.g. 0001-01-01T00:00:00+01:00)."""
    try:
        return instant.astimezone(UTC)
    except OverflowError:
        raise CalendarOverflow(
            f"{instant.isoformat()} is outside years 0001…9999 once converted to UTC"
        ) from None
