"""A loopback TCP port relayed to a Unix socket, for tests that connect "as another machine
would" (``postgres://…@127.0.0.1:<port>``, ``redis://127.0.0.1:<port>``) to the embedded
PostgreSQL and Redis, which listen on Unix sockets only (docs/operations.md, "Scale-out")."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass  # the other direction closed both sockets
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed


@contextmanager
def tcp_relay(unix_path: str) -> Iterator[int]:
    """Listen on 127.0.0.1 (a free port, yielded) and relay every connection, byte for byte
    both ways, to the Unix socket ``unix_path``; everything is closed on exit."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    opened: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # the relay is closing
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(unix_path)
            except OSError:
                client.close()
                upstream.close()
                continue
            opened.extend((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    acceptor = threading.Thread(target=accept, name="tcp-relay", daemon=True)
    acceptor.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()
        for end in opened:
            end.close()
        acceptor.join(timeout=5)
