"""An LLM source's ``max_concurrency``: at most that many of its generations in flight
at once, per worker process (a provider's rate limit is usually per key; a deployment running
W worker processes lets through at most W times max_concurrency).

One semaphore per source hash: a source's content, hence its limit, never changes under its hash.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cognition_app.sources.cancel import CancelScope

_lock = threading.Lock()
_slots: dict[str, threading.BoundedSemaphore] = {}
# How often a call waiting for a slot looks at its attempt's cancel flag.
WAIT_STEP_SECONDS = 0.05


@contextmanager
def source_slot(
    source_hash: str, limit: int | None, cancel: CancelScope | None, what: str
) -> Iterator[None]:
    """Hold one of the source's slots while the call runs (no limit: no wait)."""
    if limit is None:
        yield
        return
    with _lock:
        slot = _slots.get(source_hash)
        if slot is None:
            slot = _slots[source_hash] = threading.BoundedSemaphore(limit)
    while not slot.acquire(timeout=WAIT_STEP_SECONDS):
        if cancel is not None:
            cancel.check(what)
    try:
        yield
    finally:
        slot.release()
