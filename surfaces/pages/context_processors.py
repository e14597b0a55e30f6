"""Template context shared by every page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from surfaces.permissions import is_operator


def roles(request: HttpRequest) -> dict[str, bool]:
    return {"user_is_operator": is_operator(getattr(request, "user", None))}


def embedded_model(request: HttpRequest) -> dict[str, bool]:
    """Whether the stack serves the embedded toy model (every page says so, in a banner)."""
    return {"embedded_model": bool(getattr(settings, "CHUKWA_EMBEDDED_MODEL", False))}
