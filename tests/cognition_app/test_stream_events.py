"""Reading an LLM event stream (``cognition_app.sources.stream_events``) from a body that arrives
in arbitrary pieces: the SSE spec's lines and events, UTF-8 split anywhere, a content coding,
the chunk shape. The body is given in pieces in memory; the streams of a real server (and a
content coding, which the transport decodes) are covered through the scripted LLM in
test_source_edges.py and in test_transport.py."""

from __future__ import annotations

import json

import pytest

from cognition_app.failures import SourceFailure
from cognition_app.sources.stream_events import Chunk, chunk_events

SSE = "text/event-stream; charset=utf-8"


def _event(content: str, finish: str | None = None, **extra: object) -> bytes:
    body = {
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
        **extra,
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


def _read(pieces: list[bytes], content_type: str = SSE) -> list[Chunk]:
    return list(chunk_events(content_type, iter(pieces)))


def _bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_events_split_anywhere_read_the_same_including_utf8_split_inside_a_character() -> None:
    stream = _event("héllo ") + _event("wörld 😀") + _event("", "stop") + b"data: [DONE]\n\n"
    whole = _read([stream])
    assert [c.deltas for c in whole] == [["héllo "], ["wörld 😀"], []]
    assert whole[-1].finish_reason == "stop"
    assert _read(_bytewise(stream)) == whole
    assert _read([stream[:7], stream[7:50], stream[50:51], stream[51:]]) == whole


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_every_sse_line_ending_ends_a_line_even_split_between_reads(newline: bytes) -> None:
    stream = (_event("a") + _event("b", "stop")).replace(b"\n", newline)
    assert [c.deltas for c in _read(_bytewise(stream))] == [["a"], ["b"]]


def test_multi_line_data_comments_and_empty_events_follow_the_spec() -> None:
    body = json.dumps({"choices": [{"delta": {"content": "x"}, "finish_reason": "stop"}]})
    half = len(body) // 2
    stream = (
        b": a comment\n\n"
        + b"event: ping\n\n"  # no data: dispatches nothing
        + f"data: {body[:half]}\ndata: {body[half:]}\n\n".encode()  # joined with a newline
        + b"data: [DONE]\n\n"
    )
    (chunk,) = _read([stream])
    assert chunk == Chunk("", None, ["x"], "stop")


def test_an_event_without_its_blank_line_at_the_end_of_the_body_is_not_dispatched() -> None:
    assert _read([_event("a") + b'data: {"choices": []}']) == [Chunk("m", None, ["a"], "")]


def test_the_body_is_read_as_utf8_whatever_charset_the_header_names() -> None:
    stream = _event("ünïcode") + b"data: [DONE]\n\n"
    chunks = _read([stream], "text/event-stream; charset=latin-1")
    assert chunks[0].deltas == ["ünïcode"]


def test_usage_and_several_choices_are_read() -> None:
    body = {
        "model": "served-model",
        "choices": [
            {"delta": {"content": "a"}, "finish_reason": None},
            {"delta": {"content": "b"}, "finish_reason": "length"},
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    (chunk,) = _read([f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n".encode()])
    assert chunk == Chunk("served-model", body["usage"], ["a", "b"], "length")


@pytest.mark.parametrize(
    "data",
    [
        "[]",
        '{"choices": {"0": {}}}',
        '{"choices": ["x"]}',
        '{"choices": [{"delta": "x"}]}',
        '{"choices": [{"delta": {"content": 5}}]}',
        '{"usage": 5}',
        '{"usage": {"prompt_tokens_details": [1]}}',
    ],
)
def test_an_event_of_another_shape_is_a_transport_failure(data: str) -> None:
    with pytest.raises(SourceFailure, match="unexpected shape") as raised:
        _read([f"data: {data}\n\n".encode()])
    assert raised.value.failure_class == "transport"
    assert raised.value.invocation_id is None


def test_malformed_json_and_an_in_stream_error_are_transport_failures() -> None:
    with pytest.raises(SourceFailure, match="malformed stream event"):
        _read([b"data: {nope\n\n"])
    with pytest.raises(SourceFailure, match="overloaded"):
        _read([b'data: {"error": {"message": "overloaded"}}\n\n'])
    with pytest.raises(SourceFailure, match="not json at all"):
        _read([b"event: error\ndata: not json at all\n\n"])


@pytest.mark.parametrize(
    "content_type", ["application/json", "", "text/plain; x=text/event-stream"]
)
def test_a_reply_that_is_not_an_event_stream_is_a_transport_failure(content_type: str) -> None:
    with pytest.raises(SourceFailure, match="not an event stream") as raised:
        _read([b'{"choices": []}'], content_type)
    assert raised.value.failure_class == "transport"


def test_the_media_type_is_read_without_regard_to_case_and_parameters() -> None:
    assert _read([_event("a", "stop")], "Text/Event-Stream ; charset=utf-8")[0].deltas == ["a"]
