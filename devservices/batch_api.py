"""OpenAI's Files and Batches endpoints over an in-memory store, for the embedded model's server
and the test suite's scripted model (standard library only, no Django).

The store answers the shapes OpenAI documents:

- ``POST /v1/files`` (multipart, ``purpose=batch``, ``file`` a JSONL of ``{custom_id, method,
  url, body}`` lines) → a file object;
- ``GET /v1/files/<id>/content`` → the file's bytes (input, output or error JSONL);
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``) → a batch object;
- ``GET /v1/batches/<id>`` → the batch, with ``output_file_id`` once completed;
- ``POST /v1/batches/<id>/cancel`` → the batch, ``cancelled``.

Each output line is ``{"id", "custom_id", "response": {"status_code", "request_id", "body"},
"error": null}``. How a batch ends is decided by ``outcome(batch_id)`` when the batch is first
looked at after creation: ``completed`` (every line answered by ``answer(body)``), ``failed``,
``expired`` or ``in_progress`` (asked again at the next look).

With ``background=True`` (the embedded model's server), a batch to complete is answered by a
thread of its own: the look that starts it, and every look until its last line is answered, say
``in_progress`` at once, as a provider's batch does, instead of holding the poll until the model
has answered every line (a poll of a batch of a few lines then outlasted a client's timeout).
Cancelling stops it at the next line, and nothing is written.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

Answer = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
Outcome = Callable[[str], str]
OUTCOMES = ("completed", "failed", "expired", "in_progress")
CHAT_ENDPOINT = "/v1/chat/completions"


class BatchError(Exception):
    """An OpenAI-style error answer."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = "not_found_error" if self.status == 404 else "invalid_request_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": None}}


def parse_multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a multipart/form-data body: name → (filename, bytes)."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise BatchError(400, "POST /v1/files takes multipart/form-data", "file")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + raw)
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        parts[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return parts


class BatchStore:
    """Files and batches in memory, thread-safe; ``answer`` answers one chat request body."""

    def __init__(
        self, answer: Answer, outcome: Outcome | None = None, *, background: bool = False
    ) -> None:
        self._answer = answer
        self._background = background
        self._answering: set[str] = set()  # batches a background thread is answering
        self._outcome = outcome or (lambda batch_id: "completed")
        self._lock = threading.RLock()
        self._files: dict[str, dict[str, Any]] = {}
        self._contents: dict[str, bytes] = {}
        self._batches: dict[str, dict[str, Any]] = {}
        self._counter = 0
        self.lines_answered: list[dict[str, Any]] = []

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}-{self._counter}"

    # --- files --------------------------------------------------------------------------------

    def _store_file(self, content: bytes, purpose: str, filename: str) -> dict[str, Any]:
        file_id = self._next_id("file")
        record = {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
        }
        with self._lock:
            self._files[file_id] = record
            self._contents[file_id] = content
        return dict(record)

    def upload(self, content_type: str, raw: bytes) -> dict[str, Any]:
        parts = parse_multipart(content_type, raw)
        purpose = parts.get("purpose", (None, b""))[1].decode("utf-8", "replace").strip()
        if purpose != "batch":
            raise BatchError(400, f"purpose must be 'batch', not {purpose!r}", "purpose")
        if "file" not in parts:
            raise BatchError(400, "a multipart part named 'file' is required", "file")
        filename, content = parts["file"]
        for number, line in enumerate(content.decode("utf-8", "replace").splitlines(), 1):
            if line.strip():
                _check_line(line, number)
        return self._store_file(content, "batch", filename or "batch.jsonl")

    def content(self, file_id: str) -> bytes:
        with self._lock:
            if file_id not in self._contents:
                raise BatchError(404, f"no such file: {file_id}")
            return self._contents[file_id]

    # --- batches ------------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        input_file_id = body.get("input_file_id")
        with self._lock:
            if not isinstance(input_file_id, str) or input_file_id not in self._files:
                raise BatchError(400, f"no such input file: {input_file_id!r}", "input_file_id")
        if body.get("endpoint") != CHAT_ENDPOINT:
            raise BatchError(400, f"endpoint must be {CHAT_ENDPOINT}", "endpoint")
        if body.get("completion_window") != "24h":
            raise BatchError(400, "completion_window must be '24h'", "completion_window")
        now = int(time.time())
        lines = [line for line in self.content(input_file_id).decode().splitlines() if line.strip()]
        batch: dict[str, Any] = {
            "id": self._next_id("batch"),
            "object": "batch",
            "endpoint": CHAT_ENDPOINT,
            "errors": None,
            "input_file_id": input_file_id,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + 24 * 3600,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelled_at": None,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else None,
        }
        with self._lock:
            self._batches[batch["id"]] = batch
        return dict(batch)

    def get(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self._batches.get(batch_id)
            if batch is None:
                raise BatchError(404, f"no such batch: {batch_id}")
            if batch["status"] in ("validating", "in_progress"):
                self._advance(batch)
            copied: dict[str, Any] = json.loads(json.dumps(batch))
            return copied

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self._batches.get(batch_id)
            if batch is None:
                raise BatchError(404, f"no such batch: {batch_id}")
            if batch["status"] in ("validating", "in_progress", "cancelling"):
                batch["status"] = "cancelled"
                batch["cancelled_at"] = int(time.time())
            return dict(batch)

    def batches(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(batch) for batch in self._batches.values()]

    def _advance(self, batch: dict[str, Any]) -> None:
        outcome = self._outcome(batch["id"])
        if outcome not in OUTCOMES:
            raise ValueError(f"batch outcome must be one of {OUTCOMES}, not {outcome!r}")
        now = int(time.time())
        batch["in_progress_at"] = batch["in_progress_at"] or now
        if outcome == "in_progress":
            batch["status"] = "in_progress"
        elif outcome == "failed":
            batch["status"] = "failed"
            batch["failed_at"] = now
            batch["errors"] = {
                "object": "list",
                "data": [{"code": "batch_failed", "message": "scripted failure", "line": None}],
            }
        elif outcome == "expired":
            batch["status"] = "expired"
            batch["expired_at"] = now
        elif self._background:
            batch["status"] = "in_progress"
            if batch["id"] not in self._answering:
                self._answering.add(batch["id"])
                threading.Thread(
                    target=self._answer_in_background,
                    args=(batch["id"],),
                    name=f"batch-{batch['id']}",
                    daemon=True,
                ).start()
        else:
            out, errors = self._answers(batch)
            self._complete(batch, now, out, errors)

    def _cancelled(self, batch_id: str) -> bool:
        with self._lock:
            return bool(self._batches[batch_id]["status"] == "cancelled")

    def _answer_in_background(self, batch_id: str) -> None:
        """Answer every line outside the store's lock (polls answer meanwhile), then complete
        the batch unless it was cancelled."""
        try:
            with self._lock:
                batch = self._batches[batch_id]
            try:
                out, errors = self._answers(batch, stop=lambda: self._cancelled(batch_id))
            except Exception as exc:  # noqa: BLE001 - the batch fails, as a provider's would
                with self._lock:
                    if batch["status"] == "in_progress":
                        batch["status"] = "failed"
                        batch["failed_at"] = int(time.time())
                        message = f"answering a line failed: {type(exc).__name__}"
                        batch["errors"] = {
                            "object": "list",
                            "data": [{"code": "server_error", "message": message, "line": None}],
                        }
                return
            with self._lock:
                if batch["status"] == "in_progress":  # not cancelled meanwhile
                    self._complete(batch, int(time.time()), out, errors)
        finally:
            with self._lock:
                self._answering.discard(batch_id)

    def _answers(
        self, batch: dict[str, Any], stop: Callable[[], bool] = lambda: False
    ) -> tuple[list[str], list[str]]:
        """The output and error lines of the batch's input, a line answered at a time; with
        ``stop`` true before a line, what was answered so far is dropped (empty lists)."""
        out: list[str] = []
        errors: list[str] = []
        for raw in self.content(batch["input_file_id"]).decode().splitlines():
            if not raw.strip():
                continue
            if stop():
                return [], []
            line = json.loads(raw)
            self.lines_answered.append(line["body"])
            status, body = self._answer(line["body"])
            request_id = self._next_id("req_batch")
            record = {
                "id": self._next_id("batch_req"),
                "custom_id": line["custom_id"],
                "response": {"status_code": status, "request_id": request_id, "body": body},
                "error": None,
            }
            (out if status == 200 else errors).append(json.dumps(record))
        return out, errors

    def _complete(self, batch: dict[str, Any], now: int, out: list[str], errors: list[str]) -> None:
        counts = batch["request_counts"]
        counts["completed"], counts["failed"] = len(out), len(errors)
        batch["output_file_id"] = self._store_file(
            "".join(f"{line}\n" for line in out).encode(), "batch_output", "output.jsonl"
        )["id"]
        if errors:
            batch["error_file_id"] = self._store_file(
                "".join(f"{line}\n" for line in errors).encode(), "batch_output", "errors.jsonl"
            )["id"]
        batch["status"] = "completed"
        batch["completed_at"] = now


def _check_line(line: str, number: int) -> None:
    try:
        parsed = json.loads(line)
    except ValueError as exc:
        raise BatchError(400, f"line {number} is not JSON: {exc}", "file") from None
    if not isinstance(parsed, dict):
        raise BatchError(400, f"line {number} is not a JSON object", "file")
    for key in ("custom_id", "method", "url", "body"):
        if key not in parsed:
            raise BatchError(400, f"line {number} lacks {key!r}", "file")
    if parsed["url"] != CHAT_ENDPOINT or parsed["method"] != "POST":
        raise BatchError(400, f"line {number}: only POST {CHAT_ENDPOINT} is batched", "file")


def route(
    store: BatchStore, method: str, path: str, content_type: str, raw: bytes
) -> tuple[int, bytes, str] | None:
    """Answer a Files/Batches request: (status, body, content type), or None if the path is not
    one of them."""
    path = path.split("?", 1)[0].rstrip("/")
    if path.startswith("/v1/"):
        path = path[3:]
    parts = path.strip("/").split("/")
    if parts[0] not in ("files", "batches"):
        return None
    try:
        if method == "POST" and parts == ["files"]:
            return _json(200, store.upload(content_type, raw))
        if method == "GET" and len(parts) == 3 and parts[0] == "files" and parts[2] == "content":
            return 200, store.content(parts[1]), "application/jsonl"
        if method == "POST" and parts == ["batches"]:
            try:
                body = json.loads(raw or b"{}")
            except ValueError as exc:
                raise BatchError(400, f"request body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise BatchError(400, "request body is not a JSON object")
            return _json(200, store.create(body))
        if method == "GET" and len(parts) == 2 and parts[0] == "batches":
            return _json(200, store.get(parts[1]))
        if method == "POST" and len(parts) == 3 and parts[0] == "batches" and parts[2] == "cancel":
            return _json(200, store.cancel(parts[1]))
    except BatchError as error:
        return _json(error.status, error.body())
    return None


def _json(status: int, payload: dict[str, Any]) -> tuple[int, bytes, str]:
    return status, json.dumps(payload).encode(), "application/json"
