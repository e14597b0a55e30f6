"""A source call's whole exchange bounded by its ``timeout_ms``.

A call's timeouts bound each step (connecting, sending, and each read), not the exchange: an
endpoint that sends a chunk now and then, each sooner than the timeout, could hold a stream open
for as long as it likes (a generation with ``timeout_ms`` 1000 streamed for 3.2 s and
succeeded). One thread per process watches the streams being read and shuts the socket of one
whose deadline has passed (as a cancel does, ``cognition_app.sources.cancel``), so its reader
wakes at once; the reader then fails the call as a timeout. Watching a stream is a heap push
under a lock: no thread per call.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from cognition_app.sources.cancel import shut
from cognition_app.sources.transport import post


class _Watchdog:
    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a forked worker starts its own

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._streams: dict[int, httpx.Response] = {}
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, response: httpx.Response, deadline: float) -> int:
        with self._cond:
            number = next(self._numbers)
            self._streams[number] = response
            heapq.heappush(self._heap, (deadline, number))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="chukwa-source-deadlines", daemon=True
                )
                self._thread.start()
            elif self._heap[0][1] == number:
                self._cond.notify()  # the earliest deadline now: the thread wakes sooner
        return number

    def unwatch(self, number: int) -> None:
        with self._cond:
            self._streams.pop(number, None)  # its heap entry is skipped when it comes up

    def _run(self) -> None:
        from time import monotonic

        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                deadline, number = self._heap[0]
                wait = deadline - monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                response = self._streams.pop(number, None)
                if response is not None:
                    # under the lock: once ``unwatch`` has returned, its stream (whose
                    # connection may be back in the pool) is never shut
                    shut(response)


_WATCHDOG = _Watchdog()


@contextmanager
def bounded(response: httpx.Response, deadline: float) -> Iterator[None]:
    """While the body of ``response`` is read, its socket is shut once ``time.monotonic()``
    passes ``deadline``."""
    number = _WATCHDOG.watch(response, deadline)
    try:
        yield
    finally:
        _WATCHDOG.unwatch(number)


class TooSlow(Exception):
    """The exchange did not end within its deadline."""


class TooLarge(Exception):
    """The body is bigger than the caller reads; ``response`` has its status and headers."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__("response too large")
        self.response = response


def post_json(
    url: str, *, body: Any, headers: dict[str, str], timeout: float, max_bytes: int
) -> tuple[httpx.Response, str]:
    """POST ``body`` as JSON and read the whole response within ``timeout`` seconds, at most
    ``max_bytes`` of it (content-decoded); returns the response and its text (decoded as httpx
    decodes ``.text``). Raises :class:`TooSlow`, :class:`TooLarge`, or httpx's errors."""
    deadline = time.monotonic() + timeout
    pieces: list[bytes] = []
    size = 0
    # The JSON as httpx writes it for ``json=``: compact, not ASCII-escaped, no NaN.
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        with (
            post(
                url,
                content=content.encode(),
                headers={"Content-Type": "application/json", **headers},
                timeout=timeout,
            ) as response,
            bounded(response, deadline),
        ):
            for piece in response.iter_bytes():
                size += len(piece)
                if size > max_bytes:
                    raise TooLarge(response)
                pieces.append(piece)
                if time.monotonic() > deadline:
                    raise TooSlow
    except httpx.TimeoutException:
        raise
    except httpx.HTTPError:
        if time.monotonic() >= deadline:  # the stream was cut at its deadline
            raise TooSlow from None
        raise
    return response, b"".join(pieces).decode(response.encoding or "utf-8", errors="replace")
