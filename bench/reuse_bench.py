"""What reuse saves (docs/costs.md, "Reuse"): the same experiment — 2 arms x 20 replicates x 5
turns of ant_on_plate (an LLM tool loop) on the scripted OpenAI-compatible model over real HTTP,
priced — run three times on a throwaway database, counting what the model actually received:

1. ``reuse: exact`` on an empty record — the arms of a replicate share a seed, so their turns
   before the treatment's intervention (at turn 3) send identical requests: the first is sent,
   the other answered from the record;
2. ``reuse: off`` — every call sent (the online price);
3. the exact design again (a re-run): everything is recorded, nothing is sent.

The model's every reply differs from the last (a counter), so a request answered from the
record rather than sent shows in what the model received. Turns run in this process, world by
world (the worker's code path, without the queue): single flight between processes is tested in
tests/worlds_app/test_reuse.py, not measured here.

    python bench/reuse_bench.py [--replicates 20] [--turns 5] [--intervention-turn 3]
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

BENCH_DB_NAME = "chukwa_reuse_bench"
BENCH_QUEUE = f"reuse-bench-{os.getpid()}"
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


class Counting:
    """Every reply differs from the last: its narration carries a counter."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, request: dict[str, Any]) -> Any:
        from tests.support.scripted_llm import Reply

        self.n += 1
        patch = {"narration": "The ant waits" + "." * (self.n % 50), "effects": []}
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
    return str(scenario_assemble(data=body)["scenario_hash"])


def _design(slug: str, scenario: str, args: argparse.Namespace, reuse: str) -> dict[str, Any]:
    patch = {
        "narration": "Someone moves the crumb.",
        "effects": [{"op": "set_entity_state", "entity_id": "crumb", "state": "gone."}],
    }
    intervention = {"turn": args.intervention_turn, "note": "the crumb moves", "patch": patch}
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
        "start_time": "2026-05-01T08:00:00+00:00",
        "reuse": reuse,
    }


def _run(slug: str) -> None:
    from worlds_app.models import TurnAttempt
    from worlds_app.services import turn_attempt_run

    queued = (
        TurnAttempt.objects.filter(world__experiment__slug=slug, status="queued")
        .order_by("world__arm", "world__replicate", "seq")
        .values_list("id", flat=True)
    )
    for attempt_id in list(queued):
        outcome = turn_attempt_run(attempt_id=str(attempt_id), owner="bench")
        assert outcome == "committed", (slug, outcome)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--intervention-turn", type=int, default=3)
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
        ModelPrice.objects.create(
            url_env="CHUKWA_LLM_BASE_URL",
            model="scripted-model",
            input_per_million=Decimal("0.15"),
            output_per_million=Decimal("0.60"),
            cached_input_per_million=Decimal("0.075"),
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
        with ScriptedLLM() as llm:
            os.environ["CHUKWA_LLM_BASE_URL"] = llm.base_url
            llm.route(Counting())
            scenario = _scenario()
            rows = []
            # the exact run first, on an empty record; then every call sent; then the exact design again
            for slug, reuse in (("reused", "exact"), ("online", "off"), ("rerun", "exact")):
                before = len(llm.requests)
                started = time.perf_counter()
                experiment_create(data=_design(slug, scenario, args, reuse), created_by="bench")
                _run(slug)
                seconds = time.perf_counter() - started
                state = experiment_get(slug=slug)
                calls = LlmCall.objects.filter(
                    invocation__world__experiment__slug=slug, invocation__kind="llm_generation"
                ).count()
                rows.append(
                    (
                        slug,
                        reuse,
                        calls,
                        len(llm.requests) - before,
                        state["calls_reused"],
                        state["cost"],
                        state["cost_saved"],
                        seconds,
                    )
                )
        worlds = 2 * args.replicates
        print(
            f"2 arms x {args.replicates} replicates x {args.turns} turns ({worlds} worlds); the "
            f"'moved' arm's intervention before turn {args.intervention_turn}, so the arms' "
            f"turns 1..{args.intervention_turn - 1} of a replicate are the same requests"
        )
        header = (
            f"{'run':<8} {'reuse':<6} {'generations':>11} {'requests sent':>13} "
            f"{'reused':>7} {'cost':>10} {'cost saved':>10} {'seconds':>8}"
        )
        print(header)
        print("-" * len(header))
        for slug, reuse, calls, sent, reused, cost, saved, seconds in rows:
            print(
                f"{slug:<8} {reuse:<6} {calls:>11} {sent:>13} {reused:>7} "
                f"{cost!s:>10} {saved!s:>10} {seconds:>8.1f}"
            )
        online_cost = Decimal(str(rows[1][5]))
        for slug, _, _, _, _, cost, _, _ in (rows[0], rows[2]):
            saved = 1 - Decimal(str(cost)) / online_cost if online_cost else Decimal(0)
            print(f"{slug}: {float(saved):.1%} of the online cost saved")
        shared = (args.intervention_turn - 1) * args.replicates
        print(
            f"expected from the design: {shared} turns of the 'moved' arm ask what 'control' "
            f"asked ({shared} of {worlds * args.turns} turns)"
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
