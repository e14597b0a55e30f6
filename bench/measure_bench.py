"""Measurement benchmark: what expression metrics cost per metric-turn.

Run with ``.venv/bin/python bench/measure_bench.py [--agents 10] [--turns 40]`` from the project
folder; DATABASE_URL must be unset. It (re)creates the throwaway database
``chukwa_measure_bench`` on the embedded PostgreSQL server, migrates it and drops it at the end.
It runs a rule-policy world (``bench/scale_worlds.py``: N agents, rooms of 20 agents and 10
props) for T turns in this process, then measures it with five expression metrics the way the
measure worker does (``worlds_app.services.measurements.world_measure``), three times on fresh
copies of the metrics. Printed: the turn views' read per turn, the expressions' evaluation per
metric-turn, the whole measuring (views, evaluation, the rows' insert) per metric-turn, and
measuring again (nothing missing, nothing written). The exit status is 1 if the whole measuring
costs more than the target per metric-turn.

Then (skipped with ``--skip-judge``) the judge's overhead beside an LLM turn's, in the same run,
against the scripted zero-latency model in a child process (``llm_overhead_scripted.py``): a
one-agent LLM world (``llm_overhead_world.py``) runs J turns (``--judge-turns``, after 3 of
warm-up), each timed whole in-process (one generation of a 400-character patch, the turn's rows,
its commit); then a judge metric on the same source measures each of its turns (one judge call
of a 60-character score per turn: the prompts from the turn view, the traced generation, the
check, the measurement row). Printed: ms per LLM turn and ms per judge call (medians over the
calls' own invocation rows and the whole measuring divided by the calls).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import benchdb  # bench/ is the script's own folder, first on sys.path
from scale_worlds import rule_scenario

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_measure_bench"
# Set before Django loads its settings (read once, at import).
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
TARGET_MS = 2.0
ROUNDS = 3
EXPRESSIONS = {
    "patched": "length(patches) > `0`",
    "markings": "length(patches[?contains(narration, 'marks')])",
    "first_resting": "entities.a0000.state == 'resting'",
    "poking": "length(values(entities)[?kind=='agent' && state=='poking'])",
    "calls_ok": "length(calls[?status=='succeeded'])",
}


def _metrics(round_: int) -> list[str]:
    """Fresh metrics for a round (another label: another hash, nothing measured yet)."""
    from scenarios_app.services import metric_put

    return [
        metric_put(
            content={
                "version": 1,
                "label": f"{label}-{round_}",
                "kind": "expression",
                "aggregate": "sum",
                "expression": text,
            }
        )["hash"]
        for label, text in EXPRESSIONS.items()
    ]


def _judge_part(turns: int) -> None:
    """The judge's overhead per call beside an LLM turn's (see the module's docstring)."""
    from llm_overhead_scripted import ChildProcessServer
    from llm_overhead_world import WORLD_SLUG, make_world, patch_reply

    from cognition_app.models import InvocationKind, SourceInvocation
    from scenarios_app.services import metric_put
    from worlds_app.models import World
    from worlds_app.services import turn_attempt_enqueue, turn_attempt_run
    from worlds_app.services.measurements import world_measure

    server = ChildProcessServer()
    os.environ["CHUKWA_LLM_BASE_URL"] = server.base_url
    os.environ["CHUKWA_LLM_API_KEY"] = "bench-judge-key"
    try:
        make_world()
        warm_up = 3
        turn_ms: list[float] = []
        for index in range(warm_up + turns):
            server.script(patch_reply(400))
            (attempt_id,) = turn_attempt_enqueue(slug=WORLD_SLUG)["attempt_ids"]
            started = time.perf_counter()
            assert turn_attempt_run(attempt_id=attempt_id, owner="bench") == "committed"
            if index >= warm_up:
                turn_ms.append((time.perf_counter() - started) * 1000)
        world = World.objects.get(slug=WORLD_SLUG)
        source_hash = (
            SourceInvocation.objects.filter(world=world, kind=InvocationKind.LLM_GENERATION)
            .values_list("source_hash", flat=True)
            .first()
        )
        judge = metric_put(
            content={
                "version": 1,
                "label": "bench_judge",
                "kind": "llm_judge",
                "aggregate": "mean",
                "source": {"hash": source_hash},
                "system": "You rate how plausible one turn of a simulation is.",
                "user_template": "The turn:\n{{turn.patches}}\nRate it from 1 to 5.",
                "scale": {"min": 1, "max": 5},
            }
        )["hash"]
        calls = world.current_turn + 1
        for _ in range(calls):
            server.script('{"score": 4, "rationale": "it follows from the turn before"}')
        started = time.perf_counter()
        done = world_measure(world_id=world.pk, metric_hashes=[judge])
        whole_ms = (time.perf_counter() - started) * 1000
        assert done["written"] == calls, done
        own = list(
            SourceInvocation.objects.filter(world=world, kind=InvocationKind.JUDGE).values_list(
                "duration_ms", flat=True
            )
        )
        status = server.status()
        assert len(own) == calls and not status["failures"], (len(own), calls, status)
        print(
            f"\njudge overhead beside an LLM turn (scripted model at 0 ms, one agent, "
            f"{turns} timed turns, {calls} judge calls):"
        )
        print(
            f"  LLM turn, whole in-process (one generation): median "
            f"{statistics.median(turn_ms):.2f} ms"
        )
        print(
            f"  judge call, its invocation row: median {statistics.median(own):.1f} ms; "
            f"the whole measuring per call {whole_ms / calls:.2f} ms"
        )
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--judge-turns", type=int, default=30)
    parser.add_argument("--skip-judge", action="store_true")
    args = parser.parse_args()
    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set (the bench makes its own database)")
        return 2
    benchdb.recreate_database(BENCH_DB_NAME, create=True)
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from chukwa_core.metric_expression import compile_expression
        from chukwa_core.metric_values import evaluate
        from scenarios_app.services import scenario_assemble
        from worlds_app.models import Measurement, World
        from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create
        from worlds_app.services.measurements import world_measure
        from worlds_app.turn_view import turn_views

        call_command("migrate", verbosity=0)
        scenario = scenario_assemble(data=rule_scenario(args.agents, "measure_bench"))
        world_create(data={"slug": "measured", "scenario_ref": {"hash": scenario["scenario_hash"]}})
        started = time.perf_counter()
        for attempt_id in turn_attempt_enqueue(slug="measured", count=args.turns)["attempt_ids"]:
            assert turn_attempt_run(attempt_id=attempt_id, owner="bench") == "committed"
        print(
            f"{args.agents} rule agents, {args.turns} turns run in "
            f"{time.perf_counter() - started:.1f} s; {len(EXPRESSIONS)} expression metrics"
        )
        world = World.objects.get(slug="measured")
        numbers = range(world.current_turn + 1)
        metric_turns = len(numbers) * len(EXPRESSIONS)

        reads, evals, whole, again = [], [], [], []
        for round_ in range(ROUNDS):
            started = time.perf_counter()
            views = turn_views(world=world, numbers=numbers)
            reads.append((time.perf_counter() - started) * 1000 / len(views))
            compiled = [compile_expression(text, "expression") for text in EXPRESSIONS.values()]
            started = time.perf_counter()
            outcomes = [evaluate(c, views[n]) for c in compiled for n in numbers]
            evals.append((time.perf_counter() - started) * 1000 / metric_turns)
            assert all(o.error_code == "" for o in outcomes), [o for o in outcomes if o.error_code]

            hashes = _metrics(round_)
            started = time.perf_counter()
            done = world_measure(world_id=world.pk, metric_hashes=hashes)
            whole.append((time.perf_counter() - started) * 1000 / metric_turns)
            assert done["written"] == metric_turns, done
            started = time.perf_counter()
            assert world_measure(world_id=world.pk, metric_hashes=hashes)["written"] == 0
            again.append((time.perf_counter() - started) * 1000)
        assert Measurement.objects.count() == ROUNDS * metric_turns
        connection.close()

        def show(values: list[float]) -> str:
            return (
                " / ".join(f"{v:.3f}" for v in values)
                + f" (median {statistics.median(values):.3f})"
            )

        print(f"turn view read, ms per turn:                 {show(reads)}")
        print(f"expression evaluation, ms per metric-turn:   {show(evals)}")
        print(f"measuring (views + evaluation + rows), ms per metric-turn: {show(whole)}")
        print(f"measuring again ({metric_turns} metric-turns, nothing written), ms: {show(again)}")
        median = statistics.median(whole)
        verdict = "met" if median <= TARGET_MS else "NOT met"
        print(f"target ≤ {TARGET_MS} ms per metric-turn: {verdict} ({median:.3f} ms)")
        if not args.skip_judge:
            _judge_part(args.judge_turns)
        return 0 if median <= TARGET_MS else 1
    finally:
        from django.db import connections

        connections.close_all()
        benchdb.recreate_database(BENCH_DB_NAME, create=False)


if __name__ == "__main__":
    sys.exit(main())
