"""Turn runner benchmark: one rule-policy turn in-process, the commit's query count, and 20 turns
end to end through a real Celery worker.

Run with ``.venv/bin/python bench/turn_bench.py`` from the project folder. It (re)creates the
throwaway database ``chukwa_turn_bench`` on the embedded PostgreSQL server, migrates it, and
drops it at the end; Celery messages go to a queue of their own (``bench-<pid>``), so neither the
development data nor a development worker is touched. Targets are reported as PASS/FAIL; they
are informational, and the exit status is 0 unless something errors.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import benchdb  # bench/ is the script's own folder, first on sys.path

if TYPE_CHECKING:
    from worlds_app.services.claims import Claim

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_turn_bench"
BENCH_QUEUE = f"bench-{os.getpid()}"
WORKER_NAME = f"bench-{os.getpid()}@{socket.gethostname()}"
# Set before Django loads its settings: they are read once, at import.
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
os.environ["CHUKWA_CELERY_QUEUE"] = BENCH_QUEUE

ENVIRONMENTS = 4
BIG = (100, 300)  # agents, props
SMALL = (10, 30)
ITERATIONS = 7
BATCH = 20
TURN_TARGET_MS = 1000.0
BATCH_TARGET_S = 30.0
BATCH_TIMEOUT_S = 180.0
OWNER = "bench"


def _recreate_database(*, create: bool) -> None:
    benchdb.recreate_database(BENCH_DB_NAME, create=create)


def _queue_purge() -> int:
    return benchdb.queue_purge(BENCH_QUEUE)


def _queue_delete() -> None:
    benchdb.queue_delete(BENCH_QUEUE)


# --- the throwaway database ------------------------------------------------------------------


# --- scenario input --------------------------------------------------------------------------


def _key_prop(env: int) -> str:
    # Props are spread round-robin, so p000…p003 sit in r0…r3: one contested prop per room.
    return f"p{env:03d}"


def _rules(fallback_state: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for env in range(ENVIRONMENTS):
        prop = _key_prop(env)
        rules.append(
            {
                "id": f"drop{env}",
                "when": [{"kind": "subject_state_contains", "text": f"holds {prop}"}],
                "intent": f"put {prop} down",
                "plan": [
                    {"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "idle"},
                    {"op": "set_entity_state", "entity_id": prop, "state": "loose"},
                ],
                "memory": f"T{{{{world.attempted_turn}}}} dropped {prop}",
                "narration": f"{{{{subject.name}}}} drops {prop}.",
            }
        )
        rules.append(
            {
                "id": f"take{env}",
                # Entity conditions only see co-located entities, so an agent can only match
                # the rule for its own room's prop.
                "when": [{"kind": "entity_state_contains", "entity_id": prop, "text": "loose"}],
                "intent": f"take {prop}",
                "plan": [
                    {
                        "op": "set_entity_state",
                        "entity_id": "{{subject.id}}",
                        "state": f"holds {prop}",
                    },
                    {
                        "op": "set_entity_state",
                        "entity_id": prop,
                        "state": "held by {{subject.id}}",
                    },
                ],
                "memory": f"T{{{{world.attempted_turn}}}} took {prop}",
                "narration": f"{{{{subject.name}}}} takes {prop}.",
            }
        )
    rules.append(
        {
            "id": "poke",
            "when": [{"kind": "subject_state_not_contains", "text": "holds"}],
            "probability": 0.3,
            "intent": "poke around",
            "plan": [{"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": "poking"}],
            "memory": "T{{world.attempted_turn}} poked",
            "narration": "{{subject.name}} pokes around.",
        }
    )
    rules.append(
        {
            "id": "idle",
            "when": [],
            "intent": "wait",
            "plan": [
                {"op": "set_entity_state", "entity_id": "{{subject.id}}", "state": fallback_state}
            ],
            "memory": "T{{world.attempted_turn}} waited",
            "narration": "{{subject.name}} waits.",
        }
    )
    return rules


def _profile(fallback_state: str) -> dict[str, Any]:
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [{"id": "decide", "type": "rule_policy", "rules": _rules(fallback_state)}],
        "apply": {"from": "decide.final"},
    }
    return {"inline": {"workflow": {"inline": workflow}}}


def _scenario_input(agents: int, props: int) -> dict[str, Any]:
    entities: list[dict[str, Any]] = []
    for i in range(agents):
        entity = {
            "id": f"a{i:03d}",
            "name": f"A{i}",
            "state": "idle",
            "environment": f"r{i % ENVIRONMENTS}",
            "kind": {"agent": {"goal": "hold", "memory": "", "cognition_profile": "xy"[i % 2]}},
        }
        entities.append({"inline": entity})
    for i in range(props):
        entity = {
            "id": f"p{i:03d}",
            "name": f"P{i}",
            "state": "loose",
            "environment": f"r{i % ENVIRONMENTS}",
            "kind": "prop",
        }
        entities.append({"inline": entity})
    return {
        "scenario_slug": f"turn_bench_{agents}",
        "description": f"Turn bench: {agents} agents, {props} props.",
        "chronon_seconds": 60,
        "cognition_profiles": {"x": _profile("idle"), "y": _profile("resting")},
        "environments": {f"r{i}": {"inline": f"Room {i}."} for i in range(ENVIRONMENTS)},
        "entities": entities,
        "note": "turn bench",
    }


@dataclass
class BenchWorld:
    slug: str
    agents: int
    props: int
    canonical_kib: float


def _make_world(agents: int, props: int) -> BenchWorld:
    from chukwa_core.hashing import canonical_json_bytes
    from scenarios_app.services import scenario_assemble
    from worlds_app.services import world_create

    data = _scenario_input(agents, props)
    result = scenario_assemble(data=data)
    slug = f"tb-{agents}"
    world_create(data={"slug": slug, "scenario_ref": {"hash": result["scenario_hash"]}})
    # The input is a few bytes larger than the stored reconstruction the limit applies to.
    return BenchWorld(slug, agents, props, len(canonical_json_bytes(data)) / 1024)


# --- one turn in-process ---------------------------------------------------------------------


@dataclass
class PieceTiming:
    claim_ms: float
    execute_ms: float
    commit_ms: float
    commit_queries: int | None
    commit_sql: list[str]
    patches: int
    transitions: int
    events: int
    attempt_id: str

    @property
    def total_ms(self) -> float:
        return self.claim_ms + self.execute_ms + self.commit_ms


def _enqueue_one(slug: str) -> str:
    from worlds_app.services import turn_attempt_enqueue

    return turn_attempt_enqueue(slug=slug, count=1, requested_by=OWNER)["attempt_ids"][0]


def _claim(attempt_id: str) -> Claim:
    from worlds_app.services.claims import claim_attempt

    claim = claim_attempt(attempt_id=attempt_id, owner=OWNER)
    if claim is None or claim.previous is None:
        raise RuntimeError(f"attempt {attempt_id} could not be claimed")
    return claim


def _turn_in_pieces(slug: str, *, capture: bool = False) -> PieceTiming:
    """turn_attempt_run taken apart (same calls, same order) so each step can be timed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cognition_app.subject_run import AttemptFailure, StagedEvent
    from worlds_app.models import AttemptEvent
    from worlds_app.services.attempt_recorder import AttemptRecorder
    from worlds_app.services.execution import turn_attempt_execute
    from worlds_app.services.turn_commit import commit_turn

    attempt_id = _enqueue_one(slug)
    t0 = time.perf_counter()
    claim = _claim(attempt_id)
    attempt, previous = claim.attempt, claim.previous
    assert previous is not None
    started = time.monotonic()
    recorder = AttemptRecorder(attempt)
    recorder.events.append(
        StagedEvent(
            "attempt_started",
            {
                "attempted_turn": attempt.attempted_turn,
                "worker": OWNER,
                "batch_index": attempt.batch_index,
            },
        )
    )
    t1 = time.perf_counter()
    try:
        working, staged, patches, _ = turn_attempt_execute(
            attempt=attempt, previous=previous, recorder=recorder, limits=claim.limits
        )
    except AttemptFailure as failure:
        raise RuntimeError(f"turn failed at {failure.step}: {failure.message}") from failure
    t2 = time.perf_counter()
    queries: int | None = None
    sql: list[str] = []
    if capture:
        # The debug cursor renders every statement's SQL, so captured commits are not timed.
        with CaptureQueriesContext(connection) as captured:
            commit_turn(claim, working, staged, recorder, started, owner=OWNER)
        queries = len(captured.captured_queries)
        sql = [q["sql"][:120] for q in captured.captured_queries]
    else:
        commit_turn(claim, working, staged, recorder, started, owner=OWNER)
    t3 = time.perf_counter()
    event_count = AttemptEvent.objects.filter(attempt_id=attempt_id).count()
    return PieceTiming(
        claim_ms=(t1 - t0) * 1000,
        execute_ms=(t2 - t1) * 1000,
        commit_ms=(t3 - t2) * 1000,
        commit_queries=queries,
        commit_sql=sql,
        patches=patches,
        transitions=len(staged),
        events=event_count,
        attempt_id=attempt_id,
    )


def _turn_via_run(slug: str) -> float:
    from worlds_app.models import AttemptStatus
    from worlds_app.services import turn_attempt_run

    attempt_id = _enqueue_one(slug)
    t0 = time.perf_counter()
    status = turn_attempt_run(attempt_id=attempt_id, owner=OWNER)
    elapsed = (time.perf_counter() - t0) * 1000
    if status != AttemptStatus.COMMITTED:
        raise RuntimeError(f"attempt {attempt_id} ended {status!r}: {_failure_of(attempt_id)}")
    return elapsed


def _failure_of(attempt_id: str) -> str:
    from worlds_app.models import TurnAttempt

    row = TurnAttempt.objects.values("failure_step", "failure_reason").get(pk=attempt_id)
    return f"{row['failure_step']}: {row['failure_reason']}"


def _rules_fired(attempt_id: str) -> str:
    from worlds_app.models import AttemptEvent, EventKind

    fired = Counter(
        AttemptEvent.objects.filter(
            attempt_id=attempt_id, kind=EventKind.INNER_MONOLOGUE
        ).values_list("payload__matched_rule", flat=True)
    )
    return " ".join(f"{rule}={n}" for rule, n in sorted(fired.items()))


# --- end to end through a worker -------------------------------------------------------------


@dataclass
class BatchResult:
    total_s: float
    worker_ms: list[int]


def _run_batch(slug: str, proc: subprocess.Popen[bytes], log: IO[bytes]) -> BatchResult:
    from worlds_app.models import AttemptStatus, TurnAttempt
    from worlds_app.services import turn_attempt_enqueue

    t0 = time.perf_counter()
    batch_id = turn_attempt_enqueue(slug=slug, count=BATCH, requested_by=OWNER)["batch_id"]
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while True:
        statuses = Counter(
            TurnAttempt.objects.filter(batch_id=batch_id).values_list("status", flat=True)
        )
        if statuses[AttemptStatus.COMMITTED] == BATCH:
            total = time.perf_counter() - t0
            break
        ended_badly = {
            s: n
            for s, n in statuses.items()
            if s not in (AttemptStatus.QUEUED, AttemptStatus.RUNNING, AttemptStatus.COMMITTED)
        }
        if ended_badly:
            reasons = list(
                TurnAttempt.objects.filter(batch_id=batch_id)
                .exclude(failure_reason="")
                .values_list("failure_step", "failure_reason")
            )
            raise RuntimeError(f"the batch did not commit: {dict(statuses)}; {reasons}")
        if proc.poll() is not None:
            raise RuntimeError(
                f"the worker exited with status {proc.returncode}:\n{benchdb.log_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the batch was not committed within {BATCH_TIMEOUT_S:.0f} s: {dict(statuses)}"
            )
        time.sleep(0.02)
    durations = list(
        TurnAttempt.objects.filter(batch_id=batch_id).values_list("duration_ms", flat=True)
    )
    return BatchResult(total, [d for d in durations if d is not None])


# --- report ----------------------------------------------------------------------------------


def _stats(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):7.1f} ms  "
        f"(min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"
    )


def _mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--show-sql", action="store_true", help="print the commit's SQL")
    args = parser.parse_args()

    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set, so CHUKWA_DB_NAME would not pick the bench database")
        return 2

    _recreate_database(create=True)
    worker: subprocess.Popen[bytes] | None = None
    log = tempfile.TemporaryFile(mode="a+b")  # append: the worker shares the file offset
    django_ready = False
    try:
        import django

        django.setup()
        django_ready = True
        from django.conf import settings
        from django.core.management import call_command

        db_name = settings.DATABASES["default"]["NAME"]
        if db_name != BENCH_DB_NAME:
            raise RuntimeError(f"settings point at {db_name!r}, not {BENCH_DB_NAME!r}")
        if settings.CELERY_TASK_DEFAULT_QUEUE != BENCH_QUEUE:
            raise RuntimeError(f"the default queue is {settings.CELERY_TASK_DEFAULT_QUEUE!r}")

        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        print(f"bench database {BENCH_DB_NAME!r}, queue {BENCH_QUEUE!r}")
        print(f"migrated in {time.perf_counter() - started:.1f} s")

        big = _make_world(*BIG)
        small = _make_world(*SMALL)
        for w in (big, small):
            print(
                f"world {w.slug}: {w.agents} agents, {w.props} props, {ENVIRONMENTS} rooms, "
                f"2 rule-policy profiles; scenario input {w.canonical_kib:.1f} KiB canonical"
            )

        # --- phase 1: in-process, no worker listens on the queue yet
        warmup = _turn_in_pieces(big.slug)
        print(f"\nwarm-up turn: {warmup.total_ms:.1f} ms (not counted)")
        run_ms = [_turn_via_run(big.slug) for _ in range(ITERATIONS)]
        pieces = [_turn_in_pieces(big.slug) for _ in range(ITERATIONS)]
        big_q = _turn_in_pieces(big.slug, capture=True)
        _turn_in_pieces(small.slug)  # warm the small world's first turn too
        small_q = _turn_in_pieces(small.slug, capture=True)
        purged = _queue_purge()

        last = pieces[-1]
        print(f"\none turn in-process, {big.agents} agents / {big.props} props:")
        print(f"  turn_attempt_run      {_stats(run_ms)}")
        print(f"  claim (+ prev. turn)  {_stats([p.claim_ms for p in pieces])}")
        print(f"  execute               {_stats([p.execute_ms for p in pieces])}")
        print(f"  commit                {_stats([p.commit_ms for p in pieces])}")
        print(f"  claim+execute+commit  {_stats([p.total_ms for p in pieces])}")
        print(
            f"  per turn: {last.patches} patches, {last.transitions} transitions, "
            f"{last.events} events"
        )
        print(f"  rules fired in the last timed turn: {_rules_fired(last.attempt_id)}")
        print(f"  purged {purged} kick message(s) sent while no worker listened")

        print("\ncommit SQL queries (including the on-commit kick's head lookup):")
        for w, t in ((big, big_q), (small, small_q)):
            print(
                f"  {w.agents:>3} agents / {w.props:>3} props: {t.commit_queries} queries "
                f"for {t.events} events and {t.transitions} transitions"
            )
            if args.show_sql:
                for line in t.commit_sql:
                    print(f"      {line}")

        # --- phase 2: end to end through a worker
        worker = benchdb.start_worker(queue=BENCH_QUEUE, name=WORKER_NAME, concurrency=2, log=log)
        ready_s = benchdb.wait_for_worker(worker, name=WORKER_NAME, log=log)
        print(f"\nworker {WORKER_NAME} answered a ping after {ready_s:.1f} s")
        batch = _run_batch(big.slug, worker, log)
        benchdb.stop_worker(worker)
        per_turn_ms = batch.total_s * 1000 / BATCH
        print(
            f"end to end: {BATCH} turns in {batch.total_s:.2f} s "
            f"({per_turn_ms:.0f} ms/turn; worker-side run {_stats([float(d) for d in batch.worker_ms])})"
        )

        turn_ok = statistics.median(run_ms) < TURN_TARGET_MS
        flat_ok = big_q.commit_queries == small_q.commit_queries
        batch_ok = batch.total_s < BATCH_TARGET_S
        print("\ntargets (informational):")
        print(
            f"  [{_mark(turn_ok)}] one turn under {TURN_TARGET_MS / 1000:.0f} s: "
            f"median {statistics.median(run_ms):.1f} ms at {big.agents} agents"
        )
        print(
            f"  [{_mark(flat_ok)}] commit query count does not grow with entities: "
            f"{small_q.commit_queries} at {small.agents + small.props} entities, "
            f"{big_q.commit_queries} at {big.agents + big.props}"
        )
        print(
            f"  [{_mark(batch_ok)}] {BATCH} turns end to end under {BATCH_TARGET_S:.0f} s: "
            f"{batch.total_s:.2f} s"
        )
    finally:
        try:
            if worker is not None:
                benchdb.stop_worker(worker)
            log.close()
            if django_ready:
                _queue_delete()
        finally:
            # Dropped even when stopping the worker failed: FORCE ends its connections.
            from django.db import connections

            connections.close_all()
            _recreate_database(create=False)
            print(f"\ndropped bench database {BENCH_DB_NAME!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
