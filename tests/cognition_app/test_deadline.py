"""The deadline watcher (cognition_app/sources/deadline.py): a stream still read at its deadline
has its socket shut, so its reader wakes at once; one finished before is never touched."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from cognition_app.sources.deadline import bounded
from cognition_app.sources.transport import post


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for _ in range(int(self.path.strip("/") or 0)):
                self.wfile.write(b"1\r\nx\r\n")
                self.wfile.flush()
                time.sleep(0.4)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Any:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _post(url: str) -> Any:
    return post(url, content=b"", headers={}, timeout=5)


def test_a_stream_read_past_its_deadline_is_cut(server: str) -> None:
    started = time.monotonic()
    with (
        pytest.raises(httpx.HTTPError),
        _post(f"{server}/20") as response,  # 8 s of chunks
        bounded(response, started + 1.0),
    ):
        for _ in response.iter_raw():
            pass
    assert time.monotonic() - started < 3  # cut at 1 s, not at the end (8 s)


def test_a_stream_finished_in_time_is_left_alone_and_its_connection_reused(server: str) -> None:
    """Its connection goes back to the pool: were the watcher to shut it at the (later)
    deadline, the pool would drop it and the next request would open another connection."""
    sockets = []
    for _ in range(3):
        with (
            _post(f"{server}/1") as response,
            bounded(response, time.monotonic() + 0.5),
        ):
            assert response.read() == b"x"
            sockets.append(response.extensions["network_stream"].get_extra_info("socket"))
    time.sleep(0.8)  # every deadline has passed
    with _post(f"{server}/1") as response:
        assert response.read() == b"x"
        sockets.append(response.extensions["network_stream"].get_extra_info("socket"))
    assert all(s is sockets[0] for s in sockets), "a connection was not reused"
