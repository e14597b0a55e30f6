"""A scripted OpenAI-compatible Chat Completions server, over real HTTP, for tests.

No Django imports: this is a plain standard-library HTTP server running in a daemon thread.

    with ScriptedLLM() as llm:
        llm.script("plain text", {"kind": "final_patch", "patch": {...}}, Reply(status=400, ...))
        ... point the code under test at llm.base_url ...
        assert llm.requests[0]["model"] == "gpt-4o-mini"

Every non-probe ``POST <base_url>/chat/completions`` pops the next scripted reply (FIFO). Conformance
probes (``response_format.json_schema.name == "chukwa_conformance_probe"``) never consume the queue.
An empty queue answers HTTP 500 so a test that under-scripts fails loudly.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from devservices.batch_api import OUTCOMES, BatchStore
from devservices.batch_api import route as batch_route

PROBE_SCHEMA_NAME = "chukwa_conformance_probe"
PROBE_OK = "chukwa-conformance-ok"
PROBE_WRONG = "whatever I like"
NO_REPLY_MESSAGE = "scripted LLM: no reply scripted for this request"
DEFAULT_MODEL = "scripted-model"


@dataclass(frozen=True)
class Reply:
    """One scripted answer with full control over how it is delivered.

    Precedence: ``raw_body`` (sent verbatim with ``status``: as ``text/event-stream`` when the
    status is 200, as a streaming reply would be, else as text/plain; ``content_type`` overrides
    either), then ``error_body`` (sent as JSON with ``status``), then a completion streaming
    ``text`` ("" when None). A non-200 ``status`` with neither body sends a generic OpenAI-style
    error body.
    """

    text: str | None = None
    status: int = 200
    error_body: dict[str, Any] | None = None
    chunk_size: int = 8
    delay_s: float = 0
    chunk_delay_s: float = 0
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None
    close_mid_stream: bool = False
    raw_body: bytes | None = None
    content_type: str | None = None
    # extra headers of a non-streamed answer (an error's ``Retry-After``)
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError("Reply.chunk_size must be >= 1")
        if self.delay_s < 0 or self.chunk_delay_s < 0:
            raise ValueError("Reply delays must be >= 0")


ReplyValue = str | dict[str, Any] | Reply
ReplyFactory = Callable[[dict[str, Any]], ReplyValue]
Scripted = ReplyValue | ReplyFactory


def _as_reply(value: ReplyValue) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    if isinstance(value, dict):
        return Reply(text=json.dumps(value))
    raise TypeError(f"scripted LLM: unsupported reply type {type(value).__name__}")


def _check_scriptable(value: object) -> None:
    if not isinstance(value, str | dict | Reply) and not callable(value):
        raise TypeError(
            f"scripted LLM: a reply must be str, dict, Reply or a callable, "
            f"not {type(value).__name__}"
        )


def _estimate_tokens(chars: int) -> int:
    return (chars + 3) // 4


def _request_chars(body: dict[str, Any]) -> int:
    total = 0
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    total += len(part["text"])
    return total


def _is_probe(body: dict[str, Any]) -> bool:
    response_format = body.get("response_format")
    if not isinstance(response_format, dict):
        return False
    json_schema = response_format.get("json_schema")
    return isinstance(json_schema, dict) and json_schema.get("name") == PROBE_SCHEMA_NAME


def _error_body(message: str, error_type: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    llm: ScriptedLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients dropping connections mid-stream is expected in tests; stay quiet.
        return


class _Handler(BaseHTTPRequestHandler):
    # Stream chunks go out at once (no Nagle delay waiting for the client's delayed ACK).
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        self.server.llm._track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.llm._untrack(self.connection)

    # --- request plumbing -------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the blank line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_bytes(
        self,
        status: int,
        body: bytes,
        content_type: str,
        *,
        truncate: bool = False,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-request-id", self.server.llm._next_request_id())
        if truncate:
            self.send_header("Connection", "close")
        self.end_headers()
        if truncate:
            self.wfile.write(body[: max(1, len(body) // 2)])
            self.wfile.flush()
            self._drop()
            return
        self._uncount()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers=headers)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # --- HTTP verbs -------------------------------------------------------------------------

    def _batch_route(self, method: str, raw: bytes) -> bool:
        llm = self.server.llm
        content_type = self.headers.get("Content-Type", "")
        answer = batch_route(llm._batch_store, method, self.path, content_type, raw)
        if answer is None:
            return False
        status, body, kind = answer
        llm._count_batch_call(method, self.path, status)
        self._send_bytes(status, body, kind)
        return True

    def do_GET(self) -> None:
        llm = self.server.llm
        if self._batch_route("GET", b""):
            return
        if self.path.rstrip("/") == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": llm.response_model or DEFAULT_MODEL, "object": "model"}],
                },
            )
            return
        llm._fail(f"scripted LLM: unexpected GET {self.path}")
        self._send_json(404, _error_body(f"scripted LLM: no route GET {self.path}", "not_found"))

    def do_POST(self) -> None:
        llm = self.server.llm
        raw = self._read_body()
        if self._batch_route("POST", raw):
            return
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
            llm._fail(f"scripted LLM: unexpected POST {self.path}")
            self._send_json(
                404, _error_body(f"scripted LLM: no route POST {self.path}", "not_found")
            )
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            llm._fail(f"scripted LLM: request body is not JSON: {exc}")
            self._send_json(
                400, _error_body(f"request body is not JSON: {exc}", "invalid_request_error")
            )
            return
        if not isinstance(body, dict):
            llm._fail("scripted LLM: request body is not a JSON object")
            self._send_json(
                400, _error_body("request body is not a JSON object", "invalid_request_error")
            )
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        probe = _is_probe(body)
        self._counted = not probe
        self._entered = time.monotonic()
        if self._counted:
            llm._enter()
        try:
            self._answer(llm, body, headers)
        finally:
            self._uncount()

    def _uncount(self) -> None:
        """The request is no longer in flight: called as its last bytes are about to be
        written (the client cannot have read its end before), or when its handler ends. Counted
        only after the write, a client that read the end, gave its slot back and sent its next
        request could be seen before this thread ran again: a peak the client never caused."""
        if getattr(self, "_counted", False):
            self._counted = False
            self.server.llm._leave(time.monotonic() - self._entered)

    def _answer(self, llm: ScriptedLLM, body: dict[str, Any], headers: dict[str, str]) -> None:
        try:
            reply = llm._reply_for(body, headers)
        except Exception as exc:  # noqa: BLE001  (a scripted callable blew up: fail loudly)
            message = f"scripted LLM: reply callable raised {type(exc).__name__}: {exc}"
            llm._fail(message)
            self._send_json(500, _error_body(message))
            return
        if reply is None:
            self._send_json(500, _error_body(NO_REPLY_MESSAGE))
            return
        try:
            self._respond(body, reply)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            llm._client_disconnected()
            self.close_connection = True
        except OSError:
            self.close_connection = True

    # --- replies ----------------------------------------------------------------------------

    def _respond(self, body: dict[str, Any], reply: Reply) -> None:
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.raw_body is not None:
            default_type = "text/event-stream" if reply.status == 200 else "text/plain"
            self._send_bytes(
                reply.status,
                reply.raw_body,
                reply.content_type or f"{default_type}; charset=utf-8",
                truncate=reply.close_mid_stream,
            )
            return
        if reply.error_body is not None or reply.status != 200:
            payload = reply.error_body or _error_body(
                f"scripted LLM: scripted HTTP {reply.status}", "scripted_error"
            )
            self._send_json(reply.status, payload, reply.headers)
            return
        text = reply.text or ""
        if reply.usage is not None:
            usage = dict(reply.usage)
        else:
            prompt_tokens = _estimate_tokens(_request_chars(body))
            completion_tokens = _estimate_tokens(len(text))
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        completion_id = f"chatcmpl-scripted-{self.server.llm._next_completion_number()}"
        model = self.server.llm.response_model or body.get("model") or DEFAULT_MODEL
        created = int(time.time())
        if body.get("stream"):
            stream_options = body.get("stream_options")
            include_usage = isinstance(stream_options, dict) and bool(
                stream_options.get("include_usage")
            )
            self._stream(reply, text, usage, completion_id, model, created, include_usage)
            return
        payload = {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": usage,
        }
        self._send_bytes(
            200,
            json.dumps(payload).encode(),
            "application/json",
            truncate=reply.close_mid_stream,
        )

    def _stream(
        self,
        reply: Reply,
        text: str,
        usage: dict[str, Any],
        completion_id: str,
        model: str,
        created: int,
        include_usage: bool,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", self.server.llm._next_request_id())
        self.end_headers()

        pieces = [text[i : i + reply.chunk_size] for i in range(0, len(text), reply.chunk_size)]
        if not pieces:
            pieces = [""]
        if reply.close_mid_stream:
            pieces = pieces[: max(1, len(pieces) // 2)]

        def event(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            self._write_chunk(f"data: {data}\n\n".encode())

        for index, piece in enumerate(pieces):
            if index and reply.chunk_delay_s:
                time.sleep(reply.chunk_delay_s)
            last = index == len(pieces) - 1 and not reply.close_mid_stream
            delta: dict[str, Any] = {"content": piece}
            if index == 0:
                delta = {"role": "assistant", "content": piece}
            chunk: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": reply.finish_reason if last else None,
                    }
                ],
            }
            if include_usage:
                chunk["usage"] = None
            event(chunk)

        if reply.close_mid_stream:
            self._drop()
            return
        if include_usage:
            event(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        event("[DONE]")
        self._uncount()
        self._write_chunk(b"")  # terminating zero-length chunk: "0\r\n\r\n"


class ScriptedLLM:
    """A real-HTTP, OpenAI-compatible Chat Completions server answering from a FIFO script."""

    def __init__(
        self,
        *,
        enforce_schema: bool = True,
        probe_reply: Scripted | None = None,
        response_model: str | None = None,
    ) -> None:
        """``enforce_schema``: answer conformance probes correctly (True) or wrongly (False).
        ``probe_reply``: override the probe answer entirely (e.g. a 400 rejecting json_schema).
        ``response_model``: the model name reported back (default: echo the requested model)."""
        if probe_reply is not None:
            _check_scriptable(probe_reply)
        self.enforce_schema = enforce_schema
        self.probe_reply = probe_reply
        self.response_model = response_model
        self._lock = threading.Condition()
        self._queue: deque[Scripted] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._probes: list[dict[str, Any]] = []
        self._probe_headers: list[dict[str, str]] = []
        self._unanswered: list[dict[str, Any]] = []
        self._failures: list[str] = []
        self._client_disconnects = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._service_seconds: list[float] = []
        self._router: ReplyFactory | None = None
        self._request_counter = 0
        self._completion_counter = 0
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._batch_outcomes: deque[str] = deque()
        self._batch_plan: dict[str, str] = {}
        self._batch_calls: list[tuple[str, str, int]] = []
        self._batch_store = BatchStore(self._answer_batch_line, self._outcome_of)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("scripted LLM already started")
        server = _Server(("127.0.0.1", 0), _Handler)
        server.llm = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-llm-{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and sever every open connection (including streams in flight)."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = None
        self._thread = None
        server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("scripted LLM is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting --------------------------------------------------------------------------

    def script(self, *replies: Scripted) -> Self:
        """Append replies to the FIFO queue: str, dict (JSON), Reply, or ``(request_json) -> ...``."""
        for reply in replies:
            _check_scriptable(reply)
        with self._lock:
            self._queue.extend(replies)
        return self

    def route(self, router: ReplyFactory | None) -> Self:
        """Answer every non-probe request with ``router(request_json)`` instead of the FIFO
        queue (for subjects thinking at the same time, whose requests arrive in any order)."""
        with self._lock:
            self._router = router
        return self

    @property
    def pending(self) -> int:
        """How many scripted replies have not been consumed yet."""
        with self._lock:
            return len(self._queue)

    # --- recordings (copies; safe to read while the server runs) ----------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """JSON bodies of non-probe chat completion requests, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """Lower-cased request headers, parallel to ``requests``."""
        with self._lock:
            return list(self._headers)

    @property
    def probes(self) -> list[dict[str, Any]]:
        """JSON bodies of conformance probe requests, in arrival order."""
        with self._lock:
            return list(self._probes)

    @property
    def probe_headers(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._probe_headers)

    @property
    def unanswered(self) -> list[dict[str, Any]]:
        """Requests that arrived while the queue was empty (answered with HTTP 500)."""
        with self._lock:
            return list(self._unanswered)

    @property
    def failures(self) -> list[str]:
        """Every loud failure: unscripted requests, bad routes, bad JSON, callables raising."""
        with self._lock:
            return list(self._failures)

    @property
    def in_flight(self) -> int:
        """Chat completion requests (probes excepted) being answered right now."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most chat completion requests (probes excepted) ever answered at once."""
        with self._lock:
            return self._max_in_flight

    @property
    def service_seconds(self) -> list[float]:
        """How long each chat completion request (probes excepted) was in flight here: from
        its body read to its last bytes about to be written (a reply's delay and the writing of
        all but its end)."""
        with self._lock:
            return list(self._service_seconds)

    def reset(self) -> None:
        """Forget every recording, the script, the router and the in-flight maximum (a server
        shared by several tests, e.g. one a Celery worker was started against)."""
        with self._lock:
            for recorded in (
                self._requests,
                self._headers,
                self._probes,
                self._probe_headers,
                self._unanswered,
                self._failures,
            ):
                recorded.clear()
            self._batch_calls.clear()
            self._batch_outcomes.clear()
            self._queue.clear()
            self._router = None
            self._max_in_flight = self._in_flight
            self._service_seconds.clear()

    def wait_in_flight(self, count: int, timeout: float = 20.0) -> bool:
        """Block until at least ``count`` requests are in flight at once (or were); False on
        timeout. For a reply callable that must hold until its peers have arrived."""
        with self._lock:
            return self._lock.wait_for(lambda: self._max_in_flight >= count, timeout=timeout)

    @property
    def client_disconnects(self) -> int:
        """Responses cut short because the client went away while we were writing."""
        with self._lock:
            return self._client_disconnects

    def last_messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of the most recent non-probe request."""
        with self._lock:
            if not self._requests:
                raise AssertionError("scripted LLM received no chat completion requests")
            return list(self._requests[-1].get("messages") or [])

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Block until at least ``count`` non-probe requests have arrived; return them."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout=timeout):
                raise AssertionError(
                    f"scripted LLM: expected {count} request(s) within {timeout}s, "
                    f"got {len(self._requests)}"
                )
            return list(self._requests)

    def assert_exhausted(self) -> None:
        """Every scripted reply was consumed and nothing failed loudly."""
        with self._lock:
            problems = list(self._failures)
            if self._queue:
                problems.append(f"{len(self._queue)} scripted repl(ies) never consumed")
        if problems:
            raise AssertionError("; ".join(problems))

    # --- called from handler threads --------------------------------------------------------

    def _reply_for(self, body: dict[str, Any], headers: dict[str, str]) -> Reply | None:
        if _is_probe(body):
            with self._lock:
                self._probes.append(body)
                self._probe_headers.append(headers)
                self._lock.notify_all()
            if self.probe_reply is not None:
                scripted: Scripted = self.probe_reply
                value = scripted(body) if callable(scripted) else scripted
                return _as_reply(value)
            return _as_reply({"probe": PROBE_OK if self.enforce_schema else PROBE_WRONG})
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            self._lock.notify_all()
            router = self._router
        if router is not None:
            return _as_reply(router(body))
        with self._lock:
            if not self._queue:
                self._unanswered.append(body)
                self._failures.append(f"{NO_REPLY_MESSAGE} (request #{len(self._requests)})")
                return None
            scripted = self._queue.popleft()
        value = scripted(body) if callable(scripted) else scripted
        return _as_reply(value)

    # --- batches (OpenAI Files + Batches; see devservices/batch_api.py) ---------------------

    def script_batches(self, *outcomes: str) -> Self:
        """How the next batches end, in creation order: ``completed`` (the default once the
        queue is empty), ``failed``, ``expired`` or ``in_progress`` (stays so until
        ``settle_batches``). Lines of a completed batch are answered like chat requests (the
        router, else the FIFO queue) but recorded in ``batch_requests``, not ``requests``."""
        for outcome in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"scripted LLM: batch outcome must be one of {OUTCOMES}")
        with self._lock:
            self._batch_outcomes.extend(outcomes)
        return self

    def settle_batches(self, outcome: str = "completed") -> None:
        """End every batch held ``in_progress`` with ``outcome`` at its next poll."""
        if outcome not in OUTCOMES:
            raise ValueError(f"scripted LLM: batch outcome must be one of {OUTCOMES}")
        with self._lock:
            for batch_id, planned in self._batch_plan.items():
                if planned == "in_progress":
                    self._batch_plan[batch_id] = outcome

    @property
    def batch_requests(self) -> list[dict[str, Any]]:
        """Chat request bodies answered inside completed batches, in answer order."""
        with self._lock:
            return list(self._batch_store.lines_answered)

    @property
    def batch_calls(self) -> list[tuple[str, str, int]]:
        """Every Files/Batches HTTP call received: (method, path, status)."""
        with self._lock:
            return list(self._batch_calls)

    @property
    def batches(self) -> list[dict[str, Any]]:
        """The batch objects created so far (as the last poll left them)."""
        return self._batch_store.batches()

    def _count_batch_call(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._batch_calls.append((method, path, status))
            self._lock.notify_all()

    def _outcome_of(self, batch_id: str) -> str:
        with self._lock:
            if batch_id not in self._batch_plan:
                queued = self._batch_outcomes.popleft() if self._batch_outcomes else "completed"
                self._batch_plan[batch_id] = queued
            return self._batch_plan[batch_id]

    def _answer_batch_line(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            router = self._router
            scripted: Scripted | None = None
            if router is None and self._queue:
                scripted = self._queue.popleft()
        if router is not None:
            reply = _as_reply(router(body))
        elif scripted is not None:
            reply = _as_reply(scripted(body) if callable(scripted) else scripted)
        else:
            self._fail(f"{NO_REPLY_MESSAGE} (batch line)")
            return 500, _error_body(NO_REPLY_MESSAGE)
        return _completion_body(self, body, reply)

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            self._lock.notify_all()

    def _leave(self, seconds: float) -> None:
        with self._lock:
            self._in_flight -= 1
            self._service_seconds.append(seconds)
            self._lock.notify_all()

    def _fail(self, message: str) -> None:
        with self._lock:
            self._failures.append(message)

    def _client_disconnected(self) -> None:
        with self._lock:
            self._client_disconnects += 1

    def _next_request_id(self) -> str:
        with self._lock:
            self._request_counter += 1
            return f"req_scripted_{self._request_counter}"

    def _next_completion_number(self) -> int:
        with self._lock:
            self._completion_counter += 1
            return self._completion_counter

    def _track(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)


def _completion_body(
    llm: ScriptedLLM, body: dict[str, Any], reply: Reply
) -> tuple[int, dict[str, Any]]:
    """A non-streamed chat completion (or error) for ``reply``: one line of a batch's output."""
    if reply.error_body is not None or reply.status != 200:
        payload = reply.error_body or _error_body(f"scripted LLM: scripted HTTP {reply.status}")
        return reply.status, payload
    text = reply.text or ""
    if reply.usage is not None:
        usage = dict(reply.usage)
    else:
        prompt_tokens = _estimate_tokens(_request_chars(body))
        completion_tokens = _estimate_tokens(len(text))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return 200, {
        "id": f"chatcmpl-scripted-{llm._next_completion_number()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": llm.response_model or body.get("model") or DEFAULT_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": usage,
    }


def iter_sse_data(lines: Iterator[str]) -> Iterator[str]:
    """Yield the payload of each ``data:`` line of an SSE stream (helper for tests)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[len("data:") :].strip()
