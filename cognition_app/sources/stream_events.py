"""The chat.completion.chunk events of an OpenAI-compatible event stream, checked for the shape
Chukwa reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import EventSource

from chukwa_core.json_values import loads_strict
from cognition_app.sources.failure import SourceFailure


def chunk_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The stream's chunks, read by the SSE spec (httpx-sse: lines end only at CR/LF, an event's
    ``data:`` lines are joined). A broken stream or an error the provider sends inside it raises
    a transport-class SourceFailure without an invocation id (the caller finishes the rows); a
    reply that is not ``text/event-stream`` raises httpx-sse's SSEError (an httpx error)."""
    events = EventSource(response).iter_sse()
    for sse in events:
        data = sse.data.strip()
        if not data:
            continue  # an event without data (a keep-alive, a named ping) dispatches nothing
        if data == "[DONE]":
            # Read the body to its end (the chunked encoding's last, empty chunk): a response
            # closed before that is not returned to httpx's pool, and the next call would open
            # a new connection (a new TLS handshake against a remote endpoint).
            for _rest in events:
                pass
            return
        try:
            event = loads_strict(data)
        except ValueError:
            if sse.event == "error":  # a provider's error need not be JSON
                raise SourceFailure("transport", _stream_error(data)) from None
            raise SourceFailure("transport", f"malformed stream event: {data[:200]!r}") from None
        # As the OpenAI client reads a stream: ``{"error": ...}`` data, or an ``error`` event,
        # ends the generation with the provider's message (a server that fails mid-reply after
        # sending HTTP 200 can say so only this way).
        if sse.event == "error" or (isinstance(event, dict) and event.get("error")):
            raise SourceFailure("transport", _stream_error(data, event))
        if not event_shape_ok(event):
            raise SourceFailure("transport", f"stream event of an unexpected shape: {data[:200]!r}")
        yield event


def _stream_error(data: str, event: Any = None) -> str:
    """The provider's message of an in-stream error (the caller scrubs it), else its data."""
    message: Any = None
    if isinstance(event, dict):
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message is None:
            message = event.get("message")
    if not isinstance(message, str) or not message:
        message = data
    return f"the LLM endpoint sent an error in the stream: {message[:2000]}"


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
