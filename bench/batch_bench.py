"""What batch mode saves (docs/costs.md, "Batch mode"): the same experiment — 2 arms x 20
replicates x 5 turns of ant_on_plate on the scripted OpenAI-compatible model over real HTTP,
its source declaring ``interface.batch``, priced online and at batch prices — run three ways on
a throwaway database, counting what the model actually received:

1. ``online`` (``reuse: off``): every call sent as it comes, at the online price;
2. ``reused`` (``reuse: exact``, online): the arms of a replicate share their turns before the
   treatment's intervention, answered from the record (bench/reuse_bench.py measures it alone);
3. ``batch`` (``mode: batch``, ``reuse: off``): every world's call of a tick goes in one provider
   batch at the batch price; the attempts park meanwhile.

Every reply is a function of its request, sent or batched alike, so what differs between the
runs is only how the calls were sent (each run starts at its own time: no request repeats).

Turns run in this process (the worker's code path, without the queue). In batch mode each tick
runs every world's next attempt until it parks, then sends the batch, which the model holds
``in_progress`` for ``--hold`` seconds before it ends: the worker-seconds held while waiting for
batches are the seconds any attempt was ``running`` during those holds (sampled from the
database), against the seconds the attempts ran at all.

    python bench/batch_bench.py [--replicates 20] [--turns 5] [--hold 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import benchdb  # bench/ is the script's own folder, first on sys.path

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_batch_bench"
BENCH_QUEUE = f"batch-bench-{os.getpid()}"
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
for name, suffix in (
    ("CHUKWA_CELERY_QUEUE", ""),
    ("CHUKWA_CELERY_EXPERIMENT_QUEUE", "-experiments"),
    ("CHUKWA_CELERY_MEASURE_QUEUE", "-measure"),
    ("CHUKWA_CELERY_CONTROL_QUEUE", "-control"),
):
    os.environ[name] = BENCH_QUEUE + suffix
os.environ["CHUKWA_LLM_API_KEY"] = "bench-key"


def reply(request: dict[str, Any]) -> Any:
    """A reply that is a function of the request (its messages' length and last words)."""
    from tests.support.scripted_llm import Reply

    text = json.dumps(request["messages"], sort_keys=True)
    patch = {"narration": "The ant waits" + "." * (len(text) % 50), "effects": []}
    body = json.dumps({"kind": "final_patch", "tool_call": None, "patch": patch})
    return Reply(text=body, usage={"prompt_tokens": 400, "completion_tokens": 60})


def _scenario() -> str:
    from scenarios_app.services import scenario_assemble
    from tests.support.worlds import fixture_body, workflow_of

    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0.7, "max_tokens": 200}
    iface["batch"] = {"api": "openai", "completion_window": "24h"}
    return str(scenario_assemble(data=body)["scenario_hash"])


def _design(slug: str, scenario: str, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    patch = {
        "narration": "Someone moves the crumb.",
        "effects": [{"op": "set_entity_state", "entity_id": "crumb", "state": "gone."}],
    }
    intervention = {"turn": 3, "note": "the crumb moves", "patch": patch}
    return {
        "slug": slug,
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "moved", "scenario_ref": {"hash": scenario}, "interventions": [intervention]},
        ],
        "replicates": args.replicates,
        "turns": args.turns,
        "metrics": [{"label": "turns_run"}],
        "seed": 4242,
        # each run its own start: no run's requests equal another's
        "start_time": extra.pop("start_time"),
        **extra,
    }


def _heads(slug: str) -> list[str]:
    """Each world's next attempt (queued, nothing parked before it)."""
    from worlds_app.models import TurnAttempt

    heads: dict[int, str] = {}
    for world_id, attempt_id, status in (
        TurnAttempt.objects.filter(world__experiment__slug=slug, status__in=["queued", "waiting"])
        .order_by("world_id", "seq")
        .values_list("world_id", "id", "status")
    ):
        if world_id not in heads:
            heads[world_id] = str(attempt_id) if status == "queued" else ""
    return [h for h in heads.values() if h]


def _run_online(slug: str) -> float:
    """Every attempt to its commit; the seconds the attempts ran."""
    from worlds_app.services import turn_attempt_run

    busy = 0.0
    while heads := _heads(slug):
        for attempt_id in heads:
            started = time.perf_counter()
            outcome = turn_attempt_run(attempt_id=attempt_id, owner="bench")
            busy += time.perf_counter() - started
            assert outcome == "committed", (slug, outcome)
    return busy


def _run_batch(slug: str, llm: Any, hold: float) -> tuple[float, float, float, int]:
    """Tick by tick: every world's next attempt until it parks (or commits), then the batch,
    held in progress for ``hold`` seconds. (seconds the attempts ran, seconds batches were
    held, worker-seconds held while a batch was pending, ticks)"""
    from cognition_app.batches import batch_tick
    from worlds_app.models import TurnAttempt
    from worlds_app.services import turn_attempt_run
    from worlds_app.services.batch_mode import batch_resume

    busy = held = waiting_busy = 0.0
    ticks = 0
    while heads := _heads(slug):
        for attempt_id in heads:
            started = time.perf_counter()
            outcome = turn_attempt_run(attempt_id=attempt_id, owner="bench")
            busy += time.perf_counter() - started
            assert outcome in ("waiting", "committed"), (slug, outcome)
        if not TurnAttempt.objects.filter(world__experiment__slug=slug, status="waiting"):
            continue
        llm.script_batches("in_progress")
        batch_tick()  # sent, held by the model
        ticks += 1
        started = time.perf_counter()
        while time.perf_counter() - started < hold:
            running = TurnAttempt.objects.filter(
                world__experiment__slug=slug, status="running"
            ).count()
            time.sleep(0.05)
            waiting_busy += running * 0.05
        held += time.perf_counter() - started
        llm.settle_batches()
        batch_tick()  # the answers written
        batch_resume()
    return busy, held, waiting_busy, ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--hold", type=float, default=0.5, help="seconds a batch stays pending")
    args = parser.parse_args()
    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set (the bench makes its own database)")
        return 2
    benchdb.recreate_database(BENCH_DB_NAME, create=True)
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.utils import timezone

        from cognition_app.models import LlmCall, ModelPrice
        from scenarios_app.services import metric_put
        from tests.support.scripted_llm import ScriptedLLM
        from worlds_app.experiment_selectors import experiment_get
        from worlds_app.services.experiments import experiment_create

        call_command("migrate", verbosity=0)
        price = ModelPrice.objects.create(
            url_env="CHUKWA_LLM_BASE_URL",
            model="scripted-model",
            input_per_million=Decimal("0.15"),
            output_per_million=Decimal("0.60"),
            cached_input_per_million=Decimal("0.075"),
            batch_input_per_million=Decimal("0.075"),
            batch_output_per_million=Decimal("0.30"),
            batch_cached_input_per_million=Decimal("0.0375"),
            valid_from=timezone.now() - timedelta(days=1),
        )
        metric_put(
            content={
                "version": 1,
                "label": "turns_run",
                "kind": "expression",
                "aggregate": "max",
                "expression": "turn",
            }
        )
        rows = []
        with ScriptedLLM() as llm:
            os.environ["CHUKWA_LLM_BASE_URL"] = llm.base_url
            llm.route(reply)
            scenario = _scenario()
            runs = (
                ("online", {"reuse": "off", "start_time": "2026-05-01T08:00:00+00:00"}),
                ("reused", {"reuse": "exact", "start_time": "2026-05-02T08:00:00+00:00"}),
                (
                    "batch",
                    {"reuse": "off", "mode": "batch", "start_time": "2026-05-03T08:00:00+00:00"},
                ),
            )
            for slug, extra in runs:
                sent_before, lines_before = len(llm.requests), len(llm.batch_requests)
                started = time.perf_counter()
                experiment_create(data=_design(slug, scenario, args, **extra), created_by="bench")
                held = waiting_busy = 0.0
                ticks = 0
                if extra.get("mode") == "batch":
                    busy, held, waiting_busy, ticks = _run_batch(slug, llm, args.hold)
                else:
                    busy = _run_online(slug)
                seconds = time.perf_counter() - started
                state = experiment_get(slug=slug)
                calls = LlmCall.objects.filter(
                    invocation__world__experiment__slug=slug,
                    invocation__kind="llm_generation",
                    invocation__replayed_from__isnull=True,
                ).count()
                rows.append(
                    {
                        "run": slug,
                        "calls": calls,
                        "sent": len(llm.requests) - sent_before,
                        "lines": len(llm.batch_requests) - lines_before,
                        "reused": state["calls_reused"],
                        "cost": state["cost"],
                        "ticks": ticks,
                        "busy": busy,
                        "held": held,
                        "waiting_busy": waiting_busy,
                        "seconds": seconds,
                    }
                )
        worlds = 2 * args.replicates
        print(
            f"2 arms x {args.replicates} replicates x {args.turns} turns ({worlds} worlds); "
            f"price per million tokens: online {price.input_per_million}/"
            f"{price.output_per_million}, batch {price.batch_input_per_million}/"
            f"{price.batch_output_per_million} (input/output)"
        )
        header = (
            f"{'run':<7} {'generations':>11} {'sent live':>9} {'batch lines':>11} {'reused':>6} "
            f"{'cost':>12} {'saved':>6} {'ticks':>5} {'worker s':>8} {'batch held s':>12} "
            f"{'worker s while held':>19}"
        )
        print(header)
        print("-" * len(header))
        online_cost = Decimal(str(rows[0]["cost"]))
        for row in rows:
            cost = row["cost"]
            saved = (
                f"{float(1 - Decimal(str(cost)) / online_cost):.1%}"
                if cost is not None and online_cost
                else "n/a"
            )
            print(
                f"{row['run']:<7} {row['calls']:>11} {row['sent']:>9} {row['lines']:>11} "
                f"{row['reused']:>6} {cost!s:>12} {saved:>6} {row['ticks']:>5} "
                f"{row['busy']:>8.1f} {row['held']:>12.1f} {row['waiting_busy']:>19.2f}"
            )
        return 0
    finally:
        from django.db import connections

        connections.close_all()
        benchdb.recreate_database(BENCH_DB_NAME, create=False)
        for suffix in ("", "-experiments", "-measure", "-control"):
            try:
                benchdb.queue_delete(BENCH_QUEUE + suffix)
            except Exception as exc:  # noqa: BLE001 - the broker may be down: nothing to clean
                print(f"queue {BENCH_QUEUE + suffix} not deleted: {exc}")


if __name__ == "__main__":
    sys.exit(main())
