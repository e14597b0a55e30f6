"""Plain SQL reads and batches without Django's cursor wrapper (``scenarios_app.sql_rows``,
``cognition_app.rows.send_pipelined``) when nothing needs it: the same rows, prepared
server-side, Django's errors; with a query log or an execute wrapper, through the wrapper, so
both see every statement."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from cognition_app.rows import send_pipelined
from scenarios_app.sql_rows import fetch_tuples

pytestmark = pytest.mark.django_db

SQL = "SELECT %s::int + 1 AS n, 'sql-rows-test' AS tag"


def test_without_a_query_log_the_rows_come_plain_and_the_statement_is_prepared() -> None:
    assert not connection.queries_logged
    for n in range(6):  # past prepare_threshold (5)
        assert fetch_tuples(SQL, [n]) == [(n + 1, "sql-rows-test")]
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("sql-rows-test" in statement for statement in prepared)
    assert fetch_tuples("SELECT 1 WHERE false", []) == []


def test_a_database_error_is_djangos_and_the_transaction_goes_on() -> None:
    with pytest.raises(DataError), transaction.atomic():
        fetch_tuples("SELECT 1 / %s::int", [0])
    with pytest.raises(DataError), transaction.atomic():
        send_pipelined([("SELECT 1", []), ("SELECT 1 / %s::int", [0])])
    assert fetch_tuples(SQL, [1]) == [(2, "sql-rows-test")]


def test_a_query_log_and_an_execute_wrapper_see_every_statement() -> None:
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        assert fetch_tuples(SQL, [2]) == [(3, "sql-rows-test")]
        assert send_pipelined([(SQL, [3]), (SQL, [4])]) == [
            [(4, "sql-rows-test")],
            [(5, "sql-rows-test")],
        ]
    assert seen == [SQL, f"{SQL}; {SQL}"]
    with CaptureQueriesContext(connection) as queries:
        fetch_tuples(SQL, [5])
    assert [q["sql"] for q in queries.captured_queries] == [SQL]
