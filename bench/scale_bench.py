"""Scale benchmark (issue 10): turns at scale, every figure from attempts run by a real Celery
worker (prefork) on a throwaway database.

Run with ``.venv/bin/python bench/scale_bench.py [--parts a,c,d,e,g]`` from the project folder;
DATABASE_URL must be unset. It (re)creates ``chukwa_scale_bench`` on the embedded PostgreSQL
server and drops it at the end; Celery messages go to a queue of their own (``bench-<pid>``).

Parts (the letters of issue 10's targets table):
  a  10 LLM agents, one-node tool loop (the ant_on_plate fixture's act node), model answering
     after 50 ms: seconds per turn, ``concurrent`` and ``per_subject_ordered``; the prompt
     characters per generation as the world grows (the fixture's prompt).
  c  one LLM agent, model at 0 ms: attempt started → ended, over one batch of ``--c-turns``
     (default 100: a run is long), after a warm-up batch of 10; the batch's first ten turns
     and the rest are shown apart (see part_c_d).
  d  the gap between turns of one batch: attempt i ended → attempt i+1 started.
  e  rule-policy turn at 100 / 500 / 1,000 agents (rooms of 20 agents and 10 props): attempt
     started → ended, and the ratio 1,000 / 100 (linear: 10).
  g  independent worlds over W worker processes: turns per second at W=1 and W=2 in turn, over
     a few rounds; the speedup of the median rates; CPU per turn of the workers and PostgreSQL.
Times come from the attempt rows (started_at, ended_at: claim to commit, written by the
worker). Targets are printed as PASS/FAIL, informational; the exit status is 0 unless
something errors.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import benchdb  # bench/ is the script's own folder, first on sys.path
import scale_worlds

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_scale_bench"
BENCH_QUEUE = f"bench-{os.getpid()}"
OWNER = "scale-bench"
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
os.environ["CHUKWA_CELERY_QUEUE"] = BENCH_QUEUE
os.environ["CHUKWA_LLM_API_KEY"] = "bench-key"

BATCH_TIMEOUT_S = 600.0

TARGETS = {
    "a": 0.15,  # s per turn
    "c": 10.0,  # ms
    "d": 2.0,  # ms
    "e500": 0.6,  # s
    "e1000": 1.2,  # s
    "g": 0.9,  # times W
}


def _mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):8.1f} ms  (min {min(values):.1f}, "
        f"max {max(values):.1f}, n={len(values)})"
    )


# --- worker and batches ----------------------------------------------------------------------


class Bench:
    def __init__(self, log: IO[bytes]) -> None:
        self.log = log
        self.worker: subprocess.Popen[bytes] | None = None
        self.worker_concurrency = 0
        self.worlds = 0

    def ensure_worker(self, concurrency: int) -> None:
        if self.worker is not None and self.worker_concurrency == concurrency:
            return
        self.stop_worker()
        name = f"bench-{os.getpid()}-{concurrency}@{socket.gethostname()}"
        self.worker = benchdb.start_worker(
            queue=BENCH_QUEUE, name=name, concurrency=concurrency, log=self.log
        )
        benchdb.wait_for_worker(self.worker, name=name, log=self.log)
        self.worker_concurrency = concurrency

    def stop_worker(self) -> None:
        if self.worker is not None:
            benchdb.stop_worker(self.worker)
        self.worker = None

    def world(self, scenario: dict[str, Any]) -> str:
        from scenarios_app.services import scenario_assemble
        from worlds_app.services import world_create

        result = scenario_assemble(data=scenario)
        self.worlds += 1
        slug = f"w{self.worlds}"
        world_create(data={"slug": slug, "scenario_ref": {"hash": result["scenario_hash"]}})
        return slug

    def run_batches(
        self, slugs: list[str], count: int, poll_s: float = 0.05
    ) -> tuple[float, list[list[Any]]]:
        """Enqueue ``count`` turns in each world at once; wait until all committed, looking
        every ``poll_s`` seconds. Returns the wall time and, per world, its attempt rows in
        order."""
        from worlds_app.models import AttemptStatus, TurnAttempt
        from worlds_app.services import turn_attempt_enqueue

        t0 = time.perf_counter()
        batches = [
            turn_attempt_enqueue(slug=s, count=count, requested_by=OWNER)["batch_id"] for s in slugs
        ]
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while True:
            rows = list(
                TurnAttempt.objects.filter(batch_id__in=batches).values_list("status", flat=True)
            )
            done = sum(s == AttemptStatus.COMMITTED for s in rows)
            if done == len(rows):
                wall = time.perf_counter() - t0
                break
            bad = [s for s in rows if s not in ("queued", "running", "committed")]
            if bad:
                reasons = list(
                    TurnAttempt.objects.filter(batch_id__in=batches)
                    .exclude(failure_reason="")
                    .values_list("failure_step", "failure_reason")[:3]
                )
                raise RuntimeError(f"a batch did not commit: {bad[:5]}; {reasons}")
            if self.worker is not None and self.worker.poll() is not None:
                raise RuntimeError(f"the worker exited:\n{benchdb.log_tail(self.log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"batches not committed in {BATCH_TIMEOUT_S:.0f} s")
            time.sleep(poll_s)
        per_world = [
            list(TurnAttempt.objects.filter(batch_id=b).order_by("batch_index")) for b in batches
        ]
        return wall, per_world


def _durations_ms(attempts: list[Any]) -> list[float]:
    return [(a.ended_at - a.started_at).total_seconds() * 1000 for a in attempts]


def _gaps_ms(attempts: list[Any]) -> list[float]:
    return [
        (b.started_at - a.ended_at).total_seconds() * 1000 for a, b in itertools.pairwise(attempts)
    ]


# --- parts -----------------------------------------------------------------------------------


# One automatic model server for the whole run, started before any worker (which inherits its
# URL); each part sets its answer delay.
LLM = scale_worlds.auto_llm()
os.environ["CHUKWA_LLM_BASE_URL"] = LLM.base_url


@contextmanager
def _llm(delay_s: float) -> Iterator[Any]:
    LLM.delay_s = delay_s
    yield LLM


def _peak_in_flight(attempts: list[Any]) -> int:
    """The most LLM generations of one attempt whose trace rows overlap in time."""
    from cognition_app.models import SourceInvocation

    peak = 0
    for attempt in attempts:
        spans = SourceInvocation.objects.filter(
            attempt_id=attempt.pk, kind="llm_generation"
        ).values_list("started_at", "ended_at")
        edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans if e])
        level = 0
        for _, step in edges:
            level += step
            peak = max(peak, level)
    return peak


def part_a(bench: Bench, turns: int) -> dict[str, float]:
    from chukwa_core.errors import ChukwaError
    from cognition_app.models import LlmCall

    print("\n== a. 10 LLM agents, one llm_tool_loop node, model answering after 50 ms ==")
    bench.ensure_worker(1)
    results: dict[str, float] = {}
    with _llm(0.05):
        for execution in ("concurrent", "per_subject_ordered"):
            scenario = scale_worlds.llm_scenario(
                agents=10, props=10, rooms=10, execution=execution, slug=f"scale_a_{execution}"
            )
            try:
                slug = bench.world(scenario)
            except ChukwaError as exc:
                print(
                    f"  {execution}: REFUSED by validation ({exc.code}: {exc.message}); this "
                    f"mode arrives with the concurrent-execution work (issue 10)"
                )
                continue
            bench.run_batches([slug], 1)  # warm-up (conformance probe, first connections)
            wall, (attempts,) = bench.run_batches([slug], turns)
            durations = _durations_ms(attempts)
            per_turn = statistics.median(durations) / 1000
            results[execution] = per_turn
            print(
                f"  {execution:<20} {per_turn:6.3f} s per turn (attempt started→ended, median "
                f"of {turns}); {turns} turns in {wall:.2f} s wall; peak generations in flight "
                f"{_peak_in_flight(attempts)}"
            )
    print("\n   prompt characters per generation as the world grows (ant_on_plate's act prompt,")
    print("   10 agents, one turn each; the model is told what the prompt template shows):")
    with _llm(0.0):
        for props, rooms in ((10, 10), (100, 10), (400, 10), (400, 1)):
            scenario = scale_worlds.llm_scenario(
                agents=10,
                props=props,
                rooms=rooms,
                execution="per_subject_ordered",
                slug=f"scale_prompt_{props}_{rooms}",
            )
            slug = bench.world(scenario)
            _, (attempts,) = bench.run_batches([slug], 1)
            sizes = [
                sum(len(m["content"]) for m in messages)
                for messages in LlmCall.objects.filter(
                    invocation__attempt_id=attempts[0].pk
                ).values_list("messages", flat=True)
            ]
            print(
                f"  {10 + props:>4} entities in {rooms:>2} rooms: "
                f"{statistics.mean(sizes):8.0f} prompt chars per generation (n={len(sizes)})"
            )
    return results


def part_c_d(bench: Bench, turns: int) -> tuple[float, float]:
    """(c) and (d) from one batch of ``turns``, after a warm-up batch of 10 turns: the
    worker's statements are then prepared on its connection (psycopg prepares a statement
    after its fifth run there), as in a worker that has run a while."""
    print("\n== c/d. one LLM agent, model at 0 ms: a batch of turns ==")
    bench.ensure_worker(1)
    with _llm(0.0):
        scenario = scale_worlds.llm_scenario(
            agents=1, props=10, rooms=1, execution="per_subject_ordered", slug="scale_c"
        )
        slug = bench.world(scenario)
        bench.run_batches([slug], 10)  # warm-up
        wall, (attempts,) = bench.run_batches([slug], turns)
    durations = _durations_ms(attempts)
    gaps = _gaps_ms(attempts)
    print(f"  c. attempt started → ended     {_ms(durations)}")
    if turns > 20:
        # Until 2026-11-27 every batch's first ten turns took 10-20 ms against 6-9 for the rest:
        # Celery closed the worker's database connection around each task, so each batch began
        # on a new PostgreSQL backend (cold caches) with its statements parsed and planned again
        # until psycopg prepared them. Workers keep their connection now (chukwa_site/celery.py);
        # the two figures show that a batch no longer starts slow.
        print(f"     {'its first ten turns':<27} {_ms(durations[:10])}")
        print(f"     {f'turns 11–{turns}':<27} {_ms(durations[10:])}")
    print(f"  d. gap between turns of a batch {_ms(gaps)}")
    print(f"     {turns} turns in {wall:.2f} s wall ({wall / turns * 1000:.1f} ms per turn)")
    return statistics.median(durations), statistics.median(gaps)


def part_e(bench: Bench, turns: int, sizes: list[int]) -> dict[int, float]:
    print("\n== e. rule-policy turn (rooms of 20 agents + 10 props) ==")
    bench.ensure_worker(1)
    medians: dict[int, float] = {}
    for agents in sizes:
        slug = bench.world(scale_worlds.rule_scenario(agents, f"scale_e_{agents}"))
        bench.run_batches([slug], 1)  # warm-up
        _, (attempts,) = bench.run_batches([slug], turns)
        durations = _durations_ms(attempts)
        medians[agents] = statistics.median(durations) / 1000
        print(f"  {agents:>5} agents: {_ms(durations)}")
    if 100 in medians:
        for agents in sizes:
            if agents != 100:
                ratio = medians[agents] / medians[100]
                print(f"  ratio {agents} / 100 agents: {ratio:5.2f} (linear: {agents / 100:.0f})")
    return medians


def part_g(bench: Bench, turns: int, agents: int, max_w: int, rounds: int) -> dict[int, float]:
    import psutil

    print(f"\n== g. independent worlds ({agents} rule-policy agents each) over W processes ==")
    print(
        "  turns per second from the attempt rows (first claim → last commit), so the bench's "
        "polling and the enqueue are not in it; the wall clock's figure is shown beside it. "
        f"W=1..{max_w} in turn, {rounds} rounds (this machine's cores are shared: one short "
        "window is noisy); CPU per turn of the worker processes and of every PostgreSQL process"
    )
    rates: dict[int, list[float]] = {w: [] for w in range(1, max_w + 1)}
    machine_ratios: list[float] = []
    busy_alone: list[float] = []  # the machine's busy cores while one process ran turns
    for r in range(1, rounds + 1):
        machine_ratios.append(benchdb.machine_parallel_ratio())
        print(
            f"  round {r}: the machine now gives two pure-Python loops at once "
            f"{machine_ratios[-1]:.2f}× the work of one"
        )
        for w in range(1, max_w + 1):
            bench.ensure_worker(w)
            slugs = [
                bench.world(scale_worlds.rule_scenario(agents, f"scale_g_{r}_{w}_{i}"))
                for i in range(w)
            ]
            bench.run_batches(slugs, 1)  # warm-up, every process
            groups = {
                "worker": _worker_tree(bench),
                "PostgreSQL": benchdb.postgres_processes(),
                "bench": [psutil.Process()],
            }
            known = {p.pid for procs in groups.values() for p in procs}
            groups["other"] = [p for p in psutil.process_iter() if p.pid not in known]
            before, machine = benchdb.cpu_sample(groups), psutil.cpu_times()
            # The rates come from the rows: polling only takes the cores from the workers (this
            # process took 1 to 3 ms of CPU per turn looking every 50 ms), so it looks less often.
            wall, per_world = bench.run_batches(slugs, turns, poll_s=0.25)
            cpu = benchdb.cpu_used(before, benchdb.cpu_sample(groups))
            spent = {
                k: (getattr(psutil.cpu_times(), k, 0.0) - getattr(machine, k, 0.0)) / wall
                for k in ("user", "system", "idle", "iowait", "steal")
            }
            attempts = [a for world in per_world for a in world]
            span = (
                max(a.ended_at for a in attempts) - min(a.started_at for a in attempts)
            ).total_seconds()
            rate = len(attempts) / span
            rates[w].append(rate)
            if w == 1:
                busy_alone.append(spent["user"] + spent["system"])
            per_turn = {k: v / len(attempts) * 1000 for k, v in cpu.items()}
            print(
                f"  round {r}, W={w}: {w} worlds × {turns} turns in {span:.2f} s → {rate:.1f} "
                f"turns/s (wall clock {wall:.2f} s → {len(attempts) / wall:.1f} turns/s); CPU "
                f"per turn: worker {per_turn['worker']:.1f} ms, PostgreSQL "
                f"{per_turn['PostgreSQL']:.1f} ms, this bench (polling) {per_turn['bench']:.1f} "
                f"ms, other processes {per_turn['other']:.1f} ms; cores busy {sum(cpu.values()) / wall:.2f}"
            )
            print(
                "    the machine meanwhile, in cores: "
                + ", ".join(f"{k} {v:.2f}" for k, v in spent.items())
            )
    medians = {w: statistics.median(v) for w, v in rates.items()}
    for w in range(2, max_w + 1):
        ratios = ", ".join(f"{b / a:.2f}" for a, b in zip(rates[1], rates[w], strict=True))
        print(
            f"  speedup at W={w}: {medians[w] / medians[1]:.2f}× from the median rates "
            f"(per round: {ratios}; target ≥ {0.9 * w:.1f}×)"
        )
    if busy_alone and max_w >= 2:
        busy = statistics.median(busy_alone)
        print(
            f"  with one process running turns the machine was already {busy:.2f} cores busy "
            "(the worker, PostgreSQL, the kernel's part of their round trips): on "
            f"{os.cpu_count()} cores, W processes can do at most {(os.cpu_count() or 1) / busy:.2f}× "
            "the turns of one"
        )
    print(
        f"  the machine, two pure-Python loops at once: {statistics.median(machine_ratios):.2f}× "
        f"the work of one (median of {rounds}; per round: "
        + ", ".join(f"{m:.2f}" for m in machine_ratios)
        + ")"
    )
    return medians


def _worker_tree(bench: Bench) -> list[Any]:
    if bench.worker is None:
        raise RuntimeError("no worker")
    return benchdb.process_tree(bench.worker.pid)


# --- main ------------------------------------------------------------------------------------


def _batch_size(text: str) -> int:
    """A count of turns run as one batch: 1 to the most one batch may hold (100)."""
    import django

    django.setup()  # settings only (no database): the limit is the service's own
    from worlds_app.services.attempts import MAX_BATCH

    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= count <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be 1…{MAX_BATCH} (one batch), got {count}")
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--parts", default="a,c,e,g", help="comma-separated: a,c (c includes d),e,g"
    )
    parser.add_argument("--turns", type=_batch_size, default=10, help="turns per measured batch")
    parser.add_argument(
        "--c-turns",
        type=_batch_size,
        default=None,
        help="parts c and d: turns in the batch (default: the most one batch holds)",
    )
    parser.add_argument("--sizes", default="100,500,1000", help="part e: agent counts")
    parser.add_argument("--g-agents", type=int, default=100, help="part g: agents per world")
    parser.add_argument("--g-workers", type=int, default=2, help="part g: the largest W")
    parser.add_argument(
        "--g-turns", type=_batch_size, default=40, help="part g: turns per world (a longer window)"
    )
    parser.add_argument("--g-rounds", type=int, default=3, help="part g: rounds of W=1..max")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set, so CHUKWA_DB_NAME would not pick the bench database")
        return 2
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (shared: treat as noisy)")
    benchdb.recreate_database(BENCH_DB_NAME, create=True)
    log = tempfile.TemporaryFile(mode="a+b")
    bench = Bench(log)
    django_ready = False
    summary: list[str] = []
    try:
        import django

        django.setup()
        django_ready = True
        from django.conf import settings
        from django.core.management import call_command

        if settings.DATABASES["default"]["NAME"] != BENCH_DB_NAME:
            raise RuntimeError("settings do not point at the bench database")
        call_command("migrate", verbosity=0)
        if "a" in parts:
            a = part_a(bench, args.turns)
            if "concurrent" in a:
                summary.append(
                    f"[{_mark(a['concurrent'] <= TARGETS['a'])}] (a) 10 agents at 50 ms, "
                    f"concurrent: {a['concurrent']:.3f} s per turn (target ≤ {TARGETS['a']})"
                )
            else:
                summary.append("[FAIL] (a) the concurrent mode is refused by validation")
        if "c" in parts or "d" in parts:
            from worlds_app.services.attempts import MAX_BATCH

            c, d = part_c_d(bench, args.c_turns or MAX_BATCH)
            summary.append(
                f"[{_mark(c <= TARGETS['c'])}] (c) single-agent turn at 0 ms: {c:.1f} ms "
                f"(target ≤ {TARGETS['c']:.0f} ms)"
            )
            summary.append(
                f"[{_mark(d <= TARGETS['d'])}] (d) gap between turns of a batch: {d:.1f} ms "
                f"(target ≤ {TARGETS['d']:.0f} ms)"
            )
        if "e" in parts:
            sizes = [int(s) for s in args.sizes.split(",")]
            e = part_e(bench, max(3, args.turns // 2), sizes)
            for agents, key in ((500, "e500"), (1000, "e1000")):
                if agents in e:
                    summary.append(
                        f"[{_mark(e[agents] <= TARGETS[key])}] (e) rule-policy turn at {agents} "
                        f"agents: {e[agents]:.3f} s (target ≤ {TARGETS[key]} s)"
                    )
        if "g" in parts:
            g = part_g(bench, args.g_turns, args.g_agents, args.g_workers, args.g_rounds)
            for w in range(2, args.g_workers + 1):
                speedup = g[w] / g[1]
                summary.append(
                    f"[{_mark(speedup >= TARGETS['g'] * w)}] (g) {w} worlds over {w} "
                    f"processes: {speedup:.2f}× from the median of {args.g_rounds} rounds "
                    f"(target ≥ {TARGETS['g'] * w:.1f}×)"
                )
        print("\ntargets (informational):")
        for line in summary:
            print(f"  {line}")
    finally:
        try:
            bench.stop_worker()
            log.close()
            LLM.stop()
            if django_ready:
                benchdb.queue_delete(BENCH_QUEUE)
        finally:
            from django.db import connections

            connections.close_all()
            benchdb.recreate_database(BENCH_DB_NAME, create=False)
            print(f"\ndropped bench database {BENCH_DB_NAME!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
