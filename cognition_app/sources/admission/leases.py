"""Leases this process holds in Redis (the broker's server), renewed while held by one daemon
thread per process: the cluster limits' concurrency slots (``cluster``) and reuse's
single-flight claims (``cognition_app.sources.reuse``). A process that dies stops renewing, so
what it held runs out within ``CHUKWA_LIMIT_LEASE_SECONDS`` (15 s): a killed worker leaks
nothing. Every lease is scored on Redis's own clock (``redis_now_ms``), never a worker's."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

logger = logging.getLogger(__name__)

# how one lease is renewed: given a pipeline, Redis's time now and the lease, in milliseconds
Renew = Callable[[Any, int, int], object]

_client_lock = threading.Lock()
_client: Any = None


def client() -> Any:
    """The Redis client (the broker's server), made once per process."""
    global _client
    with _client_lock:
        if _client is None:
            import redis

            # kombu spells a socket redis+socket://, redis-py unix://
            url = settings.REDIS_URL.replace("redis+socket://", "unix://")
            _client = redis.Redis.from_url(url, socket_timeout=10)
        return _client


def redis_key(*parts: str) -> str:
    """A key of this deployment's (its database's name): stacks sharing a Redis never mix."""
    return ":".join(("chukwa", settings.DATABASES["default"]["NAME"], *parts))


# This thread's own connection to the client's server, and the process that made it.
_own = threading.local()


def _own_connection() -> Any:
    made_by = client()
    conn = getattr(_own, "conn", None)
    # a forked child never uses its parent's; a new client (a test's) gets a new one
    if conn is None or _own.pid != os.getpid() or _own.client is not made_by:
        conn = made_by.connection_pool.make_connection()
        _own.conn, _own.pid, _own.client = conn, os.getpid(), made_by
    return conn


def commands(*commands: tuple[Any, ...]) -> list[Any]:
    """Commands sent together (one round trip) and their replies as Redis gave them (no
    response callback: ``SET`` answers ``b"OK"``, not True), on this thread's own connection to
    the client's server: not through the client's command layer and its pool, whose taking and
    giving back of a connection cost most of a command's CPU (~80 µs a command against ~25 µs,
    measured; several commands run on every LLM call and turn). A connection found broken
    (Redis restarted since) is dropped and the commands sent once more on a new one, as the
    client's own retry would; a second failure, or a timeout, propagates (a ``RedisError``, as
    the client's would), and so does an error reply, once every reply is read."""
    conn = _own_connection()
    for last in (False, True):
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            replies = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:  # a whole error reply: the next one follows
                    replies.append(exc)
        except (RedisConnectionError, OSError) as exc:
            conn.disconnect()
            if not last:
                continue
            if isinstance(exc, RedisError):
                raise
            raise RedisConnectionError(str(exc)) from exc
        except BaseException:
            conn.disconnect()  # a reply may be left half read
            raise
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies
    raise AssertionError("unreachable")


def command(*args: Any) -> Any:
    """One command by :func:`commands`; its reply."""
    return commands(args)[0]


class _Script:
    """A Lua script run as ``EVALSHA`` by :func:`command` (on the process's client; any other
    client runs it through redis-py); when Redis has lost it (a restart, ``SCRIPT FLUSH``), by
    redis-py's ``Script``, which loads it again."""

    def __init__(self, on: Any, text: str) -> None:
        self.on = on
        self.script = on.register_script(text)  # hashes the text once

    def __call__(self, *, keys: list[Any], args: list[Any]) -> Any:
        if self.on is not client():
            return self.script(keys=keys, args=args)
        try:
            return command("EVALSHA", self.script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.script(keys=keys, args=args)


@functools.cache
def script(on: Any, text: str) -> _Script:
    """``text`` as a script of client ``on``, made once per process (:class:`_Script`)."""
    return _Script(on, text)


def lease_seconds() -> float:
    return float(settings.CHUKWA_LIMIT_LEASE_SECONDS)


def lease_ms() -> int:
    """A lease, in milliseconds (at least a second)."""
    return max(int(lease_seconds() * 1000), 1000)


# How often a call waiting for Redis to come back tries again.
REDIS_RETRY_SECONDS = 0.5


def redis_wait_seconds() -> float:
    """How long a call waits for Redis to come back before its try fails
    (``CHUKWA_REDIS_WAIT_SECONDS``; 0: at once)."""
    return float(settings.CHUKWA_REDIS_WAIT_SECONDS)


def redis_now_ms() -> int:
    """Redis's clock (the one every lease and window is scored on), in milliseconds."""
    seconds, micros = client().time()
    return int(seconds) * 1000 + int(micros) // 1000


class Leases:
    """What this process holds, by token, each with how to renew it; renewed every third of a
    lease, in one pipeline, by one daemon thread started on the first hold."""

    def __init__(self) -> None:
        self._held: dict[str, Renew] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, token: str, renew: Renew) -> None:
        with self._lock:
            self._held[token] = renew
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="chukwa-leases", daemon=True
                )
                self._thread.start()

    def drop(self, token: str) -> None:
        with self._lock:
            self._held.pop(token, None)

    def renew_now(self) -> None:
        """One round: every lease held, renewed from Redis's time now."""
        with self._lock:
            held = list(self._held.values())
        if not held:
            return
        try:
            pipe = client().pipeline(transaction=False)
            now = redis_now_ms()
            for renew in held:
                renew(pipe, now, lease_ms())
            pipe.execute()
        except (RedisError, OSError) as exc:  # the leases run out: what they held comes back
            logger.warning("leases not renewed, Redis unavailable (%s)", exc)

    def _loop(self) -> None:
        while True:
            time.sleep(lease_ms() / 3000)
            self.renew_now()


LEASES = Leases()
