"""Writing many rows at once, built as tuples: the hot path's inserts (chunks, transitions,
events), without model instances and without Django's ``bulk_create``.

Why not ``bulk_create``: on PostgreSQL, Django 5.2 inserts literal rows through
``INSERT … SELECT * FROM UNNEST(%s::jsonb[], …)``, so psycopg dumps each column as an *array*
literal, and a jsonb or text array literal escapes every ``"`` and ``\\`` of every value through
a regular expression — most of a big commit's time (profiled: 4.65 s of a 6 s commit at 500
agents). :func:`insert_rows` sends many rows with ``COPY`` (formatted in C, JSON dumped once
per value); :meth:`RowTable.statements` gives a plain multi-row ``INSERT … VALUES`` for a few
rows sent with other statements in one round trip (``sources.tracing.trace_batch``).

Errors are Django's (``django.db.DataError``, ``IntegrityError``…), as with the ORM, so callers
catch ``DatabaseError`` as before. Runs on Django's connection, inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, models
from psycopg.types.json import Jsonb

# PostgreSQL's protocol allows 65,535 parameters per statement.
MAX_PARAMS = 65_535

# One SQL statement and its parameters.
Statement = tuple[str, list[Any]]


def _dumps(value: Any) -> str:
    # What Django's JSONField sends (json.dumps, no custom encoder): same text, same errors.
    return json.dumps(value)


@dataclass(frozen=True)
class RowTable:
    """A table and the columns a caller's tuples fill, in order (``RowTable.of(Model, fields)``)."""

    table: str
    columns: tuple[str, ...]
    json_indexes: frozenset[int]
    types: tuple[str, ...]  # each column's type, for the casts of :meth:`guarded_statement`

    @classmethod
    def of(cls, model: type[models.Model], fields: Sequence[str]) -> RowTable:
        meta = model._meta
        columns: list[str] = []
        types: list[str] = []
        json_indexes: set[int] = set()
        for index, name in enumerate(fields):
            field = meta.get_field(name)
            if not isinstance(field, models.Field) or field.column is None:
                raise TypeError(f"{meta.label}.{name} is not a concrete column")
            columns.append(field.column)
            types.append(str(field.cast_db_type(connection)))
            if isinstance(field, models.JSONField):
                json_indexes.add(index)
        return cls(meta.db_table, tuple(columns), frozenset(json_indexes), tuple(types))

    def _sql(self, count: int) -> str:
        group = "(" + ", ".join(["%s"] * len(self.columns)) + ")"
        names = ", ".join(connection.ops.quote_name(c) for c in self.columns)
        values = ", ".join([group] * count)
        # Identifiers from the model's metadata, quoted; every value is a parameter.
        table = connection.ops.quote_name(self.table)
        return f"INSERT INTO {table} ({names}) VALUES {values}"  # noqa: S608

    def _params(self, rows: Sequence[tuple[Any, ...]]) -> list[Any]:
        width = len(self.columns)
        params: list[Any] = []
        for row in rows:
            if len(row) != width:
                raise ValueError(f"{self.table}: a row of {len(row)} values for {width} columns")
            if self.json_indexes:
                params.extend(
                    Jsonb(value, dumps=_dumps)
                    if index in self.json_indexes and value is not None
                    else value
                    for index, value in enumerate(row)
                )
            else:
                params.extend(row)
        return params

    def guarded_statement(
        self, rows: Sequence[tuple[Any, ...]], condition: Statement
    ) -> Statement | None:
        """One INSERT of the rows that inserts none of them unless ``condition`` (an SQL boolean
        expression and its parameters) holds when it runs; None when the rows need more
        parameters than one statement carries."""
        condition_sql, condition_params = condition
        if not rows or len(rows) * len(self.columns) + len(condition_params) > MAX_PARAMS:
            return None
        # Each value cast to its column's type: rows selected from VALUES are not typed by the
        # target table as the rows of INSERT … VALUES are.
        group = "(" + ", ".join(f"%s::{t}" for t in self.types) + ")"
        names = ", ".join(connection.ops.quote_name(c) for c in self.columns)
        values = ", ".join([group] * len(rows))
        table = connection.ops.quote_name(self.table)
        # Identifiers and types from the model's metadata; every value is a parameter.
        sql = (
            f"INSERT INTO {table} ({names}) SELECT * FROM (VALUES {values}) AS v "  # noqa: S608
            f"WHERE {condition_sql}"
        )
        return sql, [*self._params(rows), *condition_params]

    def statements(self, rows: Sequence[tuple[Any, ...]]) -> Iterable[Statement]:
        """(SQL, parameters) for the rows, as few statements as the parameter limit allows."""
        per_statement = max(1, MAX_PARAMS // len(self.columns))
        for start in range(0, len(rows), per_statement):
            part = rows[start : start + per_statement]
            yield self._sql(len(part)), self._params(part)


def insert_rows(table: RowTable, rows: Sequence[tuple[Any, ...]]) -> int:
    """Insert the rows (tuples in ``table.columns`` order) on Django's connection with one
    ``COPY … FROM STDIN``, in the caller's transaction if there is one: psycopg formats the
    rows in C (Django's default cursor binds parameters client-side, quoting every value of a
    multi-row INSERT through a regular expression). Returns the number of rows."""
    if not rows:
        return 0
    names = ", ".join(_quote(c) for c in table.columns)
    sql = f"COPY {_quote(table.table)} ({names}) FROM STDIN"
    width = len(table.columns)
    json_indexes = table.json_indexes
    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.cursor.copy(sql) as copy:
            for row in rows:
                if len(row) != width:
                    raise ValueError(
                        f"{table.table}: a row of {len(row)} values for {width} columns"
                    )
                if json_indexes:
                    row = tuple(
                        _dumps(value) if index in json_indexes and value is not None else value
                        for index, value in enumerate(row)
                    )
                copy.write_row(row)
    return len(rows)


def _quote(name: str | None) -> str:
    if name is None:
        raise TypeError("not a concrete column")
    return str(connection.ops.quote_name(name))


def insert_statement(obj: models.Model) -> Statement:
    """The INSERT of one model instance (every concrete field, prepared as ``save`` prepares
    it), to be sent with others in one round trip."""
    meta = obj._meta
    fields = [f for f in meta.concrete_fields if f.column is not None]
    names = ", ".join(_quote(f.column) for f in fields)
    params = [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]
    groups = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {_quote(meta.db_table)} ({names}) VALUES ({groups})", params  # noqa: S608


def update_statement(model: type[models.Model], pk: Any, values: dict[str, Any]) -> Statement:
    """``UPDATE … SET <values> WHERE pk = %s``, values prepared as ``QuerySet.update``
    prepares them."""
    meta = model._meta
    sets: list[str] = []
    params: list[Any] = []
    for name, value in values.items():
        field = meta.get_field(name)
        if not isinstance(field, models.Field) or field.column is None:
            raise TypeError(f"{meta.label}.{name} is not a concrete column")
        if isinstance(value, models.Model):
            value = value.pk
        sets.append(f"{_quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    pk_field = meta.pk
    assert pk_field is not None
    params.append(pk_field.get_db_prep_save(pk, connection))
    table, key = _quote(meta.db_table), _quote(pk_field.column)
    return f"UPDATE {table} SET {', '.join(sets)} WHERE {key} = %s", params  # noqa: S608


def delete_statement(model: type[models.Model], field: str, value: Any) -> Statement:
    """``DELETE FROM … WHERE <field> = %s``."""
    meta = model._meta
    column = meta.get_field(field)
    if not isinstance(column, models.Field) or column.column is None:
        raise TypeError(f"{meta.label}.{field} is not a concrete column")
    sql = f"DELETE FROM {_quote(meta.db_table)} WHERE {_quote(column.column)} = %s"  # noqa: S608
    return sql, [column.get_db_prep_save(value, connection)]
