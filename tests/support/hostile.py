"""A hostile HTTP JSON service for tests: answers every POST with the same bytes, and records
the headers it was sent. Plain standard library, real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def hostile_json_server(
    body: bytes,
    *,
    status: int = 200,
    seen: list[dict[str, str]] | None = None,
    trickle: tuple[int, float] | None = None,
) -> Iterator[str]:
    """Serve ``body`` to every POST; yields the base URL. ``seen`` collects request headers.
    ``trickle`` = (pieces, seconds): the body is sent in that many pieces, that long apart."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if seen is not None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if trickle is None:
                self.wfile.write(body)
                return
            pieces, pause = trickle
            size = -(-len(body) // pieces)
            try:
                for start in range(0, len(body), size):
                    if start:
                        time.sleep(pause)
                    self.wfile.write(body[start : start + size])
                    self.wfile.flush()
            except OSError:
                pass  # the client gave up: what the test is about

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
