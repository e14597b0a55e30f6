"""Reading a world's interviews (docs/populations.md, "Interviewing without disturbing")."""

from __future__ import annotations

from worlds_app.models import Interview
from worlds_app.selectors import world_row


def interview_list(*, slug: str) -> list[Interview]:
    """The world's interviews, newest first (404 for an unknown world)."""
    return list(Interview.objects.filter(world=world_row(slug)))
