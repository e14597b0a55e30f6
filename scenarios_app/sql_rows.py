"""Rows of a plain SQL read as dicts, for the few reads every API request runs.

Django's ORM spends 0.4 to 1 ms of CPU compiling each query (more for aggregates and
subqueries), several times what PostgreSQL and psycopg spend running it; the hottest reads (the
token lookup, world/turn/attempt details) are written once as SQL text instead, and PostgreSQL
keeps them prepared: planning them cost it more than running them. The values are what the ORM
would give: Django's psycopg setup already loads timestamps as aware UTC datetimes, UUIDs as
``uuid.UUID``, numerics as ``Decimal``; ``jsonb`` comes back as text, decoded here for the
columns named in ``json_columns`` to the value ``JSONField`` decodes (``json.loads``) by
``loads_strict`` (orjson wherever it reads the same as json, several times faster: json's
decoding was an eighth of a web process's busy time under 20 API clients); a computed ``json`` value
(``json_agg``) arrives decoded by psycopg, with ``loads_strict`` too (:func:`register_json_loader`,
on every connection Django opens).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from psycopg.rows import RowFactory, dict_row, tuple_row
from psycopg.types.json import JsonBinaryLoader, JsonLoader

from chukwa_core.json_values import loads_strict


class _StrictJsonLoader(JsonLoader):
    _loads = staticmethod(loads_strict)


class _StrictJsonBinaryLoader(JsonBinaryLoader):
    _loads = staticmethod(loads_strict)


def register_json_loader(conn: psycopg.Connection[Any]) -> None:
    """Values of type ``json`` on ``conn`` decoded by ``loads_strict`` (``jsonb`` untouched)."""
    conn.adapters.register_loader("json", _StrictJsonLoader)
    conn.adapters.register_loader("json", _StrictJsonBinaryLoader)


class _PreparedDebugWrapper(CursorDebugWrapper):
    """Django's debug wrapper, logging the statement's text as sent: Django reads the query
    back from psycopg's cursor, which keeps none for a statement it ran prepared (the query
    log and ``django.db.backends`` logged ``None`` for it)."""

    @contextmanager
    def debug_sql(
        self,
        sql: str | None = None,
        params: Any = None,
        use_last_executed_query: bool = False,
        many: bool = False,
    ) -> Iterator[None]:
        with super().debug_sql(sql, params, use_last_executed_query=False, many=many):
            yield


def prepared_cursor(row_factory: RowFactory[Any] = dict_row) -> CursorWrapper:
    """Django's cursor wrapper (its query log, execute wrappers and error translation, as for
    any query) around a psycopg cursor that binds parameters server-side. Django's own cursors
    bind client-side, which PostgreSQL cannot prepare; with this one, psycopg prepares a
    statement on a connection once it ran ``prepare_threshold`` times there (settings), and
    forgets it on a rollback or a new connection. Dict rows (the default) read the column names
    straight from the result, where the DB-API ``description`` builds a typed object per column;
    ``cognition_app.rows.send_one`` takes tuples."""
    _ready()
    with connection.wrap_database_errors:
        raw = psycopg.Cursor(connection.connection, row_factory=row_factory)
    # what connection.make_debug_cursor / make_cursor wrap Django's own cursors in
    if connection.queries_logged:
        return _PreparedDebugWrapper(raw, connection)
    return CursorWrapper(raw, connection)


def fetch_dicts(
    sql: str, params: Sequence[Any], *, json_columns: Collection[str] = ()
) -> list[dict[str, Any]]:
    """Every row of ``sql`` as a dict keyed by the result's column names."""
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[dict[str, Any]] = cursor.fetchall()
    for name in json_columns:
        for row in rows:
            if row[name] is not None:
                row[name] = loads_strict(row[name])
    return rows


def fetch_dict(
    sql: str, params: Sequence[Any], *, json_columns: Collection[str] = ()
) -> dict[str, Any] | None:
    """The first row of ``sql`` as a dict, or None when there is none."""
    rows = fetch_dicts(sql, params, json_columns=json_columns)
    return rows[0] if rows else None


def fetch_tuples(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` as a tuple, in the result's column order (bound server-side, so
    prepared on a connection that runs it often, as every read here); [] for a statement that
    returns no rows (a write without ``RETURNING``)."""
    if not plain_connection_ready():
        with prepared_cursor(tuple_row) as wrapped:
            wrapped.execute(sql, params)
            return _tuples(wrapped.cursor)
    connection.validate_no_broken_transaction()
    with (
        connection.wrap_database_errors,
        psycopg.Cursor(connection.connection, row_factory=tuple_row) as cursor,
    ):
        cursor.execute(sql, params)
        return _tuples(cursor)


def _tuples(cursor: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    # what ``description`` looks at, without the column objects it builds on each read
    result = cursor.pgresult
    if result is None or result.status != psycopg.pq.ExecStatus.TUPLES_OK:
        return []
    rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def plain_connection_ready() -> bool:
    """Whether nothing needs Django's cursor wrapper (no query log: DEBUG, a test capturing the
    queries; no execute wrapper installed), and then the connection made ready as Django
    readies it for a cursor (its health checked, opened, this thread's). The wrapper's own
    work cost about as much CPU as psycopg's running of a one-row statement (~50 µs, several
    times on every LLM call); False, nothing done, when it is needed."""
    if connection.queries_logged or connection.execute_wrappers:
        return False
    _ready()
    return True


def _ready() -> None:
    """The connection readied as Django readies it for a cursor: its health checked, opened,
    this thread's."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
