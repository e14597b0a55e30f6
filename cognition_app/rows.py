"""Writing many rows at once, built as tuples: the hot path's inserts (chunks, transitions,
events), without model instances and without Django's ``bulk_create``.

Why not ``bulk_create``: on PostgreSQL, Django 5.2 inserts literal rows through
``INSERT … SELECT * FROM UNNEST(%s::jsonb[], …)``, so psycopg dumps each column as an *array*
literal, and a jsonb or text array literal escapes every ``"`` and ``\\`` of every value through
a regular expression — most of a big commit's time (profiled: 4.65 s of a 6 s commit at 500
agents). :func:`insert_rows` sends many rows with ``COPY`` (formatted in C, JSON dumped once
per value); :meth:`RowTable.statements` gives one ``INSERT … SELECT … FROM
jsonb_populate_recordset(…)`` whose rows are a single JSON parameter, to be sent with other
statements in one round trip (``cognition_app.recording.trace_batch``). So do :func:`insert_statement`
and :func:`update_statement`: with Django's client-side binding, psycopg parses a statement of
more than 50 parameters anew each time and quotes each value in Python (profiled: 1.3 ms of a
generation's 2.4 ms finishing batch of 235 parameters); one JSON text is dumped in C, quoted
once, and the statement's text is the same each time.

Errors are Django's (``django.db.DataError``, ``IntegrityError``…), as with the ORM, so callers
catch ``DatabaseError`` as before. Runs on Django's connection, inside the caller's transaction.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from itertools import chain
from typing import Any, cast
from uuid import UUID

import orjson
import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.backends.utils import CursorDebugWrapper
from psycopg.types.json import Jsonb

from scenarios_app.sql_rows import fetch_tuples, plain_connection_ready

# One SQL statement and its parameters.
Statement = tuple[str, list[Any]]

# Per statement of a batch: the rows it returned, or None when it returns none.
BatchResults = list[list[tuple[Any, ...]] | None]

# Pipelines carry batches up to this size (SQL and text parameters): psycopg 3.3 can stop
# sending a big pipeline part-way, each side then waiting for the other (seen here with a 3 MB
# parameter, not with 200 kB; psycopg#685 was of the same kind). Below the socket's buffer a
# batch goes out whole at once; :func:`send_batch` sends bigger ones another way.
PIPELINE_MAX_BYTES = 32_768


def _dumps(value: Any) -> str:
    # What Django's JSONField sends (json.dumps, no custom encoder): same text, same errors.
    return json.dumps(value)


def _dumps_scalars(rows: Sequence[Sequence[Any]]) -> str:
    """:func:`_dumps` of rows holding only what :func:`_plain` leaves of a non-JSON column
    (text, whole numbers, booleans, floats, None), by orjson (50 chunk rows: about 40% of
    ``json.dumps``'s time). PostgreSQL reads the same values from either text (orjson writes
    non-ASCII characters as they are, ``json`` escapes them); what orjson refuses (a lone
    surrogate, an integer beyond 64 bits) goes to :func:`_dumps`, and so do rows holding NaN or
    an infinity, which orjson would write as null where ``json`` writes a token PostgreSQL
    refuses."""
    values = list(chain.from_iterable(rows))
    if float in set(map(type, values)) and not all(
        math.isfinite(v) for v in values if type(v) is float
    ):
        return _dumps(rows)
    return _orjson_else_json(rows)


def _dumps_record(record: dict[str, Any], json_values: Iterable[Any]) -> str:
    """:func:`_dumps` of one row's record (its scalars as :func:`_plain` leaves them), by
    orjson (a 5 kB LLM call row: 6 µs against 57) when each of ``json_values`` (the values of
    its JSON columns the caller has not vouched for) is :func:`_flat_json`: then orjson writes
    what ``json`` would mean, and what it refuses (a lone surrogate, an integer beyond 64 bits,
    a key that is not a string) goes to :func:`_dumps`, as does any other value — orjson would
    write NaN as null where ``json`` writes a token PostgreSQL refuses, and would write a UUID
    or a datetime nested in a JSON value that ``json`` refuses."""
    return _orjson_else_json(record) if all(map(_flat_json, json_values)) else _dumps(record)


def _dumps_rows(rows: Sequence[Sequence[Any]], json_indexes: frozenset[int]) -> str:
    """:func:`_dumps` of rows of a table with JSON columns (events: their payloads), by orjson
    when every value in a JSON column is :func:`_flat_json` and every other value is a flat
    scalar (a float only if finite): then orjson writes what ``json`` would mean. Any other row
    set goes to :func:`_dumps` whole (a nested payload, NaN, a value no column converted)."""
    for row in rows:
        for index, value in enumerate(row):
            if not (_flat_json(value) if index in json_indexes else _flat_scalar(value)):
                return _dumps(rows)
    return _orjson_else_json(rows)


def _orjson_else_json(value: Any) -> str:
    """orjson's text of a value it writes as ``json`` would mean it; :func:`_dumps`'s where
    orjson refuses it (a lone surrogate, an integer beyond 64 bits, a key that is no string)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _dumps(value)


_FLAT_SCALARS = frozenset({str, int, bool, type(None)})


def _flat_scalar(value: Any) -> bool:
    """A JSON scalar orjson writes as ``json`` means it: text, a whole number, a boolean, None,
    or a finite float."""
    kind = type(value)
    return kind in _FLAT_SCALARS or (kind is float and math.isfinite(value))


def _flat_json(value: Any) -> bool:
    """A :func:`_flat_scalar`, or a list or a dict (string keys) of them."""
    kind = type(value)
    if kind is dict:
        if not all(type(key) is str for key in value):
            return False
        value = value.values()
    elif kind is not list:
        return _flat_scalar(value)
    return all(map(_flat_scalar, value))


def _plain(value: Any) -> Any:
    """A column's value, as prepared for the database, as a JSON value for
    ``jsonb_populate_record(set)``: PostgreSQL hands each value's text to the column type's
    input function, as it would a parameter's. A JSON column's value (``Jsonb``, from a
    JSONField's ``get_db_prep_save``) is nested as is; Python None is SQL NULL."""
    if value is None or type(value) in (str, int, bool):
        return value
    if isinstance(value, Jsonb):
        if value.dumps in (None, json.dumps):
            return value.obj
        return json.loads(value.dumps(value.obj))  # a field's own encoder: its JSON text
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, int | str):  # IntegerChoices, TextChoices
        return value
    raise TypeError(f"no JSON record form for a {type(value).__name__} value")


# The usual converted values, by exact type: what :func:`_plain` makes of them.
_FAST: dict[type, Any] = {
    UUID: str,
    datetime: datetime.isoformat,
    type(None): lambda v: v,
}

# Columns whose values are JSON values as they are (text, numbers, booleans, JSON).
_PLAIN_FIELDS = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.BooleanField,
    models.JSONField,
)


@dataclass(frozen=True)
class RowTable:
    """A table and the columns a caller's tuples fill, in order (``RowTable.of(Model, fields)``)."""

    table: str
    columns: tuple[str, ...]
    json_indexes: frozenset[int]
    insert_sql: str  # ``INSERT … SELECT … FROM jsonb_array_elements(%s) …`` (:func:`_rows_sql`)
    converted: tuple[int, ...]  # the columns whose values :func:`_plain` converts

    @classmethod
    def of(cls, model: type[models.Model], fields: Sequence[str]) -> RowTable:
        meta = model._meta
        columns: list[str] = []
        json_indexes: set[int] = set()
        converted: list[int] = []
        for index, name in enumerate(fields):
            field = meta.get_field(name)
            if not isinstance(field, models.Field) or field.column is None:
                raise TypeError(f"{meta.label}.{name} is not a concrete column")
            columns.append(field.column)
            if isinstance(field, models.JSONField):
                json_indexes.add(index)
            target = field.target_field if isinstance(field, models.ForeignKey) else field
            if not isinstance(target, _PLAIN_FIELDS) or isinstance(target, models.AutoField):
                converted.append(index)
        return cls(
            meta.db_table,
            tuple(columns),
            frozenset(json_indexes),
            _rows_sql(meta.db_table, columns),
            tuple(converted),
        )

    def records(self, rows: Sequence[tuple[Any, ...]]) -> str:
        """The rows as one JSON array of arrays (values in column order), the parameter of
        :attr:`insert_sql`. A JSON column's value is nested as it is (dumped as Django's
        JSONField dumps it). Arrays, not objects: dumping a column name into every row was most
        of the time (50 chunk rows: 87 µs as objects, 27 µs as arrays, on this machine)."""
        width = len(self.columns)
        for row in rows:
            if len(row) != width:
                raise ValueError(f"{self.table}: a row of {len(row)} values for {width} columns")
        if self.converted:
            by_column: list[Sequence[Any]] = list(zip(*rows, strict=True))
            for index in self.converted:
                by_column[index] = _converted(by_column[index])
            rows = list(zip(*by_column, strict=True))
        if self.json_indexes:
            return _dumps_rows(rows, self.json_indexes)
        return _dumps_scalars(rows)

    def statements(self, rows: Sequence[tuple[Any, ...]]) -> Iterable[Statement]:
        """(SQL, parameters) inserting the rows: one statement, one parameter (none when there
        is no row)."""
        if rows:
            yield self.insert_sql, [self.records(rows)]


_NOTHING = object()


def _converted(values: Sequence[Any]) -> list[Any]:
    """A column's values as :func:`_plain` makes them, converting a value once for a run of
    the same object (a batch's rows mostly share their call or attempt id)."""
    out: list[Any] = []
    last: Any = _NOTHING
    plain: Any = None
    for value in values:
        if value is not last:
            last, plain = value, _FAST.get(type(value), _plain)(value)
        out.append(plain)
    return out


def _rows_sql(table: str, columns: Sequence[str]) -> str:
    """``INSERT INTO t (c…) SELECT … FROM jsonb_array_elements(%s::jsonb) …``: each row is a
    JSON array of its values in column order, made into a record server-side
    (``jsonb_build_object``, then ``jsonb_populate_record`` as for one row), so each value
    goes to its column's type exactly as the object form did; the statement's text is the
    same whatever the number of rows (psycopg parses it once)."""
    if not 0 < len(columns) <= 50:  # jsonb_build_object takes at most 100 arguments
        raise ValueError(f"{table}: {len(columns)} columns; a RowTable takes 1 to 50")
    names = ", ".join(_quote(c) for c in columns)
    quoted = _quote(table)
    pairs = ", ".join(f"{_literal(c)}, _e.r -> {index}" for index, c in enumerate(columns))
    values = ", ".join(f"_x.{_quote(c)}" for c in columns)
    # Identifiers from the model's metadata, quoted; every value is in the parameter.
    return (
        f"INSERT INTO {quoted} ({names}) SELECT {values} "  # noqa: S608
        f"FROM jsonb_array_elements(%s::jsonb) AS _e(r) CROSS JOIN LATERAL "
        f"jsonb_populate_record(NULL::{quoted}, jsonb_build_object({pairs})) AS _x"
    )


def _literal(name: str) -> str:
    """A column name as an SQL string literal (names come from the model's metadata)."""
    return "'" + name.replace("'", "''") + "'"


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


def insert_statement(obj: models.Model, *, checked: Collection[str] = ()) -> Statement:
    """The INSERT of one model instance (every concrete field, prepared as ``save`` prepares
    it), to be sent with others in one round trip: the row is one JSON parameter.

    ``checked``: the attribute names of JSON fields whose values the caller knows to be
    canonicalizable (RFC 8785, ``chukwa_core.hashing.canonical_json_bytes``: finite numbers,
    strings, string keys, nothing else), so that orjson may write them (:func:`_dumps_record`);
    e.g. the parts of an LLM request, canonicalized for its request key."""
    conn = connections[DEFAULT_DB_ALIAS]
    values = obj.__dict__
    record = {
        # ``Field.pre_save`` only reads the attribute; a field that overrides it (auto_now…)
        # runs its own
        column: _column_value(
            field,
            direct,
            values[attname] if attname in values else field.pre_save(obj, add=True),
            conn,
        )
        for column, field, direct, attname in _insert_plan(type(obj))
    }
    unchecked = [values.get(name) for name in _json_attnames(type(obj)) if name not in checked]
    return _insert_one_sql(type(obj)), [_dumps_record(record, unchecked)]


@functools.cache
def _json_attnames(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(f.attname for f in _concrete_fields(model) if isinstance(f, models.JSONField))


def _column_value(
    field: models.Field[Any, Any], direct: frozenset[type], value: Any, conn: Any
) -> Any:
    """A field's value as :func:`_plain` makes of what the field prepares for saving; for a
    value of one of the types the field takes as they are (``direct``, :func:`_direct_types`)
    without the field's preparation, which would give the same value back."""
    kind = type(value)
    if kind in direct:
        if kind is UUID:
            return str(value)
        if kind is not datetime:
            return value
        if value.tzinfo is not None:  # a naive one: the field warns and makes it aware
            return value.isoformat()
    return _plain(field.get_db_prep_save(value, conn))


_TEXT: frozenset[type] = frozenset({str, type(None)})
_INTEGER: frozenset[type] = frozenset(
    {int, type(None)}
)  # exactly int: the field makes a bool 0 or 1


def _direct_types(field: models.Field[Any, Any]) -> frozenset[type]:
    """The types of value that preparing this field gives back unchanged (up to
    :func:`_plain`): only for the stock field classes listed here, each its own kind of value
    (``pre_save`` still runs, for ``auto_now``). A JSON field's None is not among them (SQL NULL
    or JSON null: the field decides), nor a float (:func:`_plain` has its own cases)."""
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    if isinstance(target, models.JSONField):
        return frozenset({dict, list, str, int, bool}) if target.encoder is None else frozenset()
    kinds: dict[type, frozenset[type]] = {
        models.CharField: _TEXT,
        models.TextField: _TEXT,
        models.IntegerField: _INTEGER,
        models.BigIntegerField: _INTEGER,
        models.SmallIntegerField: _INTEGER,
        models.PositiveIntegerField: _INTEGER,
        models.PositiveSmallIntegerField: _INTEGER,
        models.AutoField: _INTEGER,
        models.BigAutoField: _INTEGER,
        models.BooleanField: frozenset({bool, type(None)}),
        models.UUIDField: frozenset({UUID, type(None)}),
        models.DateTimeField: frozenset({datetime, type(None)}),
    }
    return kinds.get(type(target), frozenset())


@functools.cache
def _insert_plan(
    model: type[models.Model],
) -> tuple[tuple[str, models.Field[Any, Any], frozenset[type], str], ...]:
    """Per concrete field: its column, the field, :func:`_direct_types`, and its attribute's
    name when its ``pre_save`` is ``Field``'s own (which only reads it), else ""."""
    return tuple(
        (
            str(f.column),
            f,
            _direct_types(f),
            f.attname if type(f).pre_save is models.Field.pre_save else "",  # "" is no key
        )
        for f in _concrete_fields(model)
    )


@functools.cache
def _concrete_fields(model: type[models.Model]) -> tuple[models.Field[Any, Any], ...]:
    return tuple(f for f in model._meta.concrete_fields if f.column is not None)


@functools.cache
def _insert_one_sql(model: type[models.Model]) -> str:
    """``INSERT INTO t (c…) SELECT c… FROM jsonb_populate_record(NULL::t, %s::jsonb)``: the row
    travels as one JSON object, so no value is quoted one by one; each column's type is the
    table's own."""
    names = ", ".join(_quote(f.column) for f in _concrete_fields(model))
    quoted = _quote(model._meta.db_table)
    # Identifiers from the model's metadata, quoted; every value is in the parameter.
    return (
        f"INSERT INTO {quoted} ({names}) SELECT {names} "  # noqa: S608
        f"FROM jsonb_populate_record(NULL::{quoted}, %s::jsonb)"
    )


def update_statement(
    model: type[models.Model], pk: Any, values: dict[str, Any], *, while_running: bool = False
) -> Statement:
    """``UPDATE … SET <values> WHERE pk = %s``, values prepared as ``QuerySet.update``
    prepares them; they travel as one JSON parameter, so the statement's text depends only on
    which columns it sets. ``while_running``: only a row whose ``status`` is still
    ``running`` (a call finishing its own row leaves one the reaper interrupted as it is)."""
    meta = model._meta
    conn = connections[DEFAULT_DB_ALIAS]
    record: dict[str, Any] = {}
    json_values = []
    for name, value in values.items():
        column, field, direct = _update_column(model, name)
        if isinstance(value, models.Model):
            value = value.pk
        elif isinstance(field, models.JSONField):
            json_values.append(value)
        record[column] = _column_value(field, direct, value, conn)
    pk_field = meta.pk
    assert pk_field is not None
    sql = _update_sql(model, tuple(record), while_running)
    return sql, [_dumps_record(record, json_values), pk_field.get_db_prep_save(pk, conn)]


@functools.lru_cache(maxsize=1024)
def _update_column(
    model: type[models.Model], name: str
) -> tuple[str, models.Field[Any, Any], frozenset[type]]:
    meta = model._meta
    field = meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise TypeError(f"{meta.label}.{name} is not a concrete column")
    return str(field.column), field, _direct_types(field)


@functools.lru_cache(maxsize=256)
def _update_sql(model: type[models.Model], columns: tuple[str, ...], while_running: bool) -> str:
    meta = model._meta
    pk_field = meta.pk
    assert pk_field is not None
    table, key = _quote(meta.db_table), _quote(pk_field.column)
    sets = ", ".join(f"{_quote(c)} = _r.{_quote(c)}" for c in columns)
    # Identifiers from the model's metadata, quoted; every value is a parameter.
    return (
        f"UPDATE {table} SET {sets} "  # noqa: S608
        f"FROM jsonb_populate_record(NULL::{table}, %s::jsonb) AS _r WHERE {table}.{key} = %s"
        + (f" AND {table}.{_quote('status')} = 'running'" if while_running else "")
    )


def delete_statement(model: type[models.Model], field: str, value: Any) -> Statement:
    """``DELETE FROM … WHERE <field> = %s``."""
    meta = model._meta
    column = meta.get_field(field)
    if not isinstance(column, models.Field) or column.column is None:
        raise TypeError(f"{meta.label}.{field} is not a concrete column")
    sql = f"DELETE FROM {_quote(meta.db_table)} WHERE {_quote(column.column)} = %s"  # noqa: S608
    return sql, [column.get_db_prep_save(value, connection)]


def send_batch(statements: Sequence[Statement]) -> BatchResults:
    """Run the statements in one round trip and one transaction (all or nothing; inside the
    caller's transaction if one is open): as a pipeline (:func:`send_pipelined`), else — too
    big for one — as one multi-statement query when Django's cursor binds client-side (its
    default), else one by one in an atomic block. Returns, per statement, the rows it returned
    (a SELECT, an ``… RETURNING``), else None."""
    if _pipeline_fits(statements):
        return send_pipelined(statements)
    results: BatchResults = []
    with connection.cursor() as cursor:
        if isinstance(cursor.cursor, psycopg.ClientCursor):
            sql = "; ".join(s for s, _ in statements)
            cursor.execute(sql, [p for _, params in statements for p in params])
            for index in range(len(statements)):
                if index:
                    cursor.cursor.nextset()
                results.append(cursor.fetchall() if cursor.description is not None else None)
            return results
    with transaction.atomic(), connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
            results.append(cursor.fetchall() if cursor.description is not None else None)
    return results


def _pipeline_fits(statements: Sequence[Statement]) -> bool:
    """Can :func:`send_pipelined` send these statements (libpq supports pipelines and they are
    under ``PIPELINE_MAX_BYTES``)?"""
    size = sum(
        len(sql) + sum(len(p) for p in params if isinstance(p, str)) for sql, params in statements
    )
    return size <= PIPELINE_MAX_BYTES and psycopg.Pipeline.is_supported()


def send_pipelined(statements: Sequence[Statement]) -> BatchResults:
    """Run the statements in libpq's pipeline mode, sent together with one Sync: one round trip,
    and PostgreSQL runs them as one implicit transaction (all or nothing; inside the caller's
    transaction if one is open). They bind their parameters server-side, so psycopg prepares a
    statement text on the connection once it ran ``prepare_threshold`` times there (settings):
    PostgreSQL then neither parses nor plans it again (planning was a third of a trace batch's
    time in PostgreSQL). Django sees the batch as one query (its query log, execute wrappers
    and error translation). Returns, per statement, the rows it returned, else None."""
    label = "; ".join(s for s, _ in statements)
    params = [p for _, ps in statements for p in ps]

    def execute(_sql: str, _params: Any, _many: bool, _context: Any) -> BatchResults:
        connection.validate_no_broken_transaction()
        conn = connection.connection
        with connection.wrap_database_errors, conn.pipeline() as pipeline:
            cursors = []
            for sql, ps in statements:
                cursor = psycopg.Cursor(conn)
                cursor.execute(sql, ps)
                cursors.append(cursor)
            pipeline.sync()  # sends the batch and reads every result (raises the first error)
            return [c.fetchall() if c.description is not None else None for c in cursors]

    if plain_connection_ready():  # no query log, no execute wrapper: Django's wrapper skipped
        return execute(label, params, False, None)
    with connection.cursor() as wrapper:  # opens the connection if it is not
        run = wrapper._execute_with_wrappers
        if isinstance(wrapper, CursorDebugWrapper):
            with wrapper.debug_sql(label, params):
                return cast(BatchResults, run(label, params, False, execute))
        return cast(BatchResults, run(label, params, False, execute))


def send_one(statement: Statement) -> list[tuple[Any, ...]]:
    """Run one statement on ``scenarios_app.sql_rows.prepared_cursor`` (bound server-side, so
    prepared once it ran ``prepare_threshold`` times on the connection, as the pipeline's
    statements are), without a pipeline's own cost (entering it, the Sync: half the client's
    time for a one-statement batch). Its own transaction, or the caller's if one is open.
    Returns its rows ([] when it returns none)."""
    sql, params = statement
    return fetch_tuples(sql, params)


def send_combined(
    checks: Sequence[Statement], writes: Sequence[Statement], query: Statement | None = None
) -> list[tuple[Any, ...]]:
    """What ``checks``, ``writes`` and ``query`` would do in one transaction, as one statement
    (:func:`combined_statement`, sent by :func:`send_one`): a call's opening, one statement
    instead of a pipeline of five or six. Returns ``query``'s rows ([] without it)."""
    rows = send_one(combined_statement(checks, writes, query))
    if query is None:
        return []
    # (checks' count, found, query's columns…); a query without rows leaves one row of NULLs
    return [row[2:] for row in rows if row[1] is not None]


def combined_statement(
    checks: Sequence[Statement], writes: Sequence[Statement], query: Statement | None = None
) -> Statement:
    """One statement for :func:`send_combined`:

    - ``checks``: SELECTs that must run whatever else the statement does (a guard that refuses,
      a ``set_config``): their row count is computed into the one row the statement always
      returns first, so no plan can leave them out (a plan may skip a condition's subqueries,
      e.g. when the rest is found to return nothing).
    - ``writes``: INSERT / UPDATE / DELETE statements, as WITH queries, which PostgreSQL runs to
      completion whether or not anything reads them.
    - ``query``: a SELECT whose rows it returns after the count and a found flag (NULL in the
      one row it returns when the query has none).

    All parts share one snapshot, so no part reads what another writes; constraints are
    checked at the end of the statement (a foreign key to a row inserted beside it holds). An
    error anywhere aborts all of it."""
    if not checks:
        raise ValueError("a combined statement needs a check")
    for sql, _ in writes:  # a SELECT among them would not even run
        if sql.lstrip()[:6].upper() not in ("INSERT", "UPDATE", "DELETE"):
            raise ValueError(f"not an INSERT, UPDATE or DELETE: {sql[:60]!r}")
    ctes = [f"_c{i} AS ({sql})" for i, (sql, _) in enumerate(checks)]
    ctes += [f"_w{i} AS ({sql})" for i, (sql, _) in enumerate(writes)]
    # Every part is one of Chukwa's own statements (identifiers quoted, values parameters).
    count = " + ".join(f"(SELECT count(*) FROM _c{i})" for i in range(len(checks)))  # noqa: S608
    params = [p for _, ps in (*checks, *writes) for p in ps]
    if query is None:
        return f"WITH {', '.join(ctes)} SELECT {count}", params
    return (
        f"WITH {', '.join(ctes)} SELECT {count}, _q.* FROM (SELECT 1) _one "  # noqa: S608
        f"LEFT JOIN (SELECT true AS _found, _r.* FROM ({query[0]}) _r) _q ON true",
        [*params, *query[1]],
    )
