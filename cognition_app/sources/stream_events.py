"""The chat.completion.chunk events of an OpenAI-compatible event stream, checked for the shape
Chukwa reads."""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import orjson
from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from chukwa_core.json_values import loads_strict
from cognition_app.failures import SourceFailure


class Chunk(NamedTuple):
    """What Chukwa reads of one chat.completion.chunk."""

    model: str  # "" when absent
    usage: dict[str, Any] | None
    deltas: list[str]  # the choices' non-empty ``delta.content``, in order
    finish_reason: str  # the last non-empty ``finish_reason`` of its choices, else ""


def chunk_events(content_type: str, body: Iterable[bytes]) -> Iterator[Chunk]:
    """The chunks of a stream whose ``Content-Type`` is ``content_type`` and whose body
    (content-decoded) arrives in the pieces ``body`` gives, read by the SSE spec (httpx-sse's
    decoders: lines end only at CR/LF, an event's ``data:`` lines are joined; the body decoded
    as UTF-8, as the spec says). A reply that is not ``text/event-stream``, a broken stream or
    an error the provider sends inside it raises a transport-class SourceFailure without an
    invocation id (the caller finishes the rows)."""
    if content_type.partition(";")[0].strip().lower() != "text/event-stream":
        raise SourceFailure(
            "transport",
            "the LLM endpoint's reply is not an event stream (Content-Type "
            f"{content_type[:200]!r}, not text/event-stream)",
        )
    events = _server_sent_events(body)
    for sse in events:
        data = sse.data.strip()
        if not data:
            continue  # an event without data (a keep-alive, a named ping) dispatches nothing
        if data == "[DONE]":
            # Read the body to its end (the chunked encoding's last, empty chunk): a response
            # closed before that is not returned to the pool, and the next call would open
            # a new connection (a new TLS handshake against a remote endpoint).
            for _rest in events:
                pass
            return
        try:
            # orjson first; what it refuses goes to loads_strict, for json's reading or error.
            # (What orjson reads otherwise, an integer beyond 64 bits as a float, is no token
            # count either way: ``usage_counts`` keeps only ints below 2**31.)
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            try:
                event = loads_strict(data)
            except ValueError:
                if sse.event == "error":  # a provider's error need not be JSON
                    raise SourceFailure("transport", _stream_error(data)) from None
                raise SourceFailure(
                    "transport", f"malformed stream event: {data[:200]!r}"
                ) from None
        # As the OpenAI client reads a stream: ``{"error": ...}`` data, or an ``error`` event,
        # ends the generation with the provider's message (a server that fails mid-reply after
        # sending HTTP 200 can say so only this way).
        if sse.event == "error" or (isinstance(event, dict) and event.get("error")):
            raise SourceFailure("transport", _stream_error(data, event))
        chunk = read_chunk(event)
        if chunk is None:
            raise SourceFailure("transport", f"stream event of an unexpected shape: {data[:200]!r}")
        yield chunk


# A stream bigger than this fails the call, whatever its events hold (a reply's text has its own
# limit, cognition_app.sources.llm.MAX_REPLY_CHARS; this bounds what else an endpoint may send,
# such as one endless line, which the line decoder would hold in memory).
MAX_STREAM_BYTES = 64 * 1024 * 1024


def _server_sent_events(body: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """``EventSource.iter_sse`` without httpx: the body's bytes (content-decoded) through one
    incremental UTF-8 decoder into httpx-sse's line and event decoders."""
    text = codecs.getincrementaldecoder("utf-8")("replace")
    lines, decoder = SSELineDecoder(), SSEDecoder()
    size = 0
    for data in body:
        size += len(data)
        if size > MAX_STREAM_BYTES:
            raise SourceFailure(
                "transport", f"the event stream is larger than {MAX_STREAM_BYTES:,} bytes"
            )
        for line in lines.decode(text.decode(data)):
            sse = decoder.decode(line)
            if sse is not None:
                yield sse
    for line in [*lines.decode(text.decode(b"", final=True)), *lines.flush()]:
        sse = decoder.decode(line)
        if sse is not None:
            yield sse


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


def read_chunk(event: Any) -> Chunk | None:
    """A chat.completion.chunk as far as Chukwa reads it, or None for anything else: a broken
    stream, not a reason for an exception between opening and finishing the rows."""
    if type(event) is not dict:
        return None
    usage = event.get("usage")
    if usage is not None:
        if type(usage) is not dict:
            return None
        if type(usage.get("prompt_tokens_details") or {}) is not dict:
            return None
    choices = event.get("choices") or []
    if type(choices) is not list:
        return None
    deltas: list[str] = []
    finish_reason = ""
    for choice in choices:
        if type(choice) is not dict:
            return None
        delta = choice.get("delta") or {}
        if type(delta) is not dict:
            return None
        content = delta.get("content") or ""
        if type(content) is not str:
            return None
        if content:
            deltas.append(content)
        reason = choice.get("finish_reason")
        if type(reason) is str and reason:
            finish_reason = reason
    model = event.get("model")
    return Chunk(model if type(model) is str else "", usage, deltas, finish_reason)


def usage_counts(reported: dict[str, Any]) -> dict[str, int]:
    """The token counts a provider reported that can be stored (non-negative int4)."""
    usage = {
        k: v
        for k, v in reported.items()
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
    }
    cached = (reported.get("prompt_tokens_details") or {}).get("cached_tokens")
    if isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached < 2**31:
        usage["cached_tokens"] = cached
    return usage
