"""An experiment's budget and its estimate (docs/experiments.md, "Estimate and budget").

The budget is one total over all the experiment's worlds and judges, reserved in PostgreSQL
before every LLM call and settled to the real spend when the call ends: threads on their own
connections racing for it never take more than it holds, and two worker processes (standing in
for two machines) running an experiment on a scripted model stop it without overshooting —
the refused call is not sent, names the experiment's budget, and the experiment ends
``failed`` with its queued turns cancelled. The estimate prices a design from its sources and
the price table, writing nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from cognition_app.budgets import Reservation
from cognition_app.models import LlmCall, ModelPrice, SourceInvocation
from cognition_app.sources.retry import RATE_LIMITED_TRIES
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.support.worlds import backend_checked, fixture_body, workflow_of
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import (
    AttemptStatus,
    BudgetReservation,
    Experiment,
    ExperimentLedger,
    TurnAttempt,
    World,
)
from worlds_app.services import budget_settler
from worlds_app.services.budget_settler import settle_now
from worlds_app.services.experiment_budget import experiment_budget
from worlds_app.services.experiments import experiment_create

API_KEY = "test-secret-key"
MAX_TOKENS = 100
USAGE = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}


def _scenario(
    max_tokens: int | None = MAX_TOKENS, model: str = "scripted-model", **iface_extra: Any
) -> str:
    """ant_on_plate (one agent, an LLM tool loop) on the scripted model."""
    body = fixture_body("ant_on_plate")
    node = workflow_of(body, "ant")["nodes"][0]
    iface = node["llm_source_ref"]["inline"]["interface"]
    iface["model"] = model
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0} | ({"max_tokens": max_tokens} if max_tokens else {})
    iface.update(iface_extra)
    return str(scenario_assemble(data=body)["scenario_hash"])


def _metric() -> str:
    return str(
        metric_put(
            content={
                "version": 1,
                "label": "turn_number",
                "kind": "expression",
                "aggregate": "mean",
                "expression": "turn",
            }
        )["hash"]
    )


def _design(slug: str, scenario: str, **extra: Any) -> dict[str, Any]:
    return {
        "slug": slug,
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "again", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 3,
        "turns": 3,
        "metrics": [{"hash": _metric()}],
        # every call sent and spent: the budget is what these tests are about (reuse would
        # answer the identical arms' calls from the record, spending nothing)
        "reuse": "off",
        **extra,
    }


# --- the reservation itself -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_racing_reservations_never_take_more_than_the_budget_holds() -> None:
    experiment = experiment_create(
        data=_design(
            "race", _scenario(), budget={"max_tokens_total": 1000, "max_cost_total": "0.5"}
        )
    )
    budget = experiment_budget(experiment.pk)
    assert budget is not None
    start = threading.Barrier(16)
    outcomes: list[str | None] = []
    granted_ids: list[UUID] = []

    def reserve() -> None:
        try:
            start.wait()
            reservation_id = uuid4()
            refusal = budget.reserve(
                tokens=90, cost=Decimal("0.01"), reservation_id=reservation_id, attempt_id=None
            )
            outcomes.append(refusal)
            if refusal is None:
                granted_ids.append(reservation_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=reserve) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    granted = [o for o in outcomes if o is None]
    refused = [o for o in outcomes if o is not None]
    assert (len(granted), len(refused)) == (11, 5)  # 11 by 90 = 990 fits 1000; 12 would not
    row = ExperimentLedger.objects.get(pk=experiment.pk)
    assert (row.reserved_tokens, row.reserved_cost) == (990, Decimal("0.11"))
    # one reservation row per granted call, on the ledger's row, not the experiment's
    assert set(BudgetReservation.objects.values_list("pk", flat=True)) == set(granted_ids)
    assert Experiment.objects.get(pk=experiment.pk).budget_exhausted_at is not None
    assert "budget max_tokens_total = 1000 of experiment 'race'" in refused[0], refused[0]
    # the first refusal stopped the experiment: its queued turns are cancelled, with the reason
    queued = TurnAttempt.objects.filter(world__experiment=experiment)
    assert queued.count() == 18
    assert set(queued.values_list("status", flat=True)) == {AttemptStatus.CANCELLED}
    assert queued.first().failure_reason.startswith("budget_exhausted: budget max_tokens_total")

    # settling (on the settler thread) gives the reservation back and counts what its call's
    # own row says it spent (no row here: nothing); one settled already counts nothing again
    budget.settle(
        reserved=Reservation(90, Decimal("0.01"), shared=True, id=granted_ids[0]),
        tokens=70,
        cost=Decimal(0),
    )
    budget_settler.flush()
    row.refresh_from_db()
    assert (row.reserved_tokens, row.spent_tokens) == (900, 0)
    assert settle_now([granted_ids[0]]) == 0
    assert settle_now([granted_ids[1], granted_ids[2]]) == 2
    row.refresh_from_db()
    assert (row.reserved_tokens, row.reserved_cost, row.spent_tokens) == (720, Decimal("0.08"), 0)
    assert BudgetReservation.objects.count() == 8


# --- two workers, one budget ----------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def _final(narration: str) -> str:
    return json.dumps(
        {"kind": "final_patch", "tool_call": None, "patch": {"narration": narration, "effects": []}}
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_two_workers_stop_an_experiment_at_its_budget_without_overshooting(
    llm: ScriptedLLM,
) -> None:
    # every call: 70 tokens spent; each reserves its prompt estimate + max_tokens (100)
    llm.route(lambda request: Reply(text=_final("The ant waits."), usage=USAGE, delay_s=0.2))
    limit = 1000
    queue = f"budget-{os.getpid()}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }
    scenario = _scenario()
    # the calls counted below are the generations (the checks' spend: test_probe_totals)
    backend_checked(llm.base_url, "scripted-model")
    with (
        worker_process(f"{queue}-a", env=env, queue=queue),
        worker_process(f"{queue}-b", env=env, queue=queue),
        routed_to(queue),
    ):
        experiment_create(data=_design("pricey", scenario, budget={"max_tokens_total": limit}))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = experiment_get(slug="pricey")
            if state["status"] != "running":
                break
            time.sleep(0.3)
    worlds = World.objects.filter(experiment__slug="pricey")
    calls = LlmCall.objects.filter(invocation__world__in=worlds)
    sent = calls.exclude(usage_source="not_sent")
    spent = sum((c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in sent)
    row = ExperimentLedger.objects.get(experiment__slug="pricey")
    assert state["status"] == "failed", state
    # never overshot, and the ledger agrees with the calls' own rows
    assert spent <= limit
    assert (row.spent_tokens, row.reserved_tokens) == (spent, 0)
    assert not BudgetReservation.objects.exists()
    assert state["budget"]["spent_tokens"] == spent
    # both workers ran turns, and the model saw exactly the calls that were sent
    owners = set(
        TurnAttempt.objects.filter(world__in=worlds)
        .exclude(lease_owner="")
        .values_list("lease_owner", "status")
    )
    assert len({owner for owner, _ in owners}) == 2, owners
    assert len(llm.requests) == sent.count() and 0 < sent.count() < 18
    # the refusal: not sent, naming the experiment's budget; the rest cancelled with its reason
    refused = SourceInvocation.objects.filter(
        world__in=worlds, failure_class="budget_exhausted"
    ).first()
    assert refused is not None
    assert "budget max_tokens_total = 1000 of experiment 'pricey'" in refused.failure_message
    assert Experiment.objects.get(slug="pricey").budget_exhausted_at is not None
    statuses = set(TurnAttempt.objects.filter(world__in=worlds).values_list("status", flat=True))
    assert statuses <= {"committed", "failed", "cancelled"}
    assert "cancelled" in statuses and "failed" in statuses
    assert state["failed_worlds"]


# --- the estimate ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_estimate_prices_a_design_and_writes_nothing(operator_client: APIClient) -> None:
    scenario = _scenario()
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="scripted-model",
        input_per_million=Decimal("1"),
        cached_input_per_million=Decimal("0.5"),
        output_per_million=Decimal("4"),
        valid_from=timezone.now() - timezone.timedelta(days=1),
    )
    design = _design("priced", scenario, budget={"max_cost_total": "0.01"})
    answer = operator_client.post("/api/experiments/estimate/", design, format="json")
    assert answer.status_code == 200, answer.json()
    estimate = answer.json()
    # 6 worlds by 3 turns, one agent whose tool loop makes at most 3 generations
    # (max_generation_attempts 3 + max_tool_calls 0), no judge; each may be sent as many times
    # as a 429 allows (no retry policy), but only the one try that is answered spends tokens
    assert (estimate["worlds"], estimate["turns_per_world"]) == (6, 3)
    calls = 54 * RATE_LIMITED_TRIES
    assert estimate["calls"] == {"agents": calls, "judges": 0, "total": calls}
    assert estimate["tokens"]["completion"] == 54 * MAX_TOKENS
    prompt = estimate["tokens"]["prompt"]
    # the transcript grows by one completion cap per earlier round: 0 + 100 + 200 per turn
    assert (prompt - 18 * 300) % 54 == 0 and prompt > 54 * 200
    expected = (Decimal(prompt) * 1 + Decimal(54 * MAX_TOKENS) * 4) / 1_000_000
    assert Decimal(estimate["cost"]) == expected.quantize(Decimal("1e-6"))
    assert estimate["within_budget"] is (expected <= Decimal("0.01"))
    assert estimate["unpriced"] == [] and estimate["unbounded"] == []
    assert not Experiment.objects.exists() and not World.objects.exists()

    # no price: the cost is unknown, never 0; no max_tokens: unbounded
    bare = _design("bare", _scenario(max_tokens=None, model="unpriced-model"))
    estimate = operator_client.post("/api/experiments/estimate/", bare, format="json").json()
    assert estimate["cost"] is None
    assert estimate["unpriced"] == ["(CHUKWA_LLM_BASE_URL, unpriced-model)"]
    assert estimate["unbounded"] == ["(CHUKWA_LLM_BASE_URL, unpriced-model)"]
    assert estimate["within_budget"] is None

    # a bad design is the same 400 as creating it; nothing written
    answer = operator_client.post(
        "/api/experiments/estimate/",
        {**design, "budget": {"max_tokens_per_turn": 5}},
        format="json",
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (
        "invalid_budget",
        "budget.max_tokens_per_turn",
    )
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_a_judge_is_counted_once_per_measured_turn(operator_client: APIClient) -> None:
    scenario = _scenario()
    judge_source = workflow_of(fixture_body("ant_on_plate"), "ant")["nodes"][0]["llm_source_ref"]
    judge_source["inline"]["interface"]["params"] = {"max_tokens": 10}
    judge = metric_put(
        content={
            "version": 1,
            "label": "calm",
            "kind": "llm_judge",
            "aggregate": "mean",
            "source": judge_source,
            "system": "Score how calm the turn was.",
            "user_template": "{{turn}}",
            "scale": {"min": 0, "max": 10},
            "max_generation_attempts": 2,
        }
    )["hash"]
    design = {**_design("judged", scenario), "metrics": [{"hash": judge}]}
    estimate = operator_client.post("/api/experiments/estimate/", design, format="json").json()
    # 6 worlds by 4 measured turns (the baseline too) by 2 generations, each sent as many times
    # as a 429 allows; tokens only on the tries that can spend them (no retry policy: one)
    tries = RATE_LIMITED_TRIES
    assert estimate["calls"]["judges"] == 48 * tries
    assert estimate["calls"]["total"] == (54 + 48) * tries
    assert estimate["tokens"]["completion"] == 54 * MAX_TOKENS + 48 * 10


@pytest.mark.django_db
@pytest.mark.parametrize("retry", [None, {"attempts": 2}, {"attempts": 5}])
def test_the_estimates_bound_counts_the_tries_a_429_may_take(
    operator_client: APIClient, retry: dict[str, int] | None
) -> None:
    """A 429 is tried again up to RATE_LIMITED_TRIES times whatever the source's policy (which
    allows at most as many), each try a request that reserves what it could spend: the bound
    counts the most tries a call can take; its tokens and cost count the tries that can spend
    (the policy's: a 429 is refused before anything is generated)."""
    tries = RATE_LIMITED_TRIES
    billed = (retry or {}).get("attempts", 1)
    scenario = _scenario(**({"retry": retry} if retry else {}))
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="scripted-model",
        input_per_million=Decimal("1"),
        cached_input_per_million=Decimal("0.5"),
        output_per_million=Decimal("4"),
        valid_from=timezone.now() - timezone.timedelta(days=1),
    )
    estimate = operator_client.post(
        "/api/experiments/estimate/", _design("tries", scenario), format="json"
    ).json()
    # 6 worlds by 3 turns by 3 generations, each sent at most ``tries`` times
    assert estimate["calls"]["total"] == 54 * tries
    assert estimate["tokens"]["completion"] == 54 * billed * MAX_TOKENS
    expected = (Decimal(estimate["tokens"]["prompt"]) + Decimal(54 * billed * MAX_TOKENS) * 4) / (
        1_000_000
    )
    assert Decimal(estimate["cost"]) == expected.quantize(Decimal("1e-6"))


@pytest.mark.django_db
def test_a_design_reserves_the_estimate_path_and_rejects_per_turn_limits(
    operator_client: APIClient,
) -> None:
    scenario = _scenario()
    for budget, field in (
        ({"max_cost_per_turn": "1"}, "budget.max_cost_per_turn"),
        ({}, "budget"),
        ({"max_tokens_total": 0}, "budget.max_tokens_total"),
        ({"max_cost_total": "abc"}, "budget.max_cost_total"),
    ):
        answer = operator_client.post(
            "/api/experiments/", _design("capped", scenario, budget=budget), format="json"
        )
        assert answer.status_code == 400, answer.json()
        assert answer.json()["error"]["details"]["field"] == field
    answer = operator_client.post("/api/experiments/", _design("estimate", scenario), format="json")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_slug"
    assert not Experiment.objects.exists() and not World.objects.exists()
    made = operator_client.post(
        "/api/experiments/",
        _design("capped", scenario, budget={"max_cost_total": 2.5, "max_tokens_total": 20000}),
        format="json",
    )
    assert made.status_code == 201, made.json()
    budget = made.json()["budget"]
    assert (budget["max_cost_total"], budget["max_tokens_total"]) == ("2.5000000000", 20000)
    assert (budget["spent_tokens"], budget["reserved_tokens"]) == (0, 0)
    assert made.json()["design"]["budget"] == {"max_cost_total": "2.5", "max_tokens_total": 20000}


def test_settles_coming_in_together_are_written_in_one_statement_and_a_flush_does_not_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The settler waits ``LINGER_SECONDS`` for more settles to write with the first (one
    update of the ledger row for a burst of calls); ``flush`` has it write them at once."""
    batches: list[list[UUID]] = []
    monkeypatch.setattr(budget_settler, "settle_now", lambda ids: batches.append(list(ids)))
    monkeypatch.setattr(budget_settler, "LINGER_SECONDS", 30.0)
    budget_settler.flush()  # nothing of an earlier test's left
    ids = [uuid4() for _ in range(3)]
    for reservation_id in ids:
        budget_settler.settle_later(reservation_id)
    started = time.monotonic()
    budget_settler.flush()
    assert time.monotonic() - started < 20  # not the linger's 30 s
    assert batches == [ids]
