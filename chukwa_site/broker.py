"""The Redis transport of Celery's broker, with one synchronous Redis client per channel.

kombu's Redis channel builds a new ``redis.Redis`` client object for every synchronous
command it sends (``Channel.conn_or_acquire`` calls ``_create_client`` each time: every
publish, queue size, purge): with redis-py 8 that is ~0.1-0.2 ms of CPU per message on a quiet
machine and several times that on a loaded one, paid by every turn's kick and measure
message. The client object is only a front for the channel's connection pool (the connections
are pooled, not the client), and a redis-py client is safe to share between threads, so this
channel keeps the one it made. Checked against kombu 5.7.0: ``_create_client(asynchronous=
False)`` is used only through ``conn_or_acquire`` and the channel's ``client`` property uses
the asynchronous pool, which is left as it is.

Installed for the ``redis``/``rediss`` URL schemes by :func:`install` (chukwa_site.celery),
before the Celery app opens a connection."""

from __future__ import annotations

from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        if self._sync_client is None:
            self._sync_client = super()._create_client()
        return self._sync_client

    def close(self) -> None:
        self._sync_client = None
        super().close()


class Transport(kombu_redis.Transport):
    Channel = Channel


def install() -> None:
    """Make kombu resolve the Redis URL schemes to this transport."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
