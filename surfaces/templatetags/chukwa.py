"""Template filters shared by every page."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()


@register.filter
def short(value: Any, length: int = 12) -> str:
    """A long hash or id shortened; the full value stays in the title (hover) attribute."""
    text = "" if value is None else str(value)
    if len(text) <= length:
        return format_html("<code>{}</code>", text)
    return format_html('<code title="{}">{}…</code>', text, text[:length])


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
