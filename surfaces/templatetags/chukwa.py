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


@register.filter
def cost_amount(value: Any) -> str:
    """An LLM call's cost: the amount, or "unknown" when no price matched (never 0)."""
    if value is None:
        return "unknown"
    return format(value.normalize(), "f") if value else "0"


@register.filter
def cost_total(totals: Any) -> str:
    """A cost total: "unknown" when no call has a price, a trailing "+" when some calls have
    none (the sum is then a lower bound), "0" only when there were no calls."""
    if not totals or not totals.get("calls"):
        return "0"
    text = cost_amount(totals["total"])
    if totals["total"] is not None and totals["unknown_calls"]:
        text += "+"
    if totals["estimated_calls"]:
        text += " (est.)"
    return text
