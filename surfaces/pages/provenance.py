"""Provenance pages: every change to an entity or an environment, newest first and paged,
each with what decided it (an LLM call or a rule)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from chukwa_core.errors import NotFoundError
from surfaces.pages.layout import memory_lines, page_links, page_offset
from surfaces.pages.rendering import page, respond
from worlds_app import selectors
from worlds_app.provenance import HISTORY_PER_PAGE, value_history


def _history_context(
    request: HttpRequest, slug: str, kinds: tuple[str, ...], target_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    offset = page_offset(request, "offset")
    count, history = value_history(slug=slug, kinds=kinds, target_id=target_id, offset=offset)
    pages = page_links(request, "offset", count=count, limit=HISTORY_PER_PAGE, offset=offset)
    data = {"count": count, "limit": HISTORY_PER_PAGE, "offset": offset, "history": history}
    return {"history": history, "history_pages": pages}, data


@page
def entity_page(request: HttpRequest, slug: str, entity_id: str) -> HttpResponse:
    world = selectors.world_get(slug=slug)
    entity = next((e for e in world["state"]["entities"] if e["id"] == entity_id), None)
    if entity is None:
        raise NotFoundError(
            "entity_not_found", f"entity_id: world {slug!r} has no entity {entity_id!r}"
        )
    history, page_data = _history_context(
        request, slug, ("entity_state", "entity_memory"), entity_id
    )
    kind = entity.get("kind")
    memory = memory_lines(kind["agent"].get("memory")) if isinstance(kind, dict) else []
    data = {"world": slug, "entity": entity, **page_data}
    context: dict[str, Any] = {
        "world": world,
        "title": entity.get("name", entity_id),
        "kind": "Entity",
        "memory": memory,
        "target_id": entity_id,
        "current": entity.get("state", ""),
        **history,
    }
    return respond(request, "worlds_app/provenance.html", context, data)


@page
def environment_page(request: HttpRequest, slug: str, label: str) -> HttpResponse:
    world = selectors.world_get(slug=slug)
    environments = world["state"]["environments"]
    if label not in environments:
        raise NotFoundError(
            "environment_not_found", f"label: world {slug!r} has no environment {label!r}"
        )
    history, page_data = _history_context(request, slug, ("environment",), label)
    data = {"world": slug, "label": label, "content": environments[label], **page_data}
    context: dict[str, Any] = {
        "world": world,
        "title": label,
        "kind": "Environment",
        "target_id": label,
        "current": environments[label],
        **history,
    }
    return respond(request, "worlds_app/provenance.html", context, data)
