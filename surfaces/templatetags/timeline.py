"""Template filters of the trace pages: durations that stay readable when they get long."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def duration(value: Any) -> str:
    """Milliseconds as a reviewer reads them: "850 ms", "1.25 s", "12.3 s", "2 m 05 s"."""
    if value is None or value == "":
        return "—"
    ms = float(value)
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if round(seconds, 2) < 10:
        return f"{seconds:.2f} s"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m"
