"""The broker's Redis transport (chukwa_site/broker.py) keeps one Redis client per channel:
kombu's own made a new ``redis.Redis`` object for every message it published."""

from __future__ import annotations

import os
from typing import Any

import pytest
import redis

from chukwa_site.broker import Channel
from tests.support.worker import delete_queue


def test_messages_are_published_on_one_client_per_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    from chukwa_site.celery import app

    made: list[int] = []
    original = redis.Redis.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counted)
    queue = f"broker-{os.getpid()}"
    delete_queue(queue)
    try:
        app.send_task("chukwa.ping", queue=queue)  # the producer's connection and channel
        made.clear()
        for _ in range(20):
            app.send_task("chukwa.ping", queue=queue)
        assert made == []  # kombu's channel made one per message
        with app.connection_for_write() as conn:
            assert isinstance(conn.default_channel, Channel)
            assert conn.default_channel.client.llen(queue) == 21  # every message published
    finally:
        delete_queue(queue)
