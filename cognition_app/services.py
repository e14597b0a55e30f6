"""Writes of the cognition app's operator data: the model price table."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, TypedDict

from django.db import IntegrityError, transaction
from django.utils import timezone

from chukwa_core import clock
from chukwa_core.component_validation import check_keys, require_object, type_name
from chukwa_core.errors import ConflictError, invalid
from chukwa_core.ids import is_url_env_name
from cognition_app.costs import call_cost
from cognition_app.models import LlmCall, ModelPrice
from scenarios_app.services._store import reject_nul

PRICE_FIELDS = ("input_per_million", "output_per_million", "cached_input_per_million")
# the provider's Batch API prices: optional, all three or none (none: batched calls unknown)
BATCH_PRICE_FIELDS = (
    "batch_input_per_million",
    "batch_output_per_million",
    "batch_cached_input_per_million",
)
# The columns hold 8 integer digits and 6 decimals.
MAX_PRICE = Decimal("99999999")


class ModelPriceInput(TypedDict, total=False):
    url_env: str
    model: str
    input_per_million: str | Decimal
    output_per_million: str | Decimal
    cached_input_per_million: str | Decimal
    batch_input_per_million: str | Decimal | None
    batch_output_per_million: str | Decimal | None
    batch_cached_input_per_million: str | Decimal | None
    valid_from: str  # ISO 8601 with an offset; default now
    operator: str


def _price(raw: Any, field: str) -> Decimal:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float | Decimal):
        raise invalid("invalid_price", field, f"must be a decimal string, got {type_name(raw)}")
    try:
        amount = Decimal(str(raw))  # str() first: a float's text, not its binary expansion
    except InvalidOperation:
        raise invalid("invalid_price", field, f"must be a decimal number, got {raw!r}") from None
    if not amount.is_finite() or not 0 <= amount <= MAX_PRICE:
        raise invalid("invalid_price", field, f"must be 0…{MAX_PRICE}, got {raw!r}")
    if amount != amount.quantize(Decimal("1e-6")):
        raise invalid("invalid_price", field, f"has more than 6 decimals: {raw!r}")
    return amount


REPRICE_CHUNK = 2000


def _reprice_calls(price: ModelPrice) -> int:
    """Price, with the new row, every call of its (URL variable, model) made while it is in
    force (from its ``valid_from`` to the next row's): a call costs its tokens times the price
    in force *at its time*, so a price entered late, or corrected, prices the calls made since.
    Calls never sent (a known 0) and calls without usage (no tokens to price) are left alone.
    Returns how many calls were priced."""
    following = (
        ModelPrice.objects.filter(
            url_env=price.url_env, model=price.model, valid_from__gt=price.valid_from
        )
        .order_by("valid_from")
        .values_list("valid_from", flat=True)
        .first()
    )
    calls = LlmCall.objects.filter(
        base_url_env=price.url_env,
        requested_model=price.model,
        started_at__gte=price.valid_from,
        prompt_tokens__isnull=False,
        completion_tokens__isnull=False,
    ).exclude(usage_source="not_sent")
    if following is not None:
        calls = calls.filter(started_at__lt=following)
    priced = 0
    batch: list[LlmCall] = []
    for call in calls.only(
        "id", "prompt_tokens", "completion_tokens", "cached_tokens", "price", "cost", "batched"
    ).iterator(chunk_size=REPRICE_CHUNK):
        assert call.prompt_tokens is not None and call.completion_tokens is not None
        call.price = price
        call.cost = call_cost(
            price,
            batched=call.batched,
            prompt_tokens=call.prompt_tokens,
            completion_tokens=call.completion_tokens,
            cached_tokens=call.cached_tokens or 0,
        )
        batch.append(call)
        if len(batch) >= REPRICE_CHUNK:
            LlmCall.objects.bulk_update(batch, ["price", "cost"])
            priced, batch = priced + len(batch), []
    if batch:
        LlmCall.objects.bulk_update(batch, ["price", "cost"])
        priced += len(batch)
    return priced


def model_price_add(*, data: ModelPriceInput) -> ModelPrice:
    """A new price row for a (URL variable, model) pair, in force from ``valid_from``; the
    earlier rows stay, as history. The calls made while it is in force are priced with it
    (``_reprice_calls``), so a price entered late prices the calls made since its
    ``valid_from``."""
    body = require_object(data, "body", "invalid_input")
    check_keys(
        body,
        "",
        required=("url_env", "model", *PRICE_FIELDS),
        optional=("valid_from", "operator", *BATCH_PRICE_FIELDS),
        code="invalid_input",
    )
    if not is_url_env_name(body["url_env"]):
        raise invalid(
            "invalid_url_env",
            "url_env",
            f"{body['url_env']!r} is not a URL variable name (CHUKWA_<NAME>_URL)",
        )
    model = body["model"]
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        raise invalid("invalid_input", "model", "must be a non-empty string ≤ 200 chars")
    reject_nul(model, "model")
    prices: dict[str, Decimal | None] = {name: _price(body[name], name) for name in PRICE_FIELDS}
    given = [name for name in BATCH_PRICE_FIELDS if body.get(name) is not None]
    if given:
        missing = [name for name in BATCH_PRICE_FIELDS if name not in given]
        if missing:
            raise invalid(
                "invalid_price",
                missing[0],
                f"batch prices come together: {', '.join(given)} given, {missing[0]} missing "
                "(leave all three out when the provider's batch price is unknown)",
            )
        prices.update({name: _price(body[name], name) for name in BATCH_PRICE_FIELDS})
    valid_from = timezone.now() if body.get("valid_from") is None else _instant(body["valid_from"])
    operator = body.get("operator") or ""
    if not isinstance(operator, str) or len(operator) > 150:
        raise invalid("invalid_input", "operator", "must be a string ≤ 150 chars")
    reject_nul(operator, "operator")
    try:
        with transaction.atomic(durable=True):
            with transaction.atomic():
                row = ModelPrice.objects.create(
                    url_env=body["url_env"],
                    model=model,
                    valid_from=valid_from,
                    created_by=operator,
                    **prices,
                )
            _reprice_calls(row)
            return row
    except IntegrityError:
        raise ConflictError(
            "price_exists",
            f"valid_from: {body['url_env']} {model} already has a price from "
            f"{valid_from.isoformat()}",
            {"field": "valid_from"},
        ) from None


def _instant(value: Any) -> Any:
    if not isinstance(value, str):
        raise invalid(
            "invalid_valid_from", "valid_from", f"must be a string, got {type_name(value)}"
        )
    try:
        return clock.parse_instant(value)
    except (clock.NotAnInstant, clock.CalendarOverflow) as exc:
        raise invalid("invalid_valid_from", "valid_from", str(exc)) from None
