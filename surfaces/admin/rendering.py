"""The admin pages' rendering helpers: links to store rows, JSON blocks, link lists."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import quote
from django.db.models import Model
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from surfaces.forms import pretty_json


def admin_url(model: type[Model], pk: str, view: str = "change") -> str:
    return reverse(
        f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=[quote(pk)]
    )


def abbreviate(value: str) -> str:
    return f"{value[:12]}…"


def hash_link(model: type[Model], pk: str, text: str | None = None) -> SafeString:
    return format_html(
        '<a href="{}" title="{}"><code>{}</code></a>',
        admin_url(model, pk),
        pk,
        text or abbreviate(pk),
    )


def json_block(value: Any) -> SafeString:
    return format_html('<pre class="chukwa-json">{}</pre>', pretty_json(value))


def links_list(items: list[SafeString]) -> SafeString:
    if not items:
        return format_html("<span>{}</span>", "none")
    return format_html(
        "<ul class='chukwa-links'>{}</ul>",
        format_html_join("", "<li>{}</li>", ((i,) for i in items)),
    )
