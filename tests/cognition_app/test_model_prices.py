"""The price table through the API: operators add rows, everyone reads them, the
history stays."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from cognition_app.models import ModelPrice

pytestmark = pytest.mark.django_db

PRICE: dict[str, Any] = {
    "url_env": "CHUKWA_LLM_BASE_URL",
    "model": "gpt-4o-mini",
    "input_per_million": "0.15",
    "output_per_million": "0.60",
    "cached_input_per_million": "0.075",
}


def test_put_then_get_keeps_the_history(
    operator_client: APIClient, reader_client: APIClient
) -> None:
    first = operator_client.put(
        "/api/model-prices/", {**PRICE, "valid_from": "2026-01-01T00:00:00Z"}, format="json"
    )
    assert first.status_code == 201, first.content
    assert first.json()["input_per_million"] == "0.150000"
    assert first.json()["created_by"] == "ops"
    second = operator_client.put(
        "/api/model-prices/",
        {**PRICE, "input_per_million": "0.2", "valid_from": "2026-06-01T00:00:00+02:00"},
        format="json",
    )
    assert second.status_code == 201, second.content

    rows = reader_client.get("/api/model-prices/?model=gpt-4o-mini").json()["results"]
    assert [(r["input_per_million"], r["valid_from"]) for r in rows] == [
        ("0.200000", "2026-05-31T22:00:00Z"),
        ("0.150000", "2026-01-01T00:00:00Z"),
    ]
    same_instant = operator_client.put(
        "/api/model-prices/", {**PRICE, "valid_from": "2026-01-01T00:00:00Z"}, format="json"
    )
    assert same_instant.status_code == 409
    assert same_instant.json()["error"]["code"] == "price_exists"


def test_readers_cannot_put(reader_client: APIClient) -> None:
    response = reader_client.put("/api/model-prices/", PRICE, format="json")
    assert response.status_code == 403
    assert not ModelPrice.objects.exists()


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"url_env": "HOME"}, "invalid_url_env"),
        ({"input_per_million": "-1"}, "invalid_price"),
        ({"output_per_million": "abc"}, "invalid_price"),
        ({"valid_from": "yesterday"}, "invalid_valid_from"),
    ],
)
def test_bad_prices_are_refused(
    operator_client: APIClient, change: dict[str, Any], code: str
) -> None:
    response = operator_client.put("/api/model-prices/", {**PRICE, **change}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    assert not ModelPrice.objects.exists()


def _staff(user: User) -> Client:
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(user)
    return client


def test_admin_staff_read_operators_write(operator_user: User, reader_user: User) -> None:
    reader, operator = _staff(reader_user), _staff(operator_user)
    assert reader.get("/admin/cognition_app/modelprice/").status_code == 200
    form = {
        **PRICE,
        "valid_from_0": "2026-01-01",
        "valid_from_1": "00:00:00",
    }
    assert reader.post("/admin/cognition_app/modelprice/add/", form).status_code == 403
    assert not ModelPrice.objects.exists()
    response = operator.post("/admin/cognition_app/modelprice/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = ModelPrice.objects.get()
    assert (row.created_by, str(row.input_per_million)) == ("ops", "0.150000")


@pytest.mark.django_db(transaction=True)
def test_a_price_entered_late_prices_the_calls_made_since_its_valid_from(
    live_server: Any, operator_user: User, reader_user: User, scripted_llm: Any
) -> None:
    """A call costs its tokens times the price in force at its time, whenever that price was
    entered: an afternoon's calls made before anyone entered a price are priced once it is.
    Prices are put and costs read over real HTTP."""
    from datetime import timedelta

    import httpx
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from cognition_app.costs import usage_cost
    from cognition_app.models import LlmCall
    from tests.cognition_app.test_llm_retry import ANT_OK
    from tests.support.worlds import backend_checked, create_world, run_turn

    def client(user: User) -> httpx.Client:
        token = Token.objects.get_or_create(user=user)[0].key
        return httpx.Client(
            base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
        )

    # one generation's call (what a conformance check spends: tests/worlds_app/test_probe_totals)
    backend_checked(scripted_llm.base_url, "gpt-4o-mini")
    create_world("ant_on_plate", "late-price")
    scripted_llm.script(ANT_OK)
    attempt = run_turn("late-price")
    (call,) = LlmCall.objects.filter(invocation__attempt=attempt, invocation__kind="llm_generation")
    assert call.cost is None and call.price_id is None  # no price yet: unknown, never 0
    with client(operator_user) as ops, client(reader_user) as reader:
        before = reader.get(f"/api/attempts/{attempt.pk}/").json()["cost"]
        assert before["total"] is None and before["unknown_calls"] == 1
        # readers cannot price
        assert reader.put("/api/model-prices/", json=PRICE).status_code == 403

        an_hour_ago = (timezone.now() - timedelta(hours=1)).isoformat()
        late = ops.put("/api/model-prices/", json={**PRICE, "valid_from": an_hour_ago})
        assert late.status_code == 201, late.text
        call.refresh_from_db()
        price = ModelPrice.objects.get(valid_from__lte=call.started_at)
        expected = usage_cost(
            price,
            prompt_tokens=call.prompt_tokens or 0,
            completion_tokens=call.completion_tokens or 0,
            cached_tokens=call.cached_tokens or 0,
        )
        assert call.price_id == price.pk and call.cost == expected and expected > 0
        after = reader.get(f"/api/attempts/{attempt.pk}/").json()["cost"]
        assert after["unknown_calls"] == 0 and after["total"] is not None
        world = reader.get("/api/worlds/late-price/").json()["cost"]
        assert world["total"] == after["total"]

        # A price from after the call does not touch it; a correction of its period does.
        later = ops.put(
            "/api/model-prices/",
            json={**PRICE, "input_per_million": "9", "valid_from": timezone.now().isoformat()},
        )
        assert later.status_code == 201
        call.refresh_from_db()
        assert call.price_id == price.pk and call.cost == expected
        corrected = ops.put(
            "/api/model-prices/",
            json={
                **PRICE,
                "output_per_million": "1.2",
                "valid_from": (call.started_at - timedelta(minutes=1)).isoformat(),
            },
        )
        assert corrected.status_code == 201
        call.refresh_from_db()
        assert call.cost is not None and call.cost > expected
