"""The estimate prices the judge calls online and in provider batches side by side when the
judge's source declares ``interface.batch`` (docs/costs.md, "Batch"): at the price table's batch
prices, unknown when the row has none, never the online price."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from cognition_app.models import ModelPrice
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body, workflow_of

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
ONLINE = {"input": Decimal("1"), "cached": Decimal("0.5"), "output": Decimal("4")}
BATCH = {"input": Decimal("0.5"), "cached": Decimal("0.25"), "output": Decimal("2")}


def _scenario() -> str:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["params"] = {"temperature": 0, "max_tokens": 100}
    return str(scenario_assemble(data=body)["scenario_hash"])


def _judge(batch: bool, model: str = "judge-model") -> str:
    interface: dict[str, Any] = {
        "name": "llm_chat_completions",
        "model": model,
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "schema_delivery": "response_format",
        "timeout_ms": 30000,
        "params": {"max_tokens": 50},
    }
    if batch:
        interface["batch"] = {"api": "openai", "completion_window": "24h"}
    return str(
        metric_put(
            content={
                "version": 1,
                "label": "calm",
                "kind": "llm_judge",
                "aggregate": "mean",
                "source": {"inline": {"version": 1, "label": "judge", "interface": interface}},
                "system": "Score how calm the turn was.",
                "user_template": "{{turn}}",
                "scale": {"min": 0, "max": 10},
            }
        )["hash"]
    )


def _expression() -> str:
    content = {
        "version": 1,
        "label": "turn_number",
        "kind": "expression",
        "aggregate": "mean",
        "expression": "turn",
    }
    return str(metric_put(content=content)["hash"])


def _price(model: str, batch: bool) -> None:
    extra = {}
    if batch:
        extra = {
            "batch_input_per_million": BATCH["input"],
            "batch_cached_input_per_million": BATCH["cached"],
            "batch_output_per_million": BATCH["output"],
        }
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model=model,
        input_per_million=ONLINE["input"],
        cached_input_per_million=ONLINE["cached"],
        output_per_million=ONLINE["output"],
        valid_from=timezone.now() - timezone.timedelta(days=1),
        **extra,
    )


def _estimate(client: APIClient, scenario: str, metric: str) -> dict[str, Any]:
    return _design_estimate(client, scenario, metric, None)


def _cost(prices: dict[str, Decimal], prompt: int, completion: int) -> str:
    # the worst case: no prompt token assumed cached, the higher input price
    value = (
        prompt * max(prices["input"], prices["cached"]) + completion * prices["output"]
    ) / 1_000_000
    return format(value.quantize(Decimal("1e-6")), "f")


def test_the_judge_calls_are_priced_online_and_in_batches(operator_client: APIClient) -> None:
    _price("scripted-model", batch=False)
    _price("judge-model", batch=True)
    scenario = _scenario()
    without = _estimate(operator_client, scenario, _expression())
    judged = _estimate(operator_client, scenario, _judge(batch=True))
    # what the judge adds to the bound, priced both ways
    prompt = judged["tokens"]["prompt"] - without["tokens"]["prompt"]
    completion = judged["tokens"]["completion"] - without["tokens"]["completion"]
    assert prompt > 0 and completion > 0
    assert judged["judge_cost"] == {
        "online": _cost(ONLINE, prompt, completion),
        "batch": _cost(BATCH, prompt, completion),
        "batch_declared": True,
    }
    # the total stays the online bound
    total = Decimal(without["cost"]) + Decimal(judged["judge_cost"]["online"])
    assert Decimal(judged["cost"]) == total
    assert Decimal(judged["judge_cost"]["batch"]) < Decimal(judged["judge_cost"]["online"])
    assert without["judge_cost"] == {"online": "0.000000", "batch": None, "batch_declared": False}


def test_no_batch_prices_leave_the_batch_cost_unknown(operator_client: APIClient) -> None:
    _price("scripted-model", batch=False)
    _price("judge-model", batch=False)
    judged = _estimate(operator_client, _scenario(), _judge(batch=True))
    assert judged["judge_cost"]["batch_declared"] is True
    assert judged["judge_cost"]["batch"] is None  # unknown, never the online price
    assert judged["judge_cost"]["online"] is not None
    online = _estimate(operator_client, _scenario(), _judge(batch=False))
    assert online["judge_cost"]["batch_declared"] is False
    assert online["judge_cost"]["batch"] is None


def test_the_form_shows_both_prices(client: Client, operator_user: User) -> None:
    _price("scripted-model", batch=False)
    _price("judge-model", batch=True)
    client.force_login(operator_user)
    scenario, judge = _scenario(), _judge(batch=True)
    form = {
        "slug": "gale",
        "name": "A gale",
        "arm_label": ["control", "treated"],
        "arm_scenario": [scenario, scenario],
        "control": "0",
        "replicates": "2",
        "turns": "2",
        "metrics": [judge],
        "seed": "",
        "max_cost_total": "",
        "max_tokens_total": "",
        "action": "estimate",
    }
    text = client.post("/experiments/new/", form, **HTMX).content.decode()
    assert 'id="estimate-judge-cost"' in text
    assert 'id="estimate-judge-online">' in text and "in provider batches" in text
    online = text.split('id="estimate-judge-online">')[1].split("<")[0]
    batch = text.split('id="estimate-judge-batch">')[1].split("<")[0]
    assert Decimal(batch) < Decimal(online)


# --- a batch-mode design: the agents' calls in batches too -------------------------------------


def _agent_scenario(batch: bool) -> str:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["params"] = {"temperature": 0, "max_tokens": 100}
    if batch:
        iface["batch"] = {"api": "openai", "completion_window": "24h"}
    return str(scenario_assemble(data=body)["scenario_hash"])


def _design_estimate(
    client: APIClient, scenario: str, metric: str, mode: str | None
) -> dict[str, Any]:
    design: dict[str, Any] = {
        "slug": "priced",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "other", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 2,
        "turns": 2,
        "metrics": [{"hash": metric}],
    }
    if mode is not None:
        design["mode"] = mode
    answer = client.post("/api/experiments/estimate/", design, format="json")
    assert answer.status_code == 200, answer.json()
    found: dict[str, Any] = answer.json()
    return found


def _raw(prices: dict[str, Decimal], prompt: int, completion: int) -> Decimal:
    return (
        prompt * max(prices["input"], prices["cached"]) + completion * prices["output"]
    ) / 1_000_000


def _text(value: Decimal) -> str:
    return format(value.quantize(Decimal("1e-6")), "f")


def test_a_batch_mode_design_prices_the_agents_calls_at_the_batch_prices(
    operator_client: APIClient,
) -> None:
    _price("scripted-model", batch=True)
    scenario = _agent_scenario(batch=True)
    found = _design_estimate(operator_client, scenario, _expression(), "batch")
    prompt, completion = found["tokens"]["prompt"], found["tokens"]["completion"]
    assert prompt > 0 and completion > 0 and found["calls"]["judges"] == 0
    # every call is an agent's, of a source declaring batch: all of it at the batch prices
    assert found["batch_cost"] == {
        "mode": "batch",
        "online": _text(_raw(ONLINE, prompt, completion)),
        "batch": _text(_raw(BATCH, prompt, completion)),
        "batch_declared": True,
        "calls_batched": found["calls"]["total"],
    }
    assert found["cost"] == found["batch_cost"]["online"]  # cost stays the online bound
    # the same design online: the agents' calls are sent live, nothing goes into a batch
    online = _design_estimate(operator_client, scenario, _expression(), None)
    assert online["batch_cost"] == {
        "mode": "online",
        "online": found["cost"],
        "batch": None,
        "batch_declared": False,
        "calls_batched": 0,
    }


def test_batch_mode_sends_a_source_without_batch_live_at_the_online_price(
    operator_client: APIClient,
) -> None:
    _price("scripted-model", batch=True)
    _price("judge-model", batch=True)
    scenario = _agent_scenario(batch=False)
    without = _design_estimate(operator_client, scenario, _expression(), "batch")
    judged = _design_estimate(operator_client, scenario, _judge(batch=True), "batch")
    agents = (without["tokens"]["prompt"], without["tokens"]["completion"])
    judge = (
        judged["tokens"]["prompt"] - agents[0],
        judged["tokens"]["completion"] - agents[1],
    )
    assert judge[0] > 0 and judge[1] > 0
    # the agents' calls live at the online prices, the judge's in batches at the batch prices
    assert judged["batch_cost"]["batch"] == _text(_raw(ONLINE, *agents) + _raw(BATCH, *judge))
    assert judged["batch_cost"]["online"] == _text(_raw(ONLINE, *agents) + _raw(ONLINE, *judge))
    assert judged["batch_cost"]["calls_batched"] == judged["calls"]["judges"] > 0
    assert judged["judge_cost"]["batch"] == _text(_raw(BATCH, *judge))
    assert without["batch_cost"]["batch_declared"] is False
    assert without["batch_cost"]["batch"] is None


def test_batch_mode_with_no_batch_prices_leaves_the_batch_cost_unknown(
    operator_client: APIClient,
) -> None:
    _price("scripted-model", batch=False)
    found = _design_estimate(operator_client, _agent_scenario(batch=True), _expression(), "batch")
    assert found["batch_cost"]["batch_declared"] is True
    assert found["batch_cost"]["batch"] is None  # unknown, never the online price
    assert found["batch_cost"]["online"] is not None
    assert found["batch_cost"]["online"] == found["cost"]


def test_a_batch_mode_design_gives_no_latency_time(operator_client: APIClient) -> None:
    _price("scripted-model", batch=True)
    scenario = _agent_scenario(batch=True)
    found = _design_estimate(operator_client, scenario, _expression(), "batch")
    assert found["seconds"] is None
    basis = found["seconds_basis"]
    assert "completion window (24h)" in basis and "not by latency" in basis
    # every call batched, each world the same: its batched calls bound its ticks
    per_world = found["calls"]["total"] // found["worlds"]
    assert f"at most {per_world} ticks per world" in basis
    online = _design_estimate(operator_client, scenario, _expression(), None)
    assert "completion window" not in online["seconds_basis"]
    # batch mode where no call goes into a batch (no source declares it) runs as online does
    unbatched = _design_estimate(
        operator_client, _agent_scenario(batch=False), _expression(), "batch"
    )
    assert unbatched["batch_cost"]["calls_batched"] == 0
    assert unbatched["seconds_basis"].startswith("batch mode, but no call goes into a batch")
    assert "completion window" not in unbatched["seconds_basis"]


def test_the_form_shows_the_whole_design_both_ways(client: Client, operator_user: User) -> None:
    _price("scripted-model", batch=True)
    client.force_login(operator_user)
    scenario = _agent_scenario(batch=True)
    form = {
        "slug": "gale",
        "name": "A gale",
        "arm_label": ["control", "treated"],
        "arm_scenario": [scenario, scenario],
        "control": "0",
        "replicates": "2",
        "turns": "2",
        "metrics": [_expression()],
        "seed": "",
        "max_cost_total": "",
        "max_tokens_total": "",
        "reuse": "exact",
        "mode": "batch",
        "action": "estimate",
    }
    text = client.post("/experiments/new/", form, **HTMX).content.decode()
    assert 'id="estimate-batch-cost"' in text and "in batch mode" in text
    online = text.split('id="estimate-design-online">')[1].split("<")[0]
    batch = text.split('id="estimate-design-batch">')[1].split("<")[0]
    assert Decimal(batch) < Decimal(online)
    assert 'id="estimate-time">set by batches<' in text
    assert "completion window" in text
    form["mode"] = "online"
    text = client.post("/experiments/new/", form, **HTMX).content.decode()
    assert 'id="estimate-batch-cost"' not in text


def test_the_command_prints_the_batch_cost(tmp_path: Path, operator_client: APIClient) -> None:
    _price("scripted-model", batch=True)
    scenario = _agent_scenario(batch=True)
    metric = _expression()
    found = _design_estimate(operator_client, scenario, metric, "batch")
    design = {
        "slug": "printed",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "other", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 2,
        "turns": 2,
        "metrics": [{"hash": metric}],
        "mode": "batch",
    }
    path = tmp_path / "design.json"
    path.write_text(json.dumps(design))
    out = io.StringIO()
    call_command("run_experiment", str(path), "--estimate", stdout=out)
    text = out.getvalue()
    batched = found["batch_cost"]
    assert (
        f"cost at most in batch mode with batches: {batched['batch']} "
        f"({batched['calls_batched']} calls in provider batches)"
    ) in text
    assert "time: unknown (batch mode:" in text
