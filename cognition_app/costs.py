"""What an LLM call costs: the price row in force for its (URL variable, model) and the cost of
its token usage under that row (SPEC §12).

Usage follows the OpenAI convention: ``prompt_tokens`` includes the ``cached_tokens`` part, which
is billed at the cached-input price; the rest of the prompt at the input price, the completion
at the output price. The model is the one the source *requests* (the row an operator can know in
advance); a provider answering with a dated variant of it is billed at the same row.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from cognition_app.models import ModelPrice

MILLION = Decimal(1_000_000)


def price_at(*, url_env: str, model: str, at: datetime) -> ModelPrice | None:
    """The row in force at ``at`` (the newest ``valid_from`` not after it), or None."""
    return (
        ModelPrice.objects.filter(url_env=url_env, model=model, valid_from__lte=at)
        .order_by("-valid_from")
        .first()
    )


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


def worst_case_cost(price: ModelPrice, *, prompt_tokens: int, completion_tokens: int) -> Decimal:
    """The most a call could cost: no prompt token assumed cached, whichever input price is
    higher (an operator may price cached input above fresh input; nothing forbids it)."""
    input_price = max(price.input_per_million, price.cached_input_per_million)
    return (prompt_tokens * input_price + completion_tokens * price.output_per_million) / MILLION
