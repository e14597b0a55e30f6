"""A task's database connections are handled as a request's (chukwa_site/celery.py): an old
connection is replaced at a task's start, and a task run eagerly leaves its caller's alone.
(That a worker keeps its connection between tasks: tests/worlds_app/test_worker_connections.py.)"""

from __future__ import annotations

import copy
import time

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper

from chukwa_site.celery import (
    GENERIC_PLANS,
    _connections_as_for_a_request,
    ping,
    worker_database_options,
)


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


@pytest.mark.django_db
def test_a_workers_connection_prepares_at_the_first_run_and_plans_once() -> None:
    settings_dict = copy.deepcopy(connection.settings_dict)
    worker_database_options(settings_dict["OPTIONS"])  # what worker_init does to the settings
    worker = DatabaseWrapper(settings_dict, "default")
    try:
        worker.ensure_connection()
        raw = worker.connection
        assert raw.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
        psycopg.Cursor(raw).execute("SELECT %s::int", [7])  # bound server-side, run once
        assert raw.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (1,)
    finally:
        worker.close()
    # the web process's own connection is untouched
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone() == ("auto",)


def test_with_prepared_statements_off_a_workers_options_are_left_alone() -> None:
    options: dict[str, object] = {"prepare_threshold": None, "options": "-c search_path=x"}
    worker_database_options(options)
    assert options == {"prepare_threshold": None, "options": "-c search_path=x"}
    kept = {"prepare_threshold": 5, "options": "-c search_path=x"}
    worker_database_options(kept)
    worker_database_options(kept)  # once, however often
    assert kept == {"prepare_threshold": 0, "options": f"-c search_path=x {GENERIC_PLANS}"}
