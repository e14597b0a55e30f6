"""Batch prices in the price table: optional, all three or none; a row without them prices a
batched call "unknown", never at the online price or 0."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from cognition_app.costs import batch_usage_cost, call_cost, usage_cost
from cognition_app.models import ModelPrice
from tests.cognition_app.test_model_prices import PRICE

pytestmark = pytest.mark.django_db

BATCH = {
    "batch_input_per_million": "0.075",
    "batch_output_per_million": "0.30",
    "batch_cached_input_per_million": "0.0375",
}


def test_batch_prices_are_put_and_read(
    operator_client: APIClient, reader_client: APIClient
) -> None:
    with_batch = operator_client.put(
        "/api/model-prices/",
        {**PRICE, **BATCH, "valid_from": "2026-01-01T00:00:00Z"},
        format="json",
    )
    assert with_batch.status_code == 201, with_batch.content
    assert with_batch.json()["batch_output_per_million"] == "0.300000"
    without = operator_client.put(
        "/api/model-prices/", {**PRICE, "valid_from": "2026-02-01T00:00:00Z"}, format="json"
    )
    assert without.status_code == 201, without.content
    rows = reader_client.get("/api/model-prices/").json()["results"]
    assert [(r["batch_input_per_million"], r["batch_cached_input_per_million"]) for r in rows] == [
        (None, None),
        ("0.075000", "0.037500"),
    ]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"batch_input_per_million": "0.1"}, "batch_output_per_million"),
        (
            {"batch_input_per_million": "0.1", "batch_output_per_million": "0.2"},
            "batch_cached_input_per_million",
        ),
        ({**BATCH, "batch_output_per_million": "-1"}, "batch_output_per_million"),
        ({**BATCH, "batch_input_per_million": "x"}, "batch_input_per_million"),
    ],
)
def test_bad_batch_prices_are_refused_naming_the_field(
    operator_client: APIClient, change: dict[str, Any], field: str
) -> None:
    response = operator_client.put("/api/model-prices/", {**PRICE, **change}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_price"
    assert error["details"]["field"] == field
    assert not ModelPrice.objects.exists()


def test_a_batched_call_costs_the_batch_price_or_unknown() -> None:
    from cognition_app.services import model_price_add

    priced = model_price_add(data={**PRICE, **BATCH, "valid_from": "2026-01-01T00:00:00Z"})  # type: ignore[typeddict-item]
    unpriced = model_price_add(data={**PRICE, "valid_from": "2026-02-01T00:00:00Z"})  # type: ignore[typeddict-item]
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 200}
    expected = (
        800 * Decimal(BATCH["batch_input_per_million"])
        + 200 * Decimal(BATCH["batch_cached_input_per_million"])
        + 500 * Decimal(BATCH["batch_output_per_million"])
    ) / Decimal(1_000_000)
    assert batch_usage_cost(priced, **usage) == expected
    assert call_cost(priced, batched=True, **usage) == expected
    assert call_cost(priced, batched=False, **usage) == usage_cost(priced, **usage)
    assert call_cost(priced, batched=True, **usage) != call_cost(priced, batched=False, **usage)
    assert batch_usage_cost(unpriced, **usage) is None
    assert call_cost(unpriced, batched=True, **usage) is None
