"""An LLM endpoint's concurrency across the whole deployment: at most ``<P>_MAX_CONCURRENCY``
generations in flight at once to the endpoint ``<P>_BASE_URL`` names, over every worker process,
each holding a PostgreSQL session advisory lock.

A backend that generates one reply at a time (the embedded model) queues the requests it is sent
meanwhile, and a queued request's wait would count against its caller's ``timeout_ms``: with two
worker processes sharing it, single generations timed out on their own stack. Bounded here, a
call waits for a slot before it reserves budget, opens its rows or starts its deadline, so its
``timeout_ms`` covers its own generation only. The variable is the deployment's, not the
source's (authored content is the same in every deployment): the local stack sets it to 1 when it
serves the embedded model. A slot is its connection's: a worker that dies gives it back.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from chukwa_core.ids import bound_concurrency_env_name
from chukwa_core.source_validation import MAX_SOURCE_CONCURRENCY
from cognition_app.failures import SourceFailure
from cognition_app.sources.cancel import CancelScope

# How often a call waiting for a slot tries again (and looks at its attempt's cancel flag).
WAIT_STEP_SECONDS = 0.1


def endpoint_limit(url_env: str) -> int | None:
    """The deployment's bound on the endpoint ``url_env`` names; None when it sets none."""
    name = bound_concurrency_env_name(url_env)
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_SOURCE_CONCURRENCY:
        raise SourceFailure(
            "config",
            f"environment variable {name} (the bound on {url_env}'s endpoint) must be an "
            f"integer 1…{MAX_SOURCE_CONCURRENCY}",
        )
    return int(raw)


@contextmanager
def endpoint_slot(url_env: str, cancel: CancelScope | None, what: str) -> Iterator[None]:
    """Hold one of the endpoint's slots while the call runs (no bound: no wait)."""
    limit = endpoint_limit(url_env)
    if limit is None:
        yield
        return
    # The two-key form of the locks: the first names the endpoint's variable, the second the
    # slot (the single-key locks elsewhere hash names into a different key space).
    space = zlib.crc32(f"chukwa endpoint slots {url_env}".encode()) - 2**31
    slot = _acquire(space, limit, cancel, what)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [space, slot])


def _acquire(space: int, limit: int, cancel: CancelScope | None, what: str) -> int:
    with connection.cursor() as cursor:
        while True:
            for slot in range(limit):
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [space, slot])
                if cursor.fetchone()[0]:
                    return slot
            if cancel is None:
                time.sleep(WAIT_STEP_SECONDS)
            elif cancel.wait(WAIT_STEP_SECONDS):
                cancel.check(what)
