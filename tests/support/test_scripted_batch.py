"""The scripted model's OpenAI Files and Batches endpoints, over real HTTP with httpx (no DB)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.scripted_llm import Reply, ScriptedLLM


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def jsonl(*bodies: dict[str, Any]) -> bytes:
    lines = [
        json.dumps(
            {"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
        for i, body in enumerate(bodies)
    ]
    return "\n".join(lines).encode() + b"\n"


def body(text: str) -> dict[str, Any]:
    return {"model": "judge-model", "messages": [{"role": "user", "content": text}]}


def submit(http: httpx.Client, content: bytes) -> dict[str, Any]:
    uploaded = http.post(
        "/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", content, "application/jsonl")},
    )
    assert uploaded.status_code == 200, uploaded.text
    assert uploaded.json()["purpose"] == "batch"
    created = http.post(
        "/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    assert created.status_code == 200, created.text
    batch: dict[str, Any] = created.json()
    assert batch["status"] == "validating"
    return batch


def test_completed_batch_answers_every_line_and_sends_no_live_request(llm: ScriptedLLM) -> None:
    llm.script("first", Reply(status=400, error_body={"error": {"message": "no"}}))
    with httpx.Client(base_url=llm.base_url) as http:
        batch = submit(http, jsonl(body("one"), body("two")))
        polled = http.get(f"/batches/{batch['id']}").json()
        assert polled["status"] == "completed"
        assert polled["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
        output = http.get(f"/files/{polled['output_file_id']}/content").text.splitlines()
        errors = http.get(f"/files/{polled['error_file_id']}/content").text.splitlines()
    line = json.loads(output[0])
    assert line["custom_id"] == "c0"
    assert line["response"]["status_code"] == 200
    assert line["response"]["body"]["choices"][0]["message"]["content"] == "first"
    assert line["response"]["body"]["usage"]["completion_tokens"] > 0
    assert json.loads(errors[0])["response"]["status_code"] == 400
    assert llm.requests == []
    assert [b["messages"][0]["content"] for b in llm.batch_requests] == ["one", "two"]
    assert [(m, s) for m, _, s in llm.batch_calls] == [
        ("POST", 200),
        ("POST", 200),
        ("GET", 200),
        ("GET", 200),
        ("GET", 200),
    ]
    llm.assert_exhausted()


@pytest.mark.parametrize("outcome", ["failed", "expired"])
def test_scripted_failure_and_expiry(llm: ScriptedLLM, outcome: str) -> None:
    llm.script_batches(outcome)
    with httpx.Client(base_url=llm.base_url) as http:
        batch = submit(http, jsonl(body("one")))
        polled = http.get(f"/batches/{batch['id']}").json()
    assert polled["status"] == outcome
    assert polled["output_file_id"] is None
    assert polled[f"{outcome}_at"] is not None
    assert llm.batch_requests == []


def test_in_progress_until_settled_and_cancel(llm: ScriptedLLM) -> None:
    llm.script_batches("in_progress", "in_progress")
    llm.script("late")
    with httpx.Client(base_url=llm.base_url) as http:
        held = submit(http, jsonl(body("held")))
        cancelled = submit(http, jsonl(body("cancel me")))
        assert http.get(f"/batches/{held['id']}").json()["status"] == "in_progress"
        assert http.get(f"/batches/{held['id']}").json()["status"] == "in_progress"
        assert http.post(f"/batches/{cancelled['id']}/cancel").json()["status"] == "cancelled"
        llm.settle_batches()
        assert http.get(f"/batches/{held['id']}").json()["status"] == "completed"
        assert http.get(f"/batches/{cancelled['id']}").json()["status"] == "cancelled"
    assert [b["messages"][0]["content"] for b in llm.batch_requests] == ["held"]


def test_bad_requests_name_the_field(llm: ScriptedLLM) -> None:
    with httpx.Client(base_url=llm.base_url) as http:
        wrong_purpose = http.post(
            "/files", data={"purpose": "fine-tune"}, files={"file": ("x", b"", "text/plain")}
        )
        bad_line = http.post(
            "/files", data={"purpose": "batch"}, files={"file": ("x", b'{"custom_id": 1}\n')}
        )
        no_file = http.post(
            "/batches",
            json={"input_file_id": "file-x", "endpoint": "/v1/chat/completions"},
        )
        missing = http.get("/batches/batch-404")
    assert wrong_purpose.status_code == 400
    assert wrong_purpose.json()["error"]["param"] == "purpose"
    assert bad_line.status_code == 400
    assert bad_line.json()["error"]["param"] == "file"
    assert no_file.status_code == 400
    assert no_file.json()["error"]["param"] == "input_file_id"
    assert missing.status_code == 404
