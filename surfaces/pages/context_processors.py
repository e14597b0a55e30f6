"""Template context shared by every page."""

from __future__ import annotations

from django.http import HttpRequest

from surfaces.permissions import is_operator


def roles(request: HttpRequest) -> dict[str, bool]:
    return {"user_is_operator": is_operator(getattr(request, "user", None))}
