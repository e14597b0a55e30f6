"""The scripted OpenAI-compatible test server, exercised over real HTTP with httpx (no DB)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fixtures import TEST_API_KEY, scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import (
    NO_REPLY_MESSAGE,
    PROBE_OK,
    PROBE_SCHEMA_NAME,
    PROBE_WRONG,
    Reply,
    ScriptedLLM,
    iter_sse_data,
)

PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": [PROBE_OK]}},
    "required": ["probe"],
    "additionalProperties": False,
}


def chat_body(
    content: str = "Hello there",
    *,
    stream: bool = True,
    include_usage: bool = True,
    schema_name: str | None = None,
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You control the acting subject."},
            {"role": "user", "content": content},
        ],
        "stream": stream,
        "temperature": 0.7,
        "max_tokens": 800,
    }
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    if schema_name is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": schema or {}, "strict": True},
        }
    return body


def probe_body() -> dict[str, Any]:
    return chat_body("conformance probe", schema_name=PROBE_SCHEMA_NAME, schema=PROBE_SCHEMA)


def stream_events(
    client: httpx.Client, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[str]]:
    """POST a streamed request; return the response and every raw SSE ``data:`` payload."""
    with client.stream("POST", "/chat/completions", json=body, headers=headers or {}) as resp:
        if resp.status_code != 200:
            resp.read()
            return resp, []
        return resp, list(iter_sse_data(resp.iter_lines()))


def content_of(events: list[str]) -> str:
    text = ""
    for data in events:
        if data == "[DONE]":
            continue
        for choice in json.loads(data)["choices"]:
            text += choice["delta"].get("content") or ""
    return text


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def client(llm: ScriptedLLM) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=llm.base_url, timeout=10) as http:
        yield http


def test_streamed_text_arrives_in_several_chunks_and_reassembles_exactly(
    llm: ScriptedLLM, client: httpx.Client
) -> None:
    text = "The ant walks toward the crumb — slowly, deliberately. 🐜"
    llm.script(text)

    resp, events = stream_events(client, chat_body())

    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(data) for data in events[:-1]]
    content_chunks = [c for c in chunks if c["choices"]]
    assert len(content_chunks) == -(-len(text) // 8) > 3
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert content_chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in content_chunks[1:])
    assert [c["choices"][0]["finish_reason"] for c in content_chunks] == [None] * (
        len(content_chunks) - 1
    ) + ["stop"]
    assert content_of(events) == text
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == -(-len(text) // 4)
    assert usage_chunk["usage"]["prompt_tokens"] > 0
    assert usage_chunk["model"] == "gpt-4o-mini"
    assert llm.pending == 0
    llm.assert_exhausted()


def test_chunk_size_and_finish_reason_are_honoured(llm: ScriptedLLM, client: httpx.Client) -> None:
    llm.script(Reply(text="abcdefghij", chunk_size=3, finish_reason="length"))

    _, events = stream_events(client, chat_body(include_usage=False))

    pieces = [json.loads(d)["choices"][0]["delta"]["content"] for d in events[:-1]]
    assert pieces == ["abc", "def", "ghi", "j"]
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    assert events[-1] == "[DONE]"  # no usage chunk without stream_options.include_usage
    assert all(json.loads(d)["choices"] for d in events[:-1])


def test_dict_reply_streams_valid_json(llm: ScriptedLLM, client: httpx.Client) -> None:
    patch = {"kind": "final_patch", "patch": {"effects": [{"entity_id": "ant", "text": "ü"}]}}
    llm.script(patch)

    _, events = stream_events(client, chat_body(schema_name="tool_loop_output"))

    assert len(events) > 3
    assert json.loads(content_of(events)) == patch


def test_error_reply_returns_status_and_body(llm: ScriptedLLM, client: httpx.Client) -> None:
    error = {
        "error": {
            "message": "response_format json_schema is not supported",
            "type": "invalid_request_error",
        }
    }
    llm.script(Reply(status=400, error_body=error))

    resp, events = stream_events(client, chat_body(schema_name="tool_loop_output"))

    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    assert resp.json() == error
    assert events == []
    assert len(llm.requests) == 1


def test_raw_body_is_sent_verbatim(llm: ScriptedLLM, client: httpx.Client) -> None:
    llm.script(Reply(status=502, raw_body=b"<html>Bad Gateway</html>"))

    resp = client.post("/chat/completions", json=chat_body(stream=False))

    assert resp.status_code == 502
    assert resp.headers["content-type"].startswith("text/plain")
    assert resp.content == b"<html>Bad Gateway</html>"


def test_probe_is_answered_without_consuming_the_queue(
    llm: ScriptedLLM, client: httpx.Client
) -> None:
    llm.script("the real reply")

    resp, events = stream_events(client, probe_body())

    assert resp.status_code == 200
    assert json.loads(content_of(events)) == {"probe": PROBE_OK}
    assert llm.pending == 1
    assert llm.requests == []
    assert len(llm.probes) == 1
    assert llm.probes[0]["response_format"]["json_schema"]["name"] == PROBE_SCHEMA_NAME

    _, events = stream_events(client, chat_body())
    assert content_of(events) == "the real reply"
    assert len(llm.requests) == 1
    assert len(llm.probes) == 1


def test_non_enforcing_backend_answers_the_probe_wrongly() -> None:
    with ScriptedLLM(enforce_schema=False) as lax, httpx.Client(base_url=lax.base_url) as http:
        _, events = stream_events(http, probe_body())
        assert json.loads(content_of(events)) == {"probe": PROBE_WRONG}
        assert len(lax.probes) == 1
        assert lax.requests == []


def test_probe_reply_override() -> None:
    rejection = Reply(status=400, error_body={"error": {"message": "json_schema unsupported"}})
    with ScriptedLLM(probe_reply=rejection) as strict, httpx.Client(base_url=strict.base_url) as h:
        resp, _ = stream_events(h, probe_body())
        assert resp.status_code == 400
        assert resp.json()["error"]["message"] == "json_schema unsupported"
        assert len(strict.probes) == 1


def test_empty_queue_answers_500_and_is_recorded(llm: ScriptedLLM, client: httpx.Client) -> None:
    resp, _ = stream_events(client, chat_body("unscripted"))

    assert resp.status_code == 500
    assert resp.json()["error"]["message"] == NO_REPLY_MESSAGE
    assert len(llm.requests) == 1
    assert llm.unanswered[0]["messages"][1]["content"] == "unscripted"
    assert NO_REPLY_MESSAGE in llm.failures[0]
    with pytest.raises(AssertionError, match="no reply scripted"):
        llm.assert_exhausted()


def test_callable_replies_see_the_request(llm: ScriptedLLM, client: httpx.Client) -> None:
    seen: list[dict[str, Any]] = []

    def by_subject(request: dict[str, Any]) -> str | dict[str, Any] | Reply:
        seen.append(request)
        prompt = request["messages"][-1]["content"]
        if "ant" in prompt:
            return {"subject": "ant"}
        return Reply(text="crumb says nothing", chunk_size=4)

    llm.script(by_subject, by_subject)

    _, ant = stream_events(client, chat_body("Acting subject: ant"))
    _, crumb = stream_events(client, chat_body("Acting subject: crumb"))

    assert json.loads(content_of(ant)) == {"subject": "ant"}
    assert content_of(crumb) == "crumb says nothing"
    assert [r["messages"][-1]["content"] for r in seen] == [
        "Acting subject: ant",
        "Acting subject: crumb",
    ]


def test_raising_callable_fails_loudly(llm: ScriptedLLM, client: httpx.Client) -> None:
    def broken(request: dict[str, Any]) -> str:
        raise KeyError("subject")

    llm.script(broken)

    resp, _ = stream_events(client, chat_body())

    assert resp.status_code == 500
    assert "KeyError" in resp.json()["error"]["message"]
    assert "KeyError" in llm.failures[0]


def test_close_mid_stream_ends_without_done(llm: ScriptedLLM, client: httpx.Client) -> None:
    llm.script(Reply(text="x" * 80, chunk_size=8, close_mid_stream=True))

    received: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", "/chat/completions", json=chat_body()) as resp,
    ):
        assert resp.status_code == 200
        for data in iter_sse_data(resp.iter_lines()):
            received.append(data)

    assert received
    assert "[DONE]" not in received
    assert all(json.loads(d)["choices"][0]["finish_reason"] is None for d in received)
    assert len(content_of(received)) < 80


def test_requests_and_headers_are_recorded(llm: ScriptedLLM, client: httpx.Client) -> None:
    llm.script("one", "two")

    stream_events(client, chat_body("first"), headers={"Authorization": "Bearer sk-abc"})
    stream_events(client, chat_body("second"))

    assert [r["messages"][-1]["content"] for r in llm.requests] == ["first", "second"]
    assert llm.requests[0]["stream_options"] == {"include_usage": True}
    assert llm.headers[0]["authorization"] == "Bearer sk-abc"
    assert "authorization" not in llm.headers[1]
    assert llm.headers[1]["content-type"] == "application/json"
    assert llm.last_messages()[-1] == {"role": "user", "content": "second"}


def test_last_messages_without_requests_raises(llm: ScriptedLLM) -> None:
    with pytest.raises(AssertionError, match="no chat completion requests"):
        llm.last_messages()


def test_non_streamed_request_returns_chat_completion_with_usage(
    llm: ScriptedLLM, client: httpx.Client
) -> None:
    llm.script({"ok": True}, Reply(text="hi", usage={"prompt_tokens": 7, "completion_tokens": 1}))

    first = client.post("/chat/completions", json=chat_body("x" * 40, stream=False))
    second = client.post("/chat/completions", json=chat_body(stream=False))

    assert first.status_code == 200
    payload = first.json()
    assert payload["object"] == "chat.completion"
    assert payload["model"] == "gpt-4o-mini"
    assert payload["choices"][0]["message"] == {"role": "assistant", "content": '{"ok": true}'}
    assert payload["choices"][0]["finish_reason"] == "stop"
    chars = len("You control the acting subject.") + 40
    assert payload["usage"]["prompt_tokens"] == -(-chars // 4)
    assert payload["usage"]["total_tokens"] == (
        payload["usage"]["prompt_tokens"] + payload["usage"]["completion_tokens"]
    )
    assert second.json()["usage"] == {"prompt_tokens": 7, "completion_tokens": 1}


def test_slow_stream_stays_in_flight(llm: ScriptedLLM, client: httpx.Client) -> None:
    llm.script(Reply(text="abcdef", chunk_size=1, chunk_delay_s=0.1, delay_s=0.1))
    result: dict[str, Any] = {}

    def consume() -> None:
        _, result["events"] = stream_events(client, chat_body())

    started = time.monotonic()
    worker = threading.Thread(target=consume)
    worker.start()
    llm.wait_for_requests(1, timeout=5)
    assert worker.is_alive()  # the stream is in flight
    worker.join(timeout=10)

    assert time.monotonic() - started >= 0.5
    assert content_of(result["events"]) == "abcdef"


def test_stop_severs_a_stream_in_flight() -> None:
    server = ScriptedLLM().start()
    server.script(Reply(text="z" * 50, chunk_size=1, chunk_delay_s=0.05))
    with (
        httpx.Client(base_url=server.base_url, timeout=10) as http,
        http.stream("POST", "/chat/completions", json=chat_body()) as resp,
    ):
        lines = resp.iter_lines()
        assert next(lines).startswith("data:")
        server.stop()
        with pytest.raises(httpx.RemoteProtocolError):
            for _ in lines:
                pass
    with pytest.raises(RuntimeError):
        _ = server.base_url


def test_script_rejects_unsupported_reply_types(llm: ScriptedLLM) -> None:
    with pytest.raises(TypeError):
        llm.script(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Reply(text="x", chunk_size=0)


def test_fixture_points_the_environment_at_the_server(scripted_llm: ScriptedLLM) -> None:  # noqa: F811
    assert os.environ["CHUKWA_LLM_BASE_URL"] == scripted_llm.base_url
    assert os.environ["CHUKWA_LLM_API_KEY"] == TEST_API_KEY
    assert scripted_llm.base_url.startswith("http://127.0.0.1:")
    assert scripted_llm.base_url.endswith("/v1")
    scripted_llm.script("via fixture")
    with httpx.Client(base_url=os.environ["CHUKWA_LLM_BASE_URL"]) as http:
        _, events = stream_events(
            http,
            chat_body(),
            headers={"Authorization": f"Bearer {os.environ['CHUKWA_LLM_API_KEY']}"},
        )
    assert content_of(events) == "via fixture"
    assert scripted_llm.headers[0]["authorization"] == "Bearer test-secret-key"
