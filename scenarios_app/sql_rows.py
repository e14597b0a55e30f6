"""Rows of a plain SQL read as dicts, for the few reads every API request runs.

Django's ORM spends 0.4 to 1 ms of CPU compiling each query (more for aggregates and subqueries),
several times what PostgreSQL and psycopg spend running it; the hottest reads (the token
lookup, world/turn/attempt details) are written once as SQL text instead. The values are what
the ORM would give: Django's psycopg setup already loads timestamps as aware UTC datetimes,
UUIDs as ``uuid.UUID``, numerics as ``Decimal``; ``jsonb`` comes back as text, decoded here
for the columns named in ``json_columns`` exactly as ``JSONField`` decodes it (``json.loads``);
a computed ``json`` value (``json_agg``) arrives decoded by psycopg (also ``json.loads``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from django.db import connection
from psycopg.rows import dict_row


def fetch_dicts(
    sql: str, params: Sequence[Any], *, json_columns: Collection[str] = ()
) -> list[dict[str, Any]]:
    """Every row of ``sql`` as a dict keyed by the result's column names."""
    with connection.cursor() as cursor:
        # psycopg's dict rows read the names straight from the result; building the DB-API
        # ``description`` (a typed Column object per column) cost more than the rows
        cursor.cursor.row_factory = dict_row
        cursor.execute(sql, params)
        rows: list[dict[str, Any]] = cursor.fetchall()
    for name in json_columns:
        for row in rows:
            if row[name] is not None:
                row[name] = json.loads(row[name])
    return rows


def fetch_dict(
    sql: str, params: Sequence[Any], *, json_columns: Collection[str] = ()
) -> dict[str, Any] | None:
    """The first row of ``sql`` as a dict, or None when there is none."""
    rows = fetch_dicts(sql, params, json_columns=json_columns)
    return rows[0] if rows else None
