"""Cost of every LLM call and world budgets, through the scripted LLM server.

Cost = usage * the price in force (exact Decimal); no price → null, "unknown", never 0;
estimated usage → cost marked estimated. A call that could exceed the world's budget is never
sent: the scripted server records no request and the attempt fails ``budget_exhausted``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from cognition_app.budgets import prompt_estimate
from cognition_app.models import LlmCall, ModelPrice, SourceInvocation
from cognition_app.services import model_price_add
from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import backend_checked, create_world, fixture_body, run_turn
from worlds_app.management.commands.run_turns import summarize_turn
from worlds_app.models import AttemptStatus, TurnAttempt, World, WorldBudget
from worlds_app.selectors import attempt_get, turn_get, world_get
from worlds_app.services import (
    turn_attempt_enqueue,
    turn_attempt_run,
    world_budget_set,
    world_create,
)

pytestmark = pytest.mark.django_db

ANT_OK: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "The ant walks east to the crumb.",
        "effects": [
            {"op": "set_entity_state", "entity_id": "ant", "state": "beside the crumb, hungry"},
            {"op": "append_entity_memory", "entity_id": "ant", "content": "I walked to the crumb."},
        ],
    },
}
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 200,
    "total_tokens": 1200,
    "prompt_tokens_details": {"cached_tokens": 400},
}
URL_ENV, MODEL = "CHUKWA_LLM_BASE_URL", "gpt-4o-mini"  # what ant_on_plate's source names


def add_price(
    input_: str = "0.15", output: str = "0.60", cached: str = "0.075", **extra: Any
) -> ModelPrice:
    return model_price_add(
        data={
            "url_env": URL_ENV,
            "model": MODEL,
            "input_per_million": input_,
            "output_per_million": output,
            "cached_input_per_million": cached,
            **extra,
        }
    )


def ant_ok(usage: dict[str, Any] | None = USAGE) -> Reply:
    return Reply(text=json.dumps(ANT_OK), usage=usage)


def no_usage_stream() -> Reply:
    """A stream whose provider reports no usage: Chukwa estimates it."""
    text = json.dumps(ANT_OK)
    events = [
        {"choices": [{"index": 0, "delta": {"content": text}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return Reply(raw_body=body.encode())


@pytest.fixture
def reader(client: Client, reader_user: Any) -> Client:
    client.force_login(reader_user)
    return client


@pytest.fixture(autouse=True)
def _one_call_per_turn(request: pytest.FixtureRequest) -> None:
    """These tests read one generation's figures: the backend is already checked, so no
    conformance check adds its own (tests/worlds_app/test_probe_totals.py counts those)."""
    if "scripted_llm" in request.fixturenames:
        llm = request.getfixturevalue("scripted_llm")
        backend_checked(llm.base_url, MODEL)


def only_call(attempt: TurnAttempt) -> LlmCall:
    return LlmCall.objects.get(invocation__attempt=attempt)


# --- cost -------------------------------------------------------------------------------------


def test_cost_is_usage_times_price_exactly(scripted_llm: ScriptedLLM) -> None:
    add_price(valid_from=(timezone.now() - timedelta(days=30)).isoformat(), input_="9")
    price = add_price()
    add_price(valid_from=(timezone.now() + timedelta(days=1)).isoformat(), input_="99")
    create_world("ant_on_plate", "costed")
    scripted_llm.script(ant_ok())
    attempt = run_turn("costed")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason

    call = only_call(attempt)
    # 600 fresh * 0.15 + 400 cached * 0.075 + 200 out * 0.60, per million
    assert call.cost == Decimal("0.00024")
    assert call.price_id == price.pk  # the row in force, not the older or the future one
    assert call.cost_estimated is False
    assert call.usage_source == "provider"

    totals = attempt_get(attempt_id=str(attempt.pk))["cost"]
    assert totals["total"] == Decimal("0.00024")
    assert totals["unknown_calls"] == 0
    assert totals["tokens"] == {"prompt": 1000, "completion": 200, "cached": 400, "total": 1200}
    assert turn_get(slug="costed", number=1)["cost"]["total"] == Decimal("0.00024")
    assert world_get(slug="costed")["cost"]["total"] == Decimal("0.00024")


def test_no_price_is_unknown_never_zero(
    scripted_llm: ScriptedLLM, reader_client: APIClient
) -> None:
    create_world("ant_on_plate", "unpriced")
    scripted_llm.script(ant_ok())
    attempt = run_turn("unpriced")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason

    call = only_call(attempt)
    assert call.cost is None and call.price_id is None
    body = reader_client.get(f"/api/attempts/{attempt.pk}/").json()
    assert body["cost"]["total"] is None
    assert body["cost"]["unknown_calls"] == 1
    assert body["cost"]["tokens"]["total"] == 1200
    assert body["source_invocations"][0]["cost"] is None
    world = reader_client.get("/api/worlds/unpriced/").json()
    assert world["cost"]["total"] is None and world["cost"]["unknown_calls"] == 1
    assert reader_client.get(f"/api/llm-calls/{call.pk}/").json()["cost"] is None


def test_estimated_usage_marks_the_cost_estimated(scripted_llm: ScriptedLLM) -> None:
    add_price()
    create_world("ant_on_plate", "estimated")
    scripted_llm.script(no_usage_stream())
    attempt = run_turn("estimated")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason

    call = only_call(attempt)
    assert call.usage_source == "estimated"
    assert call.cost_estimated is True
    assert call.prompt_tokens and call.completion_tokens
    expected = (
        call.prompt_tokens * Decimal("0.15") + call.completion_tokens * Decimal("0.60")
    ) / Decimal(1_000_000)
    assert call.cost == expected
    assert attempt_get(attempt_id=str(attempt.pk))["cost"]["estimated_calls"] == 1


# --- budgets ----------------------------------------------------------------------------------


def budget_world(slug: str, budget: dict[str, Any]) -> World:
    scenario_hash = scenario_assemble(data=fixture_body("ant_on_plate"))["scenario_hash"]
    return world_create(
        data={"slug": slug, "scenario_ref": {"hash": scenario_hash}, "budget": budget}  # type: ignore[typeddict-item]
    )


def test_a_budget_smaller_than_one_call_sends_nothing(scripted_llm: ScriptedLLM) -> None:
    budget_world("tight", {"max_tokens_per_turn": 500})  # max_tokens alone is 800
    attempt = run_turn("tight")

    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "budget_exhausted"
    assert "max_tokens_per_turn = 500" in attempt.failure_reason
    assert "max_tokens 800" in attempt.failure_reason
    assert "it was not sent" in attempt.failure_reason
    assert scripted_llm.requests == [] and scripted_llm.probes == []  # no byte sent
    (inv,) = SourceInvocation.objects.filter(attempt=attempt)
    assert inv.failure_class == "budget_exhausted"
    assert inv.llm_call.cost == 0 and inv.llm_call.usage_source == "not_sent"
    assert World.objects.get(slug="tight").current_turn == 0


def test_a_cost_budget_without_a_price_fails_closed(scripted_llm: ScriptedLLM) -> None:
    budget_world("unbounded", {"max_cost_total": "5"})
    attempt = run_turn("unbounded")
    assert attempt.failure_step == "budget_exhausted"
    assert "max_cost_total" in attempt.failure_reason and "no price" in attempt.failure_reason
    assert scripted_llm.requests == []


def test_a_source_without_max_tokens_fails_closed(scripted_llm: ScriptedLLM) -> None:
    body = fixture_body("ant_on_plate")
    source = body["cognition_profiles"]["ant"]["inline"]["workflow"]["inline"]["nodes"][0][
        "llm_source_ref"
    ]["inline"]
    del source["interface"]["params"]["max_tokens"]
    scenario_hash = scenario_assemble(data=body)["scenario_hash"]
    world_create(
        data={
            "slug": "uncapped",
            "scenario_ref": {"hash": scenario_hash},
            "budget": {"max_tokens_total": 1_000_000},
        }
    )
    attempt = run_turn("uncapped")
    assert attempt.failure_step == "budget_exhausted"
    assert "sets no max_tokens" in attempt.failure_reason
    assert scripted_llm.requests == []


def test_a_total_budget_stops_a_batch_at_the_right_turn(scripted_llm: ScriptedLLM) -> None:
    usage = {"prompt_tokens": 2000, "completion_tokens": 200, "total_tokens": 2200}
    # The prompt estimate of this scenario's first call, from a world without a budget.
    create_world("ant_on_plate", "probe")
    scripted_llm.script(ant_ok(usage))
    run_turn("probe")
    (request,) = scripted_llm.requests
    estimate = prompt_estimate(request["messages"], request.get("response_format"))
    # Turns 1-3 may start (2 * 2200 spent + estimate + 800 ≤ limit), turn 4 may not
    # (3 * 2200 + estimate + 800 > limit): the prompt grows by a memory line or two per turn.
    limit = 2 * 2200 + 800 + estimate + 1000
    budget_world("batch", {"max_tokens_total": limit})
    scripted_llm.script(*[ant_ok(usage) for _ in range(5)])

    ids = turn_attempt_enqueue(slug="batch", count=5)["attempt_ids"]
    for attempt_id in ids:
        turn_attempt_run(attempt_id=attempt_id, owner="test")
    statuses = [TurnAttempt.objects.get(pk=pk) for pk in ids]
    assert [a.status for a in statuses] == ["committed"] * 3 + ["failed", "cancelled"]
    fourth = statuses[3]
    assert fourth.failure_step == "budget_exhausted"
    assert f"max_tokens_total = {limit}" in fourth.failure_reason
    assert "has spent 6600 tokens" in fourth.failure_reason
    assert len(scripted_llm.requests) == 1 + 3  # the probe world's and three turns'
    assert World.objects.get(slug="batch").current_turn == 3
    assert world_get(slug="batch")["cost"]["tokens"]["total"] == 3 * 2200


def test_a_cost_budget_per_turn_counts_this_attempt(scripted_llm: ScriptedLLM) -> None:
    add_price(input_="1000", output="1000", cached="1000")  # 0.001 per token
    # prompt estimate + 800 max_tokens at 0.001 each exceeds 0.5
    budget_world("pricey", {"max_cost_per_turn": "0.5"})
    attempt = run_turn("pricey")
    assert attempt.failure_step == "budget_exhausted"
    assert "max_cost_per_turn = 0.5" in attempt.failure_reason
    assert scripted_llm.requests == []
    # Raising the budget lets the next attempt run; the change is kept as history.
    world_budget_set(slug="pricey", budget={"max_cost_per_turn": "10"}, set_by="op")
    scripted_llm.script(ant_ok())
    attempt = run_turn("pricey")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    assert only_call(attempt).cost == Decimal("1.2")


# --- CLI and pages ----------------------------------------------------------------------------


def test_cli_budget_options_and_cost_per_turn(scripted_llm: ScriptedLLM) -> None:
    add_price()
    scenario_hash = scenario_assemble(data=fixture_body("ant_on_plate"))["scenario_hash"]
    out = StringIO()
    call_command(
        "create_world",
        "cli",
        "--scenario-hash",
        scenario_hash,
        "--budget-max-tokens-total",
        "50000",
        "--budget-max-cost-per-turn",
        "0.01",
        stdout=out,
    )
    assert "budget max_tokens_per_turn" not in out.getvalue()
    assert "budget max_tokens_total 50000, max_cost_per_turn 0.01" in out.getvalue()
    budget = WorldBudget.objects.get(world__slug="cli")
    assert (budget.max_tokens_total, budget.max_cost_per_turn) == (50000, Decimal("0.01"))
    assert budget.set_by == "cli"
    scripted_llm.script(ant_ok())
    assert run_turn("cli").status == AttemptStatus.COMMITTED
    line = summarize_turn("cli", 1)
    assert line.endswith("— cost 0.00024 (1200 tokens)"), line


def test_cli_shows_unknown_cost_never_zero(scripted_llm: ScriptedLLM) -> None:
    create_world("ant_on_plate", "cli-unpriced")
    scripted_llm.script(ant_ok())
    run_turn("cli-unpriced")
    assert summarize_turn("cli-unpriced", 1).endswith("— cost unknown (1200 tokens)")


def test_pages_show_costs(scripted_llm: ScriptedLLM, reader: Client) -> None:
    add_price()
    create_world("ant_on_plate", "paged")
    scripted_llm.script(ant_ok())
    attempt = run_turn("paged")
    page = reader.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "cost 0.00024" in page  # the generation's row
    assert '<div class="n sm" title="0 call(s) without a price">0.00024</div>' in page
    world_page = reader.get("/worlds/paged/").content.decode()
    assert "0.00024 · 1200" in world_page
    assert "cost 0.00024" in world_page  # turn 1 in the history
    call_page = reader.get(f"/llm-calls/{only_call(attempt).pk}/").content.decode()
    assert '<div class="n sm">0.00024</div>' in call_page


def test_pages_show_unknown_cost(scripted_llm: ScriptedLLM, reader: Client) -> None:
    create_world("ant_on_plate", "paged-unknown")
    scripted_llm.script(ant_ok())
    attempt = run_turn("paged-unknown")
    page = reader.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "cost unknown" in page
    assert '<div class="n sm" title="1 call(s) without a price">unknown</div>' in page
    assert "unknown · 1200" in reader.get("/worlds/paged-unknown/").content.decode()
