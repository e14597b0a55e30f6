"""Experiment overhead: creating a 2 x 500 design, and the results and the export of 1,000 worlds x
20 turns x 3 metrics.

Run with ``.venv/bin/python bench/experiment_bench.py [--replicates 500] [--turns 20]`` from the
project folder; DATABASE_URL must be unset. It (re)creates the throwaway database
``chukwa_experiment_bench`` on the embedded PostgreSQL server, migrates it and drops it at the
end; its Celery messages (the kicks of the queued turns, the measurements asked for turn 0) go to
queues of its own (``bench-<pid>``, ``bench-<pid>-measure``), which no worker reads and which are
deleted at the end. Part 1 times ``POST /api/experiments/``'s service on a two-arm design of a
small rule-policy scenario (every world made, its turns queued, in one transaction). Part 2 writes
the measurements a finished run of it would have (3 metrics on turns 0…T of every world, as rows)
and times the results (per arm and metric the summaries with their intervals, per turn, and the
paired effects: scipy's bootstrap and sign-flip test) and the whole CSV export, streamed. Targets
(≤ 2 s each for part 2) are reported as met or not; the exit status is 0 unless something errors.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import benchdb  # bench/ is the script's own folder, first on sys.path
from scale_worlds import rule_scenario

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_experiment_bench"
BENCH_QUEUE = f"bench-{os.getpid()}"
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
os.environ["CHUKWA_CELERY_QUEUE"] = BENCH_QUEUE
os.environ["CHUKWA_CELERY_MEASURE_QUEUE"] = f"{BENCH_QUEUE}-measure"
TARGET_S = 2.0
METRICS = {
    "patched": "length(patches) > `0`",
    "tokens": "tokens",
    "calls": "length(calls)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=500)
    parser.add_argument("--turns", type=int, default=20)
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

        from scenarios_app.services import metric_put, scenario_assemble
        from worlds_app.experiment_selectors import experiment_results, export_rows
        from worlds_app.models import Measurement, World
        from worlds_app.services.experiments import experiment_create

        call_command("migrate", verbosity=0)
        scenario = scenario_assemble(data=rule_scenario(2, "experiment_bench"))["scenario_hash"]
        hashes = [
            metric_put(
                content={
                    "version": 1,
                    "label": label,
                    "kind": "expression",
                    "aggregate": "mean",
                    "expression": text,
                }
            )["hash"]
            for label, text in METRICS.items()
        ]
        design = {
            "slug": "bench",
            "arms": [
                {"label": "control", "scenario_ref": {"hash": scenario}},
                {"label": "treated", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": args.replicates,
            "turns": args.turns,
            "metrics": [{"hash": h} for h in hashes],
        }
        started = time.perf_counter()
        experiment_create(data=design, created_by="bench")
        created = time.perf_counter() - started
        worlds = list(World.objects.filter(experiment__slug="bench").values_list("pk", "arm"))
        print(
            f"1. creating a 2 by {args.replicates} design ({len(worlds)} worlds, "
            f"{args.turns} turns queued on each): {created * 1000:.0f} ms "
            f"({created * 1000 / len(worlds):.1f} ms per world)"
        )

        rng = random.Random(7)
        rows = [
            Measurement(
                world_id=pk,
                turn_number=turn,
                metric_id=metric,
                value=rng.gauss(1.0 if arm == "treated" else 0.8, 0.3),
            )
            for pk, arm in worlds
            for turn in range(args.turns + 1)
            for metric in hashes
        ]
        Measurement.objects.bulk_create(rows, batch_size=5000)
        print(
            f"2. {len(rows):,} measurements written "
            f"({len(worlds)} worlds × {args.turns + 1} turns × {len(hashes)} metrics)"
        )
        started = time.perf_counter()
        import scipy.stats  # noqa: F401 - loaded once per process; the first results load it

        print(
            f"   importing scipy.stats (once per web or worker process): {time.perf_counter() - started:.2f} s"
        )
        profile = None
        if os.environ.get("BENCH_PROFILE"):
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
        started = time.perf_counter()
        results = experiment_results(slug="bench")
        results_s = time.perf_counter() - started
        if profile is not None:
            import pstats

            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(18)
        effect = results["results"][0]["effects"][0]
        print(
            f"   results: {results_s:.2f} s (first metric: difference {effect['difference']:.3f}, "
            f"95% CI [{effect['ci_low']:.3f}, {effect['ci_high']:.3f}], p {effect['p_value']:.4f}, "
            f"{effect['n_pairs']} pairs)"
        )
        from surfaces.api.experiments import _csv_lines

        started = time.perf_counter()
        _, stream = export_rows(slug="bench")
        size = sum(len(piece) for piece in _csv_lines(stream))
        export_s = time.perf_counter() - started
        print(f"   CSV export, streamed whole: {export_s:.2f} s ({size / 1e6:.1f} MB)")
        for name, seconds in (("results", results_s), ("export", export_s)):
            verdict = "met" if seconds <= TARGET_S else "NOT met"
            print(f"target ≤ {TARGET_S} s for the {name}: {verdict} ({seconds:.2f} s)")
        connection.close()
        return 0
    finally:
        from django.db import connections

        connections.close_all()
        benchdb.recreate_database(BENCH_DB_NAME, create=False)
        for queue in (BENCH_QUEUE, f"{BENCH_QUEUE}-measure"):
            benchdb.queue_delete(queue)


if __name__ == "__main__":
    sys.exit(main())
