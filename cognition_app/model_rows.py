"""Model instances from the columns of a written statement: the hot paths (claims, reuse)
select the columns they need in one statement instead of a queryset compiled at every call,
and build the instances as a queryset would (the fields' converters, ``Model.from_db``)."""

from __future__ import annotations

from typing import Any

from django.db import connection, models


def concrete_fields(
    model: type[models.Model], names: list[str] | None = None
) -> list[models.Field[Any, Any]]:
    """The model's fields that are columns (all, or those named), in the model's order."""
    return [
        f
        for f in model._meta.concrete_fields
        if f.column is not None and (names is None or f.name in names)
    ]


def quoted(name: str | None) -> str:
    return str(connection.ops.quote_name(name or ""))


def columns(alias: str, fields: list[models.Field[Any, Any]]) -> str:
    """``alias.col, …`` for a SELECT list."""
    return ", ".join(f"{alias}.{quoted(f.column)}" for f in fields)


def instance(model: type[models.Model], fields: list[models.Field[Any, Any]], values: Any) -> Any:
    """A model instance from raw column values, converted as a queryset converts them."""
    converted = []
    for field, value in zip(fields, values, strict=True):
        for converter in field.get_db_converters(connection):
            value = converter(value, field, connection)
        converted.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], converted)


def split(row: Any, *groups: list[models.Field[Any, Any]]) -> list[Any]:
    """A row's values cut into one slice per group of fields, in order."""
    parts, start = [], 0
    for fields in groups:
        parts.append(row[start : start + len(fields)])
        start += len(fields)
    return parts
