"""Replay benchmark: record a 20-turn, 5-agent LLM world against the scripted server
(zero model latency), then replay it with ``replay_strict``, both through a real Celery worker.

Run with ``.venv/bin/python bench/replay_bench.py [--turns 20]`` from the project folder;
DATABASE_URL must be unset. It (re)creates the throwaway database ``chukwa_replay_bench`` on the
embedded PostgreSQL server, migrates it and drops it at the end; Celery messages go to a queue of
their own (``bench-<pid>``). The scripted OpenAI-compatible server runs in this process; the
worker reaches it over HTTP. Printed: the requests the model server received while the replay
ran (must be 0), seconds per turn recorded vs replayed, and whether every turn's state hash is
identical. The exit status is 1 if the replay sent a request or diverged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import benchdb  # bench/ is the script's own folder, first on sys.path
from llm_overhead_world import _workflow

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_replay_bench"
BENCH_QUEUE = f"bench-{os.getpid()}"
WORKER_NAME = f"bench-{os.getpid()}@{socket.gethostname()}"
# Set before Django loads its settings (read once, at import); the worker inherits them.
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
os.environ["CHUKWA_CELERY_QUEUE"] = BENCH_QUEUE

AGENTS = ("ada", "bea", "cyd", "dov", "eli")
ROOM = "storeroom"
START = "2031-01-01T08:00:00+00:00"
BATCH_TIMEOUT_S = 600.0
ACTING = re.compile(r"Acting subject:\n- (\w+) \(")
TURN = re.compile(r"\(turn (\d+)\)")


def _scenario_input() -> dict[str, Any]:
    agents = [
        {
            "inline": {
                "id": agent,
                "name": agent.capitalize(),
                "state": f"{agent} stands by shelf {i}.",
                "environment": ROOM,
                "kind": {
                    "agent": {
                        "goal": "keep the inventory in order.",
                        "memory": "",
                        "cognition_profile": "director",
                    }
                },
            }
        }
        for i, agent in enumerate(AGENTS)
    ]
    crates = [
        {
            "inline": {
                "id": f"crate{i}",
                "name": f"Crate {i}",
                "state": f"a wooden crate on shelf {i}.",
                "environment": ROOM,
                "kind": "prop",
            }
        }
        for i in range(5)
    ]
    return {
        "scenario_slug": "replay_bench",
        "description": "Replay bench: five LLM agents in a storeroom.",
        "chronon_seconds": 60,
        "cognition_profiles": {"director": {"inline": {"workflow": {"inline": _workflow()}}}},
        "environments": {ROOM: {"inline": "A narrow storeroom with five shelves."}},
        "entities": [*agents, *crates],
    }


def _reply(request: dict[str, Any]) -> str:
    """Each agent moves a crate and remembers it; the reply depends on who acts and when."""
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    acting, turn = ACTING.search(user), TURN.search(user)
    if acting is None or turn is None:
        raise RuntimeError(f"unexpected prompt: {user[:200]!r}")
    agent, number = acting.group(1), int(turn.group(1))
    crate = f"crate{(AGENTS.index(agent) + number) % 5}"
    patch = {
        "narration": f"{agent} moves {crate} (turn {number}).",
        "effects": [
            {"op": "set_entity_state", "entity_id": agent, "state": f"{agent} holds {crate}."},
            {"op": "set_entity_state", "entity_id": crate, "state": f"moved by {agent}."},
            {"op": "append_entity_memory", "entity_id": agent, "content": f"T{number}: {crate}"},
        ],
    }
    return json.dumps({"kind": "final_patch", "patch": patch})


# --- the worker --------------------------------------------------------------------------------


def _run_turns(slug: str, turns: int, proc: subprocess.Popen[bytes], log: IO[bytes]) -> float:
    """Queue ``turns`` attempts, wait until all are committed; seconds per turn, end to end."""
    from worlds_app.models import AttemptStatus, TurnAttempt
    from worlds_app.services import turn_attempt_enqueue

    t0 = time.perf_counter()
    batch_id = turn_attempt_enqueue(slug=slug, count=turns, requested_by="bench")["batch_id"]
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while True:
        statuses = Counter(
            TurnAttempt.objects.filter(batch_id=batch_id).values_list("status", flat=True)
        )
        if statuses[AttemptStatus.COMMITTED] == turns:
            return (time.perf_counter() - t0) / turns
        if set(statuses) - {AttemptStatus.QUEUED, AttemptStatus.RUNNING, AttemptStatus.COMMITTED}:
            reasons = list(
                TurnAttempt.objects.filter(batch_id=batch_id)
                .exclude(failure_reason="")
                .values_list("failure_step", "failure_reason")[:3]
            )
            raise RuntimeError(f"{slug}: the batch did not commit: {dict(statuses)}; {reasons}")
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}):\n{benchdb.log_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{slug}: not committed in {BATCH_TIMEOUT_S:.0f} s: {statuses}")
        time.sleep(0.02)


def _state_hashes(slug: str) -> list[str]:
    from worlds_app.models import Turn

    return list(
        Turn.objects.filter(world__slug=slug)
        .order_by("number")
        .values_list("state_hash", flat=True)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set, so CHUKWA_DB_NAME would not pick the bench database")
        return 2

    from tests.support.scripted_llm import ScriptedLLM

    llm = ScriptedLLM().start()
    os.environ["CHUKWA_LLM_BASE_URL"] = llm.base_url
    os.environ["CHUKWA_LLM_API_KEY"] = "bench-key"
    benchdb.recreate_database(BENCH_DB_NAME, create=True)
    worker: subprocess.Popen[bytes] | None = None
    log = tempfile.TemporaryFile(mode="a+b")  # append: the worker shares the file offset
    django_ready = False
    ok = False
    try:
        import django

        django.setup()
        django_ready = True
        from django.conf import settings
        from django.core.management import call_command

        if settings.DATABASES["default"]["NAME"] != BENCH_DB_NAME:
            raise RuntimeError("settings do not point at the bench database")
        call_command("migrate", verbosity=0)
        from cognition_app.models import SourceInvocation
        from scenarios_app.services import scenario_assemble
        from worlds_app.services import world_create

        scenario_hash = scenario_assemble(data=_scenario_input())["scenario_hash"]
        ref = {"hash": scenario_hash}
        world_create(data={"slug": "recorded", "scenario_ref": ref, "start_time": START})
        world_create(
            data={
                "slug": "replayed",
                "scenario_ref": ref,
                "start_time": START,
                "replay_from": {"world": "recorded", "mode": "replay_strict"},
            }
        )
        print(f"bench database {BENCH_DB_NAME!r}, queue {BENCH_QUEUE!r}")
        print(
            f"world: {len(AGENTS)} LLM agents (llm_tool_loop, response_format), {args.turns} turns"
        )

        worker = benchdb.start_worker(queue=BENCH_QUEUE, name=WORKER_NAME, concurrency=1, log=log)
        benchdb.wait_for_worker(worker, name=WORKER_NAME, log=log)
        llm.script(*[_reply] * (len(AGENTS) * args.turns))
        recorded_s = _run_turns("recorded", args.turns, worker, log)
        recorded_requests = len(llm.requests) + len(llm.probes)
        replayed_s = _run_turns("replayed", args.turns, worker, log)
        during_replay = len(llm.requests) + len(llm.probes) - recorded_requests
        served = SourceInvocation.objects.filter(
            world__slug="replayed", replayed_from__isnull=False
        ).count()
        total = SourceInvocation.objects.filter(world__slug="replayed").count()
        same = _state_hashes("recorded") == _state_hashes("replayed")
        print(f"requests sent while recording:     {recorded_requests} (incl. 1 conformance check)")
        print(f"requests sent during replay:       {during_replay}")
        print(f"invocations served from the record: {served} of {total}")
        print(f"seconds per turn, recorded:        {recorded_s:.3f}")
        print(f"seconds per turn, replayed:        {replayed_s:.3f}")
        print(
            f"identical state hashes:            {'yes' if same else 'no'} "
            f"({len(_state_hashes('replayed'))} turns incl. turn 0)"
        )
        ok = during_replay == 0 and same
    finally:
        try:
            if worker is not None:
                benchdb.stop_worker(worker)
            log.close()
            llm.stop()
            if django_ready:
                benchdb.queue_delete(BENCH_QUEUE)
        finally:
            from django.db import connections

            connections.close_all()
            benchdb.recreate_database(BENCH_DB_NAME, create=False)
            print(f"dropped bench database {BENCH_DB_NAME!r}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
