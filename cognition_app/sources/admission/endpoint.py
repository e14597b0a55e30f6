"""An LLM endpoint's concurrency across the whole deployment: at most ``<P>_MAX_CONCURRENCY``
requests in flight at once to the endpoint ``<P>_BASE_URL`` names, over every worker process,
each holding a PostgreSQL session advisory lock.

A backend that generates one reply at a time (the embedded model) queues the requests it is sent
meanwhile, and a queued request's wait would count against its caller's ``timeout_ms``: with two
worker processes sharing it, single generations timed out on their own stack. Bounded here, a
request waits for a slot before it reserves budget, is sent or starts its deadline, so its
``timeout_ms`` covers its own generation only. The variable is the deployment's, not the
source's (authored content is the same in every deployment): the local stack sets it to 1 when it
serves the embedded model. A slot is its connection's: a worker that dies gives it back. Its
waits are recorded as the ``endpoint_concurrency`` limit's. An interactive turn's call waiting
for a slot is served before experiments' and judges' calls (``priority``), and each slot's
holder is named in Redis so that a waiting call can say who holds them.
"""

from __future__ import annotations

import os
import zlib
from functools import partial
from typing import Any

from django.db import connection
from redis.exceptions import RedisError

from chukwa_core.ids import bound_concurrency_env_name
from chukwa_core.source_validation import MAX_SOURCE_CONCURRENCY
from cognition_app.failures import SourceFailure
from cognition_app.sources.admission.base import CallRequest, Held, Refused, Wait
from cognition_app.sources.admission.cluster import client as redis_client
from cognition_app.sources.admission.leases import redis_key
from cognition_app.sources.admission.priority import INTERACTIVE_FIRST, held_by, lane_gate


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


class EndpointConcurrency:
    name = "endpoint_concurrency"

    def take(self, request: CallRequest) -> Held | Wait | Refused:
        url_env = request.interface["base_url_env"]
        try:
            limit = endpoint_limit(url_env)
        except SourceFailure as exc:
            return Refused(exc)
        if limit is None:
            return Held()
        # The two-key form of the locks: the first names the endpoint's variable, the second the
        # slot (the single-key locks elsewhere hash names into a different key space).
        space = zlib.crc32(f"chukwa endpoint slots {url_env}".encode()) - 2**31
        redis = redis_client()
        waiting_key = redis_key("endpoint", url_env, "interactive")
        interactive = request.interactive
        if not interactive and lane_gate(redis, waiting_key, request.token, False, False):
            return Wait(self.name, reason=f"the endpoint's slot: {INTERACTIVE_FIRST}")
        with connection.cursor() as cursor:
            for slot in range(limit):
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [space, slot])
                if cursor.fetchone()[0]:
                    if interactive:
                        lane_gate(redis, waiting_key, request.token, True, False)
                    _name_holder(redis, url_env, slot, request.who)
                    return Held(give_back=partial(_unlock, space, slot))
        if interactive:
            lane_gate(redis, waiting_key, request.token, True, True)
        return Wait(self.name, reason=f"the endpoint's {limit} slot(s): {_holders(redis, url_env)}")


def _name_holder(redis: Any, url_env: str, slot: int, who: str) -> None:
    try:
        redis.hset(redis_key("endpoint", url_env, "holders"), str(slot), who)
    except (RedisError, OSError):  # only the waiting calls' words lose the name
        pass


def _holders(redis: Any, url_env: str) -> str:
    try:
        names = redis.hvals(redis_key("endpoint", url_env, "holders"))
    except (RedisError, OSError):
        names = []
    return held_by([n.decode() if isinstance(n, bytes) else str(n) for n in names])


def _unlock(space: int, slot: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [space, slot])


LIMIT = EndpointConcurrency()
