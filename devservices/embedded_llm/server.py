"""The embedded model's HTTP endpoint: OpenAI-compatible routes over the standard library's
threaded server."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import TYPE_CHECKING, Any

from devservices.batch_api import BatchStore
from devservices.batch_api import route as batch_route
from devservices.embedded_llm.chat_request import ChatRequest, RequestError, parse_request
from devservices.embedded_llm.engine import MODEL_NAME, Engine, generation_error, model_path

if TYPE_CHECKING:  # llama_cpp is imported by the engine only, after it sets OMP_WAIT_POLICY
    from llama_cpp import LlamaGrammar

MAX_BODY_BYTES = 4 * 1024 * 1024


class EmbeddedLLMServer(ThreadingHTTPServer):
    daemon_threads = True
    engine: Engine
    batches: BatchStore
    log_requests: bool = False


def answer_batch_line(engine: Engine, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One line of a batch, answered as a non-streamed chat completion (or its error)."""
    try:
        request = parse_request(json.dumps({**body, "stream": False}).encode())
        grammar = engine.compile_grammar(request.schema) if request.schema else None
        try:
            return 200, engine.complete(request, grammar)
        except Exception as exc:  # noqa: BLE001 - reported in the line, never a traceback
            raise generation_error(exc) from None
    except RequestError as error:
        return error.status, error.body()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ChukwaEmbeddedLLM/1"
    server: EmbeddedLLMServer
    _streaming: bool = False

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, error: RequestError) -> None:
        self._send_json(error.status, error.body())

    def _send_batch(self, method: str, raw: bytes) -> bool:
        """Files and Batches (devservices/batch_api.py); a batch is answered in the background
        from its first poll on (``in_progress`` until its last line is answered)."""
        content_type = self.headers.get("Content-Type", "")
        answer = batch_route(self.server.batches, method, self.path, content_type, raw)
        if answer is None:
            return False
        status, data, kind = answer
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        return True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        engine = self.server.engine
        if self._send_batch("GET", b""):
            return
        if path == "/health":
            self._send_json(200, {"ok": True, "model": MODEL_NAME, "model_file": engine.path.name})
        elif path in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": MODEL_NAME,
                            "object": "model",
                            "created": int(engine.path.stat().st_mtime),
                            "owned_by": "chukwa-embedded",
                        }
                    ],
                },
            )
        else:
            self._send_error(RequestError(f"no such endpoint: GET {path}", status=404))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise RequestError("chunked request bodies are not supported; send Content-Length")
        length_header = self.headers.get("Content-Length")
        try:
            length = int(length_header or "")
        except ValueError:
            self.close_connection = True
            raise RequestError("a Content-Length header is required", status=411) from None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(f"request body larger than {MAX_BODY_BYTES} bytes", status=413)
        return self.rfile.read(length)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        self._streaming = False
        try:
            body = self._read_body()
            if self._send_batch("POST", body):
                return
            if path not in ("/v1/chat/completions", "/chat/completions"):
                raise RequestError(f"no such endpoint: POST {path}", status=404)
            request = parse_request(body)
            engine = self.server.engine
            grammar = engine.compile_grammar(request.schema) if request.schema else None
            if request.stream:
                self._stream(engine, request, grammar)
                return
            try:
                response = engine.complete(request, grammar)
            except Exception as exc:  # noqa: BLE001 - reported to the client, never a traceback
                raise generation_error(exc) from None
            self._send_json(200, response)
        except RequestError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - an OpenAI error shape, never a traceback
            self.close_connection = True
            if not self._streaming:
                self._send_error(
                    RequestError(
                        f"internal error: {type(exc).__name__}: {exc}",
                        status=500,
                        error_type="server_error",
                    )
                )

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _write_event(self, payload: dict[str, Any]) -> None:
        self._write_chunk(b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n")

    def _stream(self, engine: Engine, request: ChatRequest, grammar: LlamaGrammar | None) -> None:
        chunks = engine.stream(request, grammar)
        try:
            try:
                first = next(chunks, None)  # runs the prompt: context errors still get a 400
            except Exception as exc:  # noqa: BLE001 - reported to the client
                raise generation_error(exc) from None
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._streaming = True
            try:
                if first is not None:
                    self._write_event(first)
                for item in chunks:
                    self._write_event(item)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            except Exception as exc:  # noqa: BLE001 - headers are sent: report as an SSE event
                error = generation_error(exc)
                self._write_event(error.body())
                self._write_chunk(b"")
                self.close_connection = True
                return
            self._write_chunk(b"data: [DONE]\n\n")
            self._write_chunk(b"")
        finally:
            chunks.close()


def serve(
    host: str, port: int, threads: int = 2, ctx: int = 4096, *, log_requests: bool = False
) -> EmbeddedLLMServer:
    """Load the model and serve it from a daemon thread; returns the started server
    (``server.server_address`` holds the bound port when ``port`` is 0)."""
    engine = Engine(model_path(), threads=threads, ctx=ctx)
    server = EmbeddedLLMServer((host, port), Handler)
    server.engine = engine
    server.batches = BatchStore(lambda body: answer_batch_line(engine, body), background=True)
    server.log_requests = log_requests
    thread = threading.Thread(target=server.serve_forever, name="embedded-llm-http", daemon=True)
    thread.start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.embedded_llm",
        description=f"OpenAI-compatible Chat Completions endpoint serving {MODEL_NAME}.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--log-requests", action="store_true")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.threads, args.ctx, log_requests=args.log_requests)
    host, port = str(server.server_address[0]), server.server_address[1]
    print(
        f"embedded LLM listening on http://{host}:{port}/v1 "
        f"(model {MODEL_NAME}, file {server.engine.path})",
        flush=True,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    return 0
