"""The chat.completion.chunk events of an OpenAI-compatible event stream, checked for the shape
Chukwa reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from chukwa_core.json_values import loads_strict
from cognition_app.sources.failure import SourceFailure


def chunk_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            # Read the body to its end (the chunked encoding's last, empty chunk): a response
            # closed before that is not returned to httpx's pool, and the next call would open
            # a new connection (a new TLS handshake against a remote endpoint).
            for _rest in lines:
                pass
            return
        try:
            event = loads_strict(data)
        except ValueError:
            raise SourceFailure("transport", f"malformed stream event: {data[:200]!r}") from None
        if not event_shape_ok(event):
            raise SourceFailure("transport", f"stream event of an unexpected shape: {data[:200]!r}")
        yield event


def event_shape_ok(event: Any) -> bool:
    """A chat.completion.chunk as far as Chukwa reads it; anything else is a broken stream,
    not a reason for an exception between opening and finishing the rows."""
    if not isinstance(event, dict):
        return False
    usage = event.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return False
    if isinstance(usage, dict) and not isinstance(usage.get("prompt_tokens_details") or {}, dict):
        return False
    choices = event.get("choices") or []
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict) or not isinstance(delta.get("content") or "", str):
            return False
    return True
