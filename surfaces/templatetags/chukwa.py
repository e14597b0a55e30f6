"""Template filters shared by every page."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.html import format_html, format_html_join

from surfaces.pages.metric_strip import value_text

register = template.Library()


@register.filter
def short(value: Any, length: int = 12) -> str:
    """A long hash or id shortened; the full value stays in the title (hover) attribute."""
    text = "" if value is None else str(value)
    if len(text) <= length:
        return format_html("<code>{}</code>", text)
    return format_html('<code title="{}">{}…</code>', text, text[:length])


@register.filter
def named(value: Any, names: Any) -> str:
    """A scenario's hash shortened, with the names that point at it beside it (each a link to
    its name's page): ``park · e065e2e7…``."""
    if not names:
        return short(value)
    links = format_html_join(
        ", ", '<a class="scenario-name" href="/names/{}/">{}</a>', ((n, n) for n in names)
    )
    return format_html("{} · {}", links, short(value))


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
    if totals.get("calls_reused"):
        saved = totals["cost_saved"]
        text += f"; {totals['calls_reused']} reused, saved "
        text += "unknown" if saved is None else cost_amount(saved)
    return text


@register.filter
def clamp(value: Any, length: int = 320) -> str:
    """Long text folded after about ``length`` characters: the start stays visible and a
    "show more" (a <details>, no script) opens the rest in place; the text is never sent twice."""
    text = "" if value is None else str(value)
    if len(text) <= length + 40:
        return format_html("{}", text)
    cut = text.rfind(" ", length - 60, length)
    cut = cut if cut > 0 else length
    return format_html(
        '<details class="clamp"><summary>{}<span class="clamp-dots">…</span> '
        '<span class="clamp-more">show more</span></summary>{}</details>',
        text[:cut],
        text[cut:],
    )


@register.filter(name="value_text")
def value_text_filter(value: float | None) -> str:
    """A measured value or statistic as a page writes it (``metric_strip.value_text``)."""
    return value_text(value)


@register.filter
def exact(value: float | None) -> str:
    """A statistic's exact value for a data attribute ("" when there is none), so a reader (or
    a test) can check the rounded text against the API's number."""
    return "" if value is None else repr(value)


@register.filter
def annotation_value(value: Any) -> str:
    """An annotation's value as typed: 3 not 3.0, yes/no for booleans."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


@register.filter
def error_title(error: Any) -> str:
    """A human title for an error page: "World not found" for ``world_not_found``."""
    code = str(getattr(error, "code", "") or "error")
    words = code.replace("_", " ").replace("llm", "LLM").replace("api", "API")
    return words[:1].upper() + words[1:]


@register.filter
def named_from(value: Any, names: Any) -> str:
    """A hash shortened, with what names it beside it, from a page's ``hash → names`` map
    (``scenarios_app.hash_names``): ``park/walker · 05866fc8…``; the bare short hash when
    nothing names it."""
    found = names.get(value) if isinstance(names, dict) else None
    if not found:
        return short(value)
    links = format_html_join(
        ", ", '<a class="hash-name" href="{}">{}</a>', ((n["url"], n["text"]) for n in found)
    )
    return format_html("{} · {}", links, short(value))


@register.filter
def names_before(value: Any, names: Any) -> str:
    """What names a hash, as links followed by `` · ``, to put before a link to the hash's own
    page (``{{ h|names_before:hash_names }}<a …>{{ h|short }}</a>``); "" when nothing does."""
    found = names.get(value) if isinstance(names, dict) else None
    if not found:
        return ""
    links = format_html_join(
        ", ", '<a class="hash-name" href="{}">{}</a>', ((n["url"], n["text"]) for n in found)
    )
    return format_html("{} · ", links)
