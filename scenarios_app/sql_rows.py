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


def fetch_dicts(
    sql: str, params: Sequence[Any], *, json_columns: Collection[str] = ()
) -> list[dict[str, Any]]:
    """Every row of ``sql`` as a dict keyed by the result's column names."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        description = cursor.description
        assert description is not None  # a SELECT always describes its columns
        names = [column.name for column in description]
        rows = cursor.fetchall()
    decode = [name in json_columns for name in names]
    return [
        {
            name: json.loads(value) if wanted and value is not None else value
            for name, wanted, value in zip(names, decode, row, strict=True)
        }
        for row in rows
    ]


def fetch_dict(
    sql: str, params: Sequence[Any], *, json_columns: Collection[str] = ()
) -> dict[str, Any] | None:
    """The first row of ``sql`` as a dict, or None when there is none."""
    rows = fetch_dicts(sql, params, json_columns=json_columns)
    return rows[0] if rows else None
