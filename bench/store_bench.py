"""Scenario store benchmark: assemble, identical re-assemble and a one-byte fork.

Run with ``.venv/bin/python bench/store_bench.py`` from the project folder. It creates a
throwaway database (``chukwa_bench`` unless ``CHUKWA_BENCH_DB_NAME`` says otherwise) on the same
PostgreSQL server the settings point at, migrates it, measures, and drops it again, so the
development data is never touched. For each scenario size it reports wall time, SQL query count
and new-row counts, checks that query counts do not grow with the entity count, and checks the
targets (assemble < 2 s, fork < 1 s). The exit status is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"

BENCH_DB_NAME = os.environ.get("CHUKWA_BENCH_DB_NAME", "chukwa_bench")
SIZES = (250, 500, 1000)
AGENTS = 5
ENVIRONMENTS = 20
ASSEMBLE_TARGET_MS = 2000.0
FORK_TARGET_MS = 1000.0
PROMPT = "You control the acting subject. Keep the narration short and concrete."


# --- the throwaway database ------------------------------------------------------------------


def _admin_connect_kwargs(db: dict[str, Any]) -> dict[str, Any]:
    """psycopg connection parameters for the server's maintenance database."""
    kwargs: dict[str, Any] = {"dbname": "postgres", "autocommit": True}
    for key, name in (
        ("USER", "user"),
        ("PASSWORD", "password"),
        ("HOST", "host"),
        ("PORT", "port"),
    ):
        if db.get(key):
            kwargs[name] = db[key]
    for option in ("sslmode", "sslrootcert", "sslcert", "sslkey"):
        if db.get("OPTIONS", {}).get(option):
            kwargs[option] = db["OPTIONS"][option]
    return kwargs


def _recreate_database(db: dict[str, Any], name: str, *, create: bool) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(**_admin_connect_kwargs(db)) as conn:
        force = sql.SQL(" WITH (FORCE)") if conn.info.server_version >= 130000 else sql.SQL("")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)) + force)
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


# --- scenario input --------------------------------------------------------------------------


def _workflow(world_patch_hash: str, prompt: str, source_label: str) -> dict[str, Any]:
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": {
                    "inline": {
                        "version": 1,
                        "label": source_label,
                        "interface": {
                            "name": "llm_chat_completions",
                            "model": "gpt-4o-mini",
                            "base_url_env": "CHUKWA_LLM_BASE_URL",
                            "api_key_env": "CHUKWA_LLM_API_KEY",
                            "schema_delivery": "response_format",
                            "timeout_ms": 60000,
                            "params": {"temperature": 0.7, "max_tokens": 800},
                        },
                    }
                },
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": prompt},
                        {
                            "role": "user",
                            "content": "World:\n{{world.projection}}\n\n{{subject.rendered}}",
                        },
                    ]
                },
                "available_tools": [],
                "max_generation_attempts": 3,
                "max_tool_calls": 0,
                "final_schema_ref": {"hash": world_patch_hash},
            }
        ],
        "apply": {"from": "act.final"},
    }


def _scenario_input(size: int, world_patch_hash: str) -> dict[str, Any]:
    """``size`` entities (a few agents, the rest props), 20 environments, one profile.

    The size is part of every text so each size's first assemble writes only new rows.
    """
    tag = f"n{size}"
    environments = {
        f"room_{i:02d}": {"inline": f"Room {i} of the {tag} bench: a bare floor, one lamp."}
        for i in range(ENVIRONMENTS)
    }
    entities: list[dict[str, Any]] = []
    for i in range(size):
        entity: dict[str, Any] = {
            "id": f"e{i:04d}",
            "name": f"E{i}",
            "state": tag,
            "environment": f"room_{i % ENVIRONMENTS:02d}",
            "kind": "prop",
        }
        if i < AGENTS:
            entity["kind"] = {
                "agent": {"goal": "wait", "memory": "", "cognition_profile": "walker"}
            }
        entities.append({"inline": entity})
    return {
        "scenario_slug": f"bench_{tag}",
        "description": f"Store benchmark with {size} entities.",
        "chronon_seconds": 60,
        "cognition_profiles": {
            "walker": {
                "inline": {
                    "workflow": {
                        "inline": _workflow(world_patch_hash, f"{PROMPT} ({tag})", f"chat_{tag}")
                    }
                }
            }
        },
        "environments": environments,
        "entities": entities,
        "operator": "bench",
        "note": f"store bench {tag}",
    }


# --- measuring -------------------------------------------------------------------------------


@dataclass
class Measure:
    ms: float
    queries: int
    new_rows: dict[str, int]
    new_scenario: bool
    scenario_hash: str

    @property
    def new_total(self) -> int:
        return sum(self.new_rows.values())


def _measure(fn: Any, data: dict[str, Any], show_sql: bool = False) -> Measure:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        start = time.perf_counter()
        result = fn(data=data)
        elapsed = (time.perf_counter() - start) * 1000
    if show_sql:
        for query in captured.captured_queries:
            print(f"    {query['time']:>6}s  {query['sql'][:150]}")
    return Measure(
        ms=elapsed,
        queries=len(captured.captured_queries),
        new_rows=dict(result["new_components"]),
        new_scenario=result["was_new_scenario"],
        scenario_hash=result["scenario_hash"],
    )


@dataclass
class Row:
    size: int
    canonical_kib: float
    assemble: Measure
    reassemble: Measure
    fork: Measure


def _run_size(size: int, world_patch_hash: str, show_sql: bool) -> Row:
    from chukwa_core import hashing
    from scenarios_app.services import scenario_assemble, scenario_fork

    data = _scenario_input(size, world_patch_hash)
    # The input is slightly larger than the stored reconstruction (inline source vs its hash).
    canonical_kib = len(hashing.canonical_json_bytes(data)) / 1024
    assemble = _measure(scenario_assemble, data)
    reassemble = _measure(scenario_assemble, data)
    changed_prompt = f"{PROMPT} (n{size})".replace("short", "shorT")  # one byte
    fork_data = {
        "primary_parent": {"hash": assemble.scenario_hash},
        "changes": {
            "cognition_profile_upserts": {
                "walker": {
                    "inline": {
                        "workflow": {
                            "inline": _workflow(world_patch_hash, changed_prompt, f"chat_n{size}")
                        }
                    }
                }
            }
        },
        "operator": "bench",
        "note": "one byte of the prompt",
    }
    if show_sql:
        print(f"  SQL of the fork at {size} entities:")
    fork = _measure(scenario_fork, fork_data, show_sql=show_sql)
    return Row(size, canonical_kib, assemble, reassemble, fork)


def _fmt_new(m: Measure) -> str:
    short = {
        "json_schemas": "sch",
        "response_sources": "src",
        "cognition_workflows": "wf",
        "cognition_profiles": "prof",
        "environments": "env",
        "entities": "ent",
    }
    parts = [f"{short[k]}={v}" for k, v in m.new_rows.items() if v]
    parts.append(f"scenario={int(m.new_scenario)}")
    return " ".join(parts)


def _report(rows: list[Row]) -> list[str]:
    """Print the table; return the failed checks."""
    header = (
        f"{'entities':>8} {'KiB':>6} | {'assemble':>9} {'q':>3} | {'re-assemble':>11} {'q':>3} "
        f"{'new':>3} | {'fork':>8} {'q':>3} | fork new rows"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.size:>8} {r.canonical_kib:>6.1f} | {r.assemble.ms:>7.1f}ms {r.assemble.queries:>3} | "
            f"{r.reassemble.ms:>9.1f}ms {r.reassemble.queries:>3} {r.reassemble.new_total:>3} | "
            f"{r.fork.ms:>6.1f}ms {r.fork.queries:>3} | {_fmt_new(r.fork)}"
        )
    print()
    for r in rows:
        print(f"assemble at {r.size:>4} entities, new rows: {_fmt_new(r.assemble)}")
    print()

    failures: list[str] = []
    largest = max(rows, key=lambda r: r.size)
    for r in rows:
        if r.assemble.new_rows["entities"] != r.size or not r.assemble.new_scenario:
            failures.append(
                f"assemble at {r.size}: expected {r.size} new entities and a new scenario"
            )
        if r.reassemble.new_total or r.reassemble.new_scenario:
            failures.append(
                f"re-assemble at {r.size}: expected 0 new rows, got {_fmt_new(r.reassemble)}"
            )
        if r.reassemble.scenario_hash != r.assemble.scenario_hash:
            failures.append(f"re-assemble at {r.size}: the scenario hash changed")
        expected_fork = {
            "json_schemas": 0,
            "response_sources": 0,
            "cognition_workflows": 1,
            "cognition_profiles": 1,
            "environments": 0,
            "entities": 0,
        }
        if r.fork.new_rows != expected_fork or not r.fork.new_scenario:
            failures.append(
                f"fork at {r.size}: expected exactly 1 workflow, 1 profile, 1 scenario; "
                f"got {_fmt_new(r.fork)}"
            )
    for label, pick in (
        ("assemble", lambda r: r.assemble.queries),
        ("re-assemble", lambda r: r.reassemble.queries),
        ("fork", lambda r: r.fork.queries),
    ):
        counts = [pick(r) for r in rows]
        flat = len(set(counts)) == 1
        print(f"query count, {label:<11}: {counts} {'constant' if flat else 'GROWS WITH ENTITIES'}")
        if not flat:
            failures.append(f"{label} query count grows with entity count: {counts}")
    print()
    for label, value, target in (
        ("assemble", largest.assemble.ms, ASSEMBLE_TARGET_MS),
        ("fork", largest.fork.ms, FORK_TARGET_MS),
    ):
        ok = value < target
        print(
            f"target {label:<8} at {largest.size} entities: {value:7.1f} ms < {target:.0f} ms "
            f"{'OK' if ok else 'MISSED'}"
        )
        if not ok:
            failures.append(
                f"{label} at {largest.size} entities took {value:.1f} ms (target {target:.0f})"
            )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-sql", action="store_true", help="print the fork's SQL per size")
    args = parser.parse_args()

    from django.conf import settings

    # Reading DATABASES loads the settings (and finds or starts the embedded server); nothing
    # has connected yet, so pointing NAME elsewhere here redirects every connection.
    db = settings.DATABASES["default"]
    if db["NAME"] == BENCH_DB_NAME:
        print(f"refusing: the configured database is already named {BENCH_DB_NAME!r}")
        return 2
    original_name = db["NAME"]
    _recreate_database(db, BENCH_DB_NAME, create=True)
    db["NAME"] = BENCH_DB_NAME
    failures: list[str] = []
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from chukwa_core.patch_schema import world_patch_schema_hash

        print(f"bench database {BENCH_DB_NAME!r} (dev database {original_name!r} untouched)")
        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        print(f"migrated in {(time.perf_counter() - started):.1f} s")
        connection.ensure_connection()
        world_patch_hash = world_patch_schema_hash()
        print(
            f"{AGENTS} agents, {ENVIRONMENTS} environments (inline), 1 inline profile/workflow; "
            "times are wall clock per service call, q = SQL queries\n"
        )
        rows = [_run_size(size, world_patch_hash, args.show_sql) for size in SIZES]
        failures = _report(rows)
    finally:
        from django.db import connections

        connections.close_all()
        db["NAME"] = original_name
        _recreate_database(db, BENCH_DB_NAME, create=False)
        print(f"\ndropped bench database {BENCH_DB_NAME!r}")
    if failures:
        print("\nFAILED CHECKS:")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
