"""The Batches store's background answering (devservices/batch_api.py, ``background=True``, as
the embedded model's server uses it): a poll never waits for the model; the batch is
``in_progress`` until its last line is answered, then completed with every line; a batch
cancelled meanwhile stops at its next line and writes nothing."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from devservices.batch_api import BatchStore

MULTIPART = "multipart/form-data; boundary=XyZ"


def _upload(store: BatchStore, lines: list[dict[str, Any]]) -> str:
    content = "".join(json.dumps(line) + "\n" for line in lines)
    raw = (
        '--XyZ\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        '--XyZ\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
        f"Content-Type: application/jsonl\r\n\r\n{content}\r\n--XyZ--\r\n"
    ).encode()
    return str(store.upload(MULTIPART, raw)["id"])


def _lines(count: int) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"line-{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": str(n)}]},
        }
        for n in range(count)
    ]


class _Gated:
    """An answer that waits for the test to let each line through."""

    def __init__(self) -> None:
        self.gate = threading.Semaphore(0)
        self.answered = 0

    def __call__(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        assert self.gate.acquire(timeout=30)
        self.answered += 1
        return 200, {"echo": body["messages"][0]["content"]}


def _until(check: Any) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _batch(store: BatchStore, count: int) -> str:
    body = {
        "input_file_id": _upload(store, _lines(count)),
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    return str(store.create(body)["id"])


def test_polls_say_in_progress_while_the_lines_are_answered_then_completed() -> None:
    answer = _Gated()
    store = BatchStore(answer, background=True)
    batch_id = _batch(store, 3)
    # every poll answers at once, none of the lines answered yet (the gate is shut)
    assert [store.get(batch_id)["status"] for _ in range(3)] == ["in_progress"] * 3
    assert answer.answered == 0
    answer.gate.release()
    _until(lambda: answer.answered == 1)
    assert store.get(batch_id)["status"] == "in_progress"
    for _ in range(2):
        answer.gate.release()
    _until(lambda: store.get(batch_id)["status"] == "completed")
    batch = store.get(batch_id)
    assert batch["request_counts"] == {"total": 3, "completed": 3, "failed": 0}
    output = [json.loads(line) for line in store.content(batch["output_file_id"]).splitlines()]
    assert [(o["custom_id"], o["response"]["body"]["echo"]) for o in output] == [
        ("line-0", "0"),
        ("line-1", "1"),
        ("line-2", "2"),
    ]
    assert answer.answered == 3  # each line once, however many polls


def test_a_batch_cancelled_while_answered_stops_and_writes_nothing() -> None:
    answer = _Gated()
    store = BatchStore(answer, background=True)
    batch_id = _batch(store, 3)
    assert store.get(batch_id)["status"] == "in_progress"
    answer.gate.release()
    _until(lambda: answer.answered == 1)
    assert store.cancel(batch_id)["status"] == "cancelled"
    for _ in range(2):  # enough for every line left: the one in flight ends, no other starts
        answer.gate.release()
    _until(lambda: not store._answering)  # the thread has ended
    batch = store.get(batch_id)
    assert (batch["status"], batch["output_file_id"]) == ("cancelled", None)
    assert answer.answered in (1, 2)  # line 3 never asked (it had its permit)


def test_without_background_the_first_poll_answers_every_line() -> None:
    calls: list[str] = []

    def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        calls.append(body["messages"][0]["content"])
        return 200, {}

    store = BatchStore(answer)
    batch_id = _batch(store, 2)
    assert store.get(batch_id)["status"] == "completed"
    assert calls == ["0", "1"]


def test_a_line_the_model_cannot_answer_fails_the_batch_instead_of_leaving_it_in_progress() -> None:
    def broken(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        raise RuntimeError("the model crashed")

    store = BatchStore(broken, background=True)
    batch_id = _batch(store, 2)
    assert store.get(batch_id)["status"] == "in_progress"
    _until(lambda: store.get(batch_id)["status"] != "in_progress")
    batch = store.get(batch_id)
    assert batch["status"] == "failed" and batch["output_file_id"] is None
    assert batch["errors"]["data"][0]["message"] == "answering a line failed: RuntimeError"
