"""What an LLM call costs: the price row in force for its (URL variable, model) and the cost of
its token usage under that row.

Usage follows the OpenAI convention: ``prompt_tokens`` includes the ``cached_tokens`` part, which
is billed at the cached-input price; the rest of the prompt at the input price, the completion
at the output price. The model is the one the source *requests* (the row an operator can know in
advance); a provider answering with a dated variant of it is billed at the same row.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from cognition_app.models import ModelPrice
from cognition_app.rows import Statement

MILLION = Decimal(1_000_000)


def price_at(*, url_env: str, model: str, at: datetime) -> ModelPrice | None:
    """The row in force at ``at`` (the newest ``valid_from`` not after it), or None."""
    sql, params = price_statement(url_env=url_env, model=model, at=at)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return price_from_rows(cursor.fetchall())


def price_statement(*, url_env: str, model: str, at: datetime) -> Statement:
    """The SELECT of :func:`price_at`, to be sent with other statements in one round trip
    (its rows go to :func:`price_from_rows`)."""
    meta = ModelPrice._meta
    q = connection.ops.quote_name
    columns = ", ".join(q(str(f.column)) for f in _PRICE_FIELDS)
    table = q(meta.db_table)
    url_env_c, model_c, valid_from_c = (
        q(str(f.column))
        for f in (ModelPrice.url_env.field, ModelPrice.model.field, ModelPrice.valid_from.field)
    )
    where = f"{url_env_c} = %s AND {model_c} = %s AND {valid_from_c} <= %s"
    # identifiers from the model's metadata, quoted; the values are parameters
    sql = f"SELECT {columns} FROM {table} WHERE {where} ORDER BY {valid_from_c} DESC LIMIT 1"  # noqa: S608
    return sql, [url_env, model, at]


def price_from_rows(rows: list[tuple[Any, ...]] | None) -> ModelPrice | None:
    if not rows:
        return None
    names = [f.attname for f in _PRICE_FIELDS]
    return ModelPrice.from_db(connection.alias, names, list(rows[0]))


_PRICE_FIELDS = [f for f in ModelPrice._meta.concrete_fields if f.column is not None]


def usage_cost(
    price: ModelPrice, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> Decimal:
    """Exact: Decimal arithmetic only, no float anywhere."""
    cached = min(max(cached_tokens, 0), prompt_tokens)
    return (
        (prompt_tokens - cached) * price.input_per_million
        + cached * price.cached_input_per_million
        + completion_tokens * price.output_per_million
    ) / MILLION


def batch_usage_cost(
    price: ModelPrice, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> Decimal | None:
    """What a call sent through the provider's Batch API costs under ``price``'s batch prices;
    None (unknown) when the row has none: never the online price, never 0."""
    batch_input = price.batch_input_per_million
    batch_output = price.batch_output_per_million
    batch_cached = price.batch_cached_input_per_million
    if batch_input is None or batch_output is None or batch_cached is None:
        return None
    cached = min(max(cached_tokens, 0), prompt_tokens)
    return (
        (prompt_tokens - cached) * batch_input
        + cached * batch_cached
        + completion_tokens * batch_output
    ) / MILLION


def call_cost(
    price: ModelPrice,
    *,
    batched: bool,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
) -> Decimal | None:
    """A call's cost: the batch prices for a batched call (None when the row has none), the
    online prices otherwise."""
    if batched:
        return batch_usage_cost(
            price,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached_tokens,
        )
    return usage_cost(
        price,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
    )


def worst_case_cost(price: ModelPrice, *, prompt_tokens: int, completion_tokens: int) -> Decimal:
    """The most a call could cost: no prompt token assumed cached, whichever input price is
    higher (an operator may price cached input above fresh input; nothing forbids it)."""
    input_price = max(price.input_per_million, price.cached_input_per_million)
    return (prompt_tokens * input_price + completion_tokens * price.output_per_million) / MILLION


def worst_case_batch_cost(
    price: ModelPrice, *, prompt_tokens: int, completion_tokens: int
) -> Decimal | None:
    """:func:`worst_case_cost` at the row's batch prices; None (unknown) when it has none."""
    batch_input = price.batch_input_per_million
    batch_output = price.batch_output_per_million
    batch_cached = price.batch_cached_input_per_million
    if batch_input is None or batch_output is None or batch_cached is None:
        return None
    input_price = max(batch_input, batch_cached)
    return (prompt_tokens * input_price + completion_tokens * batch_output) / MILLION
