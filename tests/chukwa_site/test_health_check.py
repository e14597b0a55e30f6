"""The kept connection's health check (``chukwa_site.postgresql``): no ``SELECT 1`` round trip
while the server has said nothing on the connection; the real check, and a new connection, once
the server has ended it. (A worker recovering from a terminated backend between tasks, through
real Celery workers: tests/worlds_app/test_worker_connections.py.)"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from django.db.backends.postgresql.base import DatabaseWrapper as DjangosWrapper

from chukwa_site.postgresql.base import DatabaseWrapper

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every real health check (``SELECT 1``) run, by backend pid."""
    run: list[int] = []
    is_usable = DjangosWrapper.is_usable

    def counting(self: Any) -> bool:
        run.append(self.connection.info.backend_pid)
        return bool(is_usable(self))

    monkeypatch.setattr(DjangosWrapper, "is_usable", counting)
    return run


def _pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_the_engine_is_ours_and_checks_health() -> None:
    assert isinstance(connections["default"], DatabaseWrapper)
    assert connection.health_check_enabled


def test_a_connection_the_server_said_nothing_on_is_kept_without_a_round_trip(
    probes: list[int],
) -> None:
    first = _pid()
    for _ in range(3):
        connection.close_if_unusable_or_obsolete()  # as after a request or a task
        assert _pid() == first
    assert probes == []


def test_a_connection_the_server_ended_is_checked_and_replaced(probes: list[int]) -> None:
    ended = _pid()
    with psycopg.connect(
        **{k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [ended])
    connection.close_if_unusable_or_obsolete()
    assert _pid() != ended  # a new backend, the query never failed
    assert probes == [ended]  # the real check ran, once, and found it gone
