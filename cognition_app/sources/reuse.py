"""Reuse (docs/costs.md): an LLM call whose whole request equals a succeeded call already
recorded in the deployment is answered from that record, nothing sent.

The whole request is its **reuse key**: sha256 of the canonical JSON of the endpoint (the base
URL's value and the path) and the body exactly as it is sent (model, messages, tools,
response_format, params, seed). Every live LLM call records its key, whatever its world's
``reuse``; a call under ``reuse: "exact"`` looks the key up among succeeded calls whose verdict is
not a rejection (never a failed or rejected call), the oldest first. The endpoint's value and the
model are in the key, so nothing is ever reused across endpoints or models.

**Single flight.** An identical request already in flight is awaited, not sent twice: the call
that finds no record claims the key in Redis (``SET NX``, one claim per key over every worker
process) and sends; the claim is given back once its rows are written — succeeded or not. A call
that finds the key claimed waits (holding no admission slot and no budget), then looks again:
the record is there when the first succeeded; when the first failed there is none, and it claims
the key and sends its own. A claim is a **lease** (``CHUKWA_LIMIT_LEASE_SECONDS``, as the
concurrency slots'), renewed by one daemon thread of the process while its call is in flight: a
killed worker's claim runs out within a lease, and the identical requests waiting on it go on.

**Redis unavailable.** A recorded call is still reused (its record is in PostgreSQL). A call to
send waits for Redis to come back (a restart, a failover), looking for a record meanwhile, for
``CHUKWA_REDIS_WAIT_SECONDS``; then its try fails (``reuse_unavailable``): sent unclaimed, it
could be sent twice.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from chukwa_core.hashing import canonical_json_bytes
from cognition_app.failures import SourceFailure
from cognition_app.model_rows import columns, concrete_fields, instance, quoted, split
from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from cognition_app.sources.admission.leases import (
    LEASES,
    REDIS_RETRY_SECONDS,
    client,
    command,
    lease_ms,
    redis_key,
    redis_wait_seconds,
    script,
)
from cognition_app.sources.context import CallContext
from scenarios_app.sql_rows import fetch_tuples

EXACT, OFF = "exact", "off"
REUSE_MODES = (EXACT, OFF)
# how often a call waiting for an identical request in flight looks again
WAIT_POLL_SECONDS = 0.05

# Extends the claim only if it is still ours.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# Deletes the claim only if it is still ours (it may have expired and been taken since).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def reuse_key_of(endpoint: str, body: bytes) -> str:
    """The reuse key of a request ``body`` (its canonical bytes, as sent) to ``endpoint`` (the
    base URL's value and the path): sha256 of ``{"body": …, "endpoint": …}`` canonicalized
    (members sorted: "body" first)."""
    wrapped = b'{"body":%s,"endpoint":%s}' % (body, canonical_json_bytes(endpoint))
    return hashlib.sha256(wrapped).hexdigest()


_INVOCATION_FIELDS = concrete_fields(SourceInvocation)
_CALL_FIELDS = concrete_fields(LlmCall)
# The oldest succeeded, not rejected, live call with a reuse key, both its rows: one statement
# written once, not a queryset built and compiled on every LLM call (compiling the
# select_related query of both wide rows cost ~2-4 ms of CPU a call, twice per call sent), and
# the instances built from its columns as a queryset builds them. Identifiers from the models,
# quoted; the key is a parameter. Both verdict columns are NOT NULL, so ``<>`` is the
# queryset's ``exclude``.
# The plan must not depend on statistics: a young deployment's tables have none until
# autovacuum's first analyze, and its planner then guessed one row for ``status = 'succeeded'``
# on either table, reading every succeeded call (~1 ms a lookup at 450 calls, growing with the
# table). So the call is found by its invocation alone (``OFFSET 0``: its own subquery, the
# unique index the only one it can use), its status checked after; and the invocations'
# status index leaves out the succeeded ones (cognition_app 0018). Bound server-side
# (``scenarios_app.sql_rows.fetch_tuples``), so prepared on a connection that looks up often
# (planning it cost more than running it): ``reuse_key <> ''`` is written out because a
# generic plan, whose key is a parameter, can use the partial index only if the query itself
# implies its condition.
_RECORDED = f"""SELECT {columns("i", _INVOCATION_FIELDS)}, {columns("c", _CALL_FIELDS)}
FROM {quoted(SourceInvocation._meta.db_table)} i
CROSS JOIN LATERAL (
    SELECT * FROM {quoted(LlmCall._meta.db_table)} WHERE invocation_id = i.id OFFSET 0
) c
WHERE i.reuse_key = %s AND i.reuse_key <> ''
    AND i.status = '{InvocationStatus.SUCCEEDED.value}' AND i.failure_class = ''
    AND c.status = '{InvocationStatus.SUCCEEDED.value}'
    AND i.validation_status <> 'invalid' AND i.model_output_kind <> 'invalid'
ORDER BY i.started_at, i.id LIMIT 1"""  # noqa: S608


def recorded(key: str) -> SourceInvocation | None:
    """The oldest succeeded, not rejected, live call with this reuse key (with its LLM call)."""
    rows = fetch_tuples(_RECORDED, [key])
    if not rows:
        return None
    row = rows[0]
    invocation_values, call_values = split(row, _INVOCATION_FIELDS, _CALL_FIELDS)
    invocation = instance(SourceInvocation, _INVOCATION_FIELDS, invocation_values)
    invocation.llm_call = instance(LlmCall, _CALL_FIELDS, call_values)
    return invocation


@dataclass
class Flight:
    """A claim on a reuse key while its request is in flight; ``done`` gives it back (once,
    from whichever thread finishes the call's rows)."""

    name: str
    token: str
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: bool = True

    def done(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        LEASES.drop(self.token)
        try:
            script(client(), _RELEASE)(keys=[self.name], args=[self.token])
        except RedisError:
            pass  # it expires on its own; a waiter then sends (never a wrong reply)


def _renew_claim(name: str, token: str, pipe: Any, _now_ms: int, lease: int) -> object:
    # renewed only while this process's token still holds it
    return pipe.eval(_RENEW, 1, name, token, lease)


def _claim_name(key: str) -> str:
    return redis_key("reuse", key)


def reused_or_claimed(
    key: str, *, ctx: CallContext, what: str
) -> tuple[SourceInvocation | None, Flight | None]:
    """The recorded call that answers ``key``, or the claim under which to send it. While an
    identical request is in flight elsewhere, waits for it (cancellable). The claim is tried
    first and the record looked up after it, once: a call that finished before the claim was
    settled is found then, and a call to send costs one lookup, not two. With Redis
    unavailable a recorded call is still reused; one to send waits for Redis (told to
    ``ctx.on_wait``) and fails (``reuse_unavailable``) if it has not come back in time."""
    name, token = _claim_name(key), uuid.uuid4().hex
    down_since: float | None = None  # since when Redis has been found unavailable
    told = False  # the attempt was told that the call waits for Redis
    while True:
        try:
            claimed = command("SET", name, token, "NX", "PX", lease_ms())
        except RedisError as exc:
            found = recorded(key)
            now = time.monotonic()
            down_since = now if down_since is None else down_since
            if found is None and now - down_since >= redis_wait_seconds():
                _untell(ctx, told)
                raise SourceFailure(
                    "reuse_unavailable",
                    f"reuse: the single-flight claim of request {key[:12]} could not be taken "
                    f"in Redis (unavailable for {redis_wait_seconds():g} s: "
                    f"{type(exc).__name__}: {exc})",
                ) from None
            if found is not None:
                _untell(ctx, told)
                return found, None
            if not told and ctx.on_wait is not None:
                ctx.on_wait("Redis, to claim the request for reuse (unavailable)")
                told = True
            _pause(ctx, what, REDIS_RETRY_SECONDS)
            continue
        _untell(ctx, told)
        down_since, told = None, False
        if claimed:
            flight = Flight(name, token)
            LEASES.hold(token, partial(_renew_claim, name, token))
            try:
                found = recorded(key)
            except BaseException:
                flight.done()  # not left for the identical calls to wait out its lease
                raise
            if found is not None:
                flight.done()
                return found, None
            return None, flight
        found = recorded(key)
        if found is not None:
            return found, None
        _pause(ctx, what, WAIT_POLL_SECONDS)


def _untell(ctx: CallContext, told: bool) -> None:
    """The wait for Redis is over: the attempt no longer says it waits."""
    if told and ctx.on_wait is not None:
        ctx.on_wait("")


def _pause(ctx: CallContext, what: str, seconds: float) -> None:
    """Sleep ``seconds``, woken by a stop of the attempt (which then raises)."""
    if ctx.cancel is not None:
        ctx.cancel.wait(seconds)
    else:
        time.sleep(seconds)
    ctx.check_cancelled(what)
