"""Stopping the source calls of subjects still thinking once another subject has failed.

A flag, checked before every call (generation, tool, ambient) and between the chunks of a stream;
and the open LLM streams themselves, whose sockets are shut down so that a thread blocked waiting
for the next chunk wakes at once instead of at its read timeout. The call that was cut finishes
its rows as ``cancelled`` (``cognition_app.sources.llm``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from cognition_app.failures import SourceFailure

CANCELLED = "cancelled"


class CancelScope:
    """One attempt's stop switch; thread-safe."""

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._streams: set[httpx.Response] = set()
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._flag.is_set()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if not self._flag.is_set():
                self.reason = reason
                self._flag.set()
            streams = list(self._streams)
        for response in streams:
            shut(response)

    def check(self, what: str) -> None:
        """Raise before a call is sent once the scope is cancelled: nothing was started (no row
        is opened; one opened before the call waited for its limits is finished cancelled)."""
        if self._flag.is_set():
            raise SourceFailure(CANCELLED, f"{what} not started: {self.reason}")

    def wait(self, timeout: float) -> bool:
        return self._flag.wait(timeout)

    @contextmanager
    def watching(self, response: httpx.Response) -> Iterator[None]:
        """While the body of ``response`` is read, a cancel shuts its socket down."""
        with self._lock:
            self._streams.add(response)
            cancelled = self._flag.is_set()
        if cancelled:
            shut(response)
        try:
            yield
        finally:
            with self._lock:
                self._streams.discard(response)


def shut(response: httpx.Response) -> None:
    """Shut the socket of a response being read: its reader wakes with an error at once."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer or by the reader itself
