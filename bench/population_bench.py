"""Populations: assembling a 1,000-agent population, and the coverage of Sobol against random.

Run with ``.venv/bin/python bench/population_bench.py [--size 1000] [--seeds 10]`` from the
project folder. It creates a throwaway database (``chukwa_population_bench``) on the PostgreSQL
server the settings point at, migrates it, measures and drops it, so the development data is
never touched. It prints:

1. Drawing the population of the fixture ``park_visitors_rules`` at ``--size`` agents (no
   database, no model): the points, the axis values and every agent's entity rendered.
2. Assembling the fixture's scenario with that population (``scenario_assemble``: drawn,
   every agent stored as an entity, the scenario hashed and stored), then assembling it again
   (nothing new; the same scenario hash, which is printed as the check).
3. The coverage of ``--size`` draws on the same axes (age, thirst, patience) by each sampler,
   side by side, for ``--seeds`` seeds: the centered L2-discrepancy
   (``scipy.stats.qmc.discrepancy``, method CD; lower is more even) and the largest gap between
   a drawn share and its target over every axis, as mean, min and max over the seeds.

Nothing is asserted about time (speed is printed, not tested); the exit status is 0 unless
something errors.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"

BENCH_DB_NAME = "chukwa_population_bench"
FIXTURE = "park_visitors_rules"


def _recreate_database(db: dict[str, Any], name: str, *, create: bool) -> None:
    import psycopg
    from psycopg import sql

    kwargs: dict[str, Any] = {"dbname": "postgres", "autocommit": True}
    for key, option in (
        ("USER", "user"),
        ("PASSWORD", "password"),
        ("HOST", "host"),
        ("PORT", "port"),
    ):
        if db.get(key):
            kwargs[option] = db[key]
    with psycopg.connect(**kwargs) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _body(size: int) -> dict[str, Any]:
    from scenarios_app.fixture_files import load_fixture

    body = copy.deepcopy(load_fixture(FIXTURE))
    body.pop("name", None)
    body["populations"][0]["ref"]["inline"]["size"] = size
    return body


def _draw(size: int) -> None:
    from chukwa_core.population import agent_entities

    content = _body(size)["populations"][0]["ref"]["inline"]
    started = time.perf_counter()
    agents = agent_entities(content, environment="park", cognition_profile="visitor")
    seconds = time.perf_counter() - started
    print(f"1. drawing {len(agents)} agents (points, values, entities rendered): {seconds:.3f} s")


def _assemble(size: int) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scenarios_app.services import scenario_assemble

    results = []
    for label in ("first assemble", "again (all reused)"):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            made = scenario_assemble(data=_body(size))
            seconds = time.perf_counter() - started
        results.append(made)
        print(
            f"2. {label}: {seconds:.3f} s, {len(queries)} queries, "
            f"{len(made['entities'])} entities ({made['new_components']['entities']} new), "
            f"scenario {made['scenario_hash'][:16]}…"
        )
    same = results[0]["scenario_hash"] == results[1]["scenario_hash"]
    print(f"   the same scenario hash both times: {same}")


def _coverage(size: int, seeds: int) -> None:
    from chukwa_core.population import coverage, draw, marginals

    base = _body(size)["populations"][0]["ref"]["inline"]
    found: dict[str, dict[str, list[float]]] = {}
    for sampler in ("sobol", "random"):
        figures: dict[str, list[float]] = {"discrepancy": [], "max_gap": [], "seconds": []}
        for seed in range(1, seeds + 1):
            content = {**base, "sampler": sampler, "seed": seed}
            started = time.perf_counter()
            points, rows = draw(content)
            measured = coverage(points)
            gaps = marginals(content, points, rows)
            figures["seconds"].append(time.perf_counter() - started)
            figures["discrepancy"].append(float(measured["value"]))
            figures["max_gap"].append(max(m["max_gap"] for m in gaps))
        found[sampler] = figures
    axes = ", ".join(a["name"] for a in base["axes"])
    print(f"\n3. coverage of {size} draws over ({axes}), {seeds} seeds each: mean [min, max]")
    print(f"   {'':34} {'sobol':>30} {'random':>30}")
    for key, title in (
        ("discrepancy", "centered L2-discrepancy (lower)"),
        ("max_gap", "largest |share − target|"),
        ("seconds", "draw + coverage + marginals (s)"),
    ):
        cells = []
        for sampler in ("sobol", "random"):
            values = found[sampler][key]
            cells.append(f"{statistics.fmean(values):.3g} [{min(values):.3g}, {max(values):.3g}]")
        print(f"   {title:34} {cells[0]:>30} {cells[1]:>30}")
    ratio = statistics.fmean(found["random"]["discrepancy"]) / statistics.fmean(
        found["sobol"]["discrepancy"]
    )
    print(f"   random's discrepancy is {ratio:.1f} times Sobol's on average")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="agents (default 1000)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds per sampler (default 10)")
    args = parser.parse_args()

    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["NAME"] == BENCH_DB_NAME:
        print(f"refusing: the configured database is already named {BENCH_DB_NAME!r}")
        return 2
    original_name = db["NAME"]
    _recreate_database(db, BENCH_DB_NAME, create=True)
    db["NAME"] = BENCH_DB_NAME
    try:
        import django

        django.setup()
        from django.core.management import call_command

        print(f"bench database {BENCH_DB_NAME!r} (dev database {original_name!r} untouched)")
        call_command("migrate", verbosity=0)
        _draw(args.size)
        _assemble(args.size)
        _coverage(args.size, args.seeds)
    finally:
        from django.db import connections

        connections.close_all()
        _recreate_database(db, BENCH_DB_NAME, create=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
