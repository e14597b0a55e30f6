"""A task's database connections are handled as a request's (chukwa_site/celery.py): an old
connection is replaced at a task's start, and a task run eagerly leaves its caller's alone.
(That a worker keeps its connection between tasks: tests/worlds_app/test_worker_connections.py.)"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from chukwa_site.celery import _connections_as_for_a_request, ping


@pytest.mark.django_db(transaction=True)
def test_a_connection_older_than_conn_max_age_is_replaced_at_a_tasks_start() -> None:
    connection.ensure_connection()
    old = connection.connection
    connection.close_at = time.monotonic() - 1  # older than CONN_MAX_AGE

    _connections_as_for_a_request(sender=ping)  # as task_prerun sends it in a worker

    assert connection.connection is None  # closed; the task's first query opens a new one
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert connection.connection is not None and connection.connection is not old


@pytest.mark.django_db
def test_an_eager_task_leaves_its_callers_connection_alone() -> None:
    connection.ensure_connection()
    current = connection.connection
    connection.close_at = time.monotonic() - 1  # would be replaced at a worker's task

    assert ping.apply().get() == "pong"  # run here, inside the test's transaction

    assert connection.connection is current and not current.closed
    with connection.cursor() as cursor:  # the caller's transaction goes on
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
