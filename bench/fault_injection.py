"""Fault injection: kill -9 Celery workers at chosen moments, restart Redis and PostgreSQL while
turns run, then check the database's invariants (tests/support/invariants.py).

    .venv/bin/python bench/fault_injection.py --kills 100 --redis-restarts 3 --pg-restarts 3

Everything runs on a throwaway stack: a fresh data folder (CHUKWA_DATA_DIR) with its own
embedded PostgreSQL and Redis, the scripted OpenAI-compatible server (slow streams), a slow toy
tool endpoint, a control worker (reaper/re-drive and beat, never killed) and an attempt worker
(prefork, 2 processes) that is killed and restarted over and over. Worlds of three kinds keep
turns queued: two LLM agents (kills land mid-generation), a rule agent calling a slow tool (kills
land mid-tool-call) and fast rule agents (kills land near commit); other kills land at random.
A stall stops the whole attempt worker (SIGSTOP, its lease heartbeat too) while a generation is
in flight, until the reaper has interrupted the attempt; the worker then wakes (SIGCONT) and is
killed a moment later: whatever it opened after waking would be left running.
PostgreSQL restarts alternate between a fast shutdown and an immediate one (a crash, with
recovery), the latter just after a model request went out: every request the scripted model
received must still have its invocation row (written before any byte is sent).
Leases and the reaper period are short (seconds) so dead workers' attempts settle quickly.

Prints its figures (kills by moment and kind, attempts by status, Redis and PostgreSQL
restarts, invariant violations, wall time) and exits 1 on any violation, on a run that
committed nothing, or if the stack did not settle; ``--json PATH`` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

import fault_experiments  # noqa: E402 - bench/ is the script's own folder, first on sys.path

PHASES = ("generation", "tool", "commit", "random")
ATTEMPT_QUEUE = "chukwa"
CONTROL_QUEUE = "chukwa-control"
EXPERIMENT_QUEUE = "chukwa-experiments"
MEASURE_QUEUE = "chukwa-measure"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100, help="worker kills (kill -9)")
    parser.add_argument("--redis-restarts", type=int, default=3)
    parser.add_argument("--pg-restarts", type=int, default=3)
    parser.add_argument(
        "--stalls",
        type=int,
        default=0,
        help="workers stopped (SIGSTOP) mid-generation until the reaper interrupts their "
        "attempt, then woken and killed a moment later",
    )
    parser.add_argument("--worlds", type=int, default=2, help="worlds of each kind")
    parser.add_argument(
        "--experiment-replicates",
        type=int,
        default=2,
        help="replicates per arm of the experiment (2 arms, judged, with a budget); 0: none",
    )
    parser.add_argument(
        "--experiment-budget", type=int, default=300_000, help="its max_tokens_total"
    )
    parser.add_argument("--limit-lease", type=float, default=3.0, help="CHUKWA_LIMIT_LEASE_SECONDS")
    parser.add_argument("--phases", default=",".join(PHASES), help="kill moments to cycle")
    parser.add_argument("--lease", type=int, default=3, help="CHUKWA_ATTEMPT_LEASE_SECONDS")
    parser.add_argument("--period", type=float, default=1.0, help="reaper period, seconds")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--settle-timeout", type=float, default=180.0)
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    parser.add_argument("--keep", action="store_true", help="keep the data folder and logs")
    return parser.parse_args(argv)


# --- the outside world: a slow tool endpoint and the scripted model ------------------------


class _ToolHandler(BaseHTTPRequestHandler):
    """POST /buy_candy → always dispensed, after a random delay (so kills land mid-call)."""

    protocol_version = "HTTP/1.1"
    delay_range = (0.3, 1.2)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(random.uniform(*self.delay_range))
        body = json.dumps({"result": "dispensed", "item": "candy_bar", "remaining": 7}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _ToolServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The worker calling us was killed mid-call: expected here, nothing to report.
        return


def start_tool_server() -> ThreadingHTTPServer:
    server = _ToolServer(("127.0.0.1", 0), _ToolHandler)
    threading.Thread(target=server.serve_forever, daemon=True, name="tool-server").start()
    return server


def llm_reply(request: dict[str, Any]) -> Any:
    """A valid final patch for the ant, streamed slowly enough (about 0.5 to 2 s) to be killed mid-way."""
    from tests.support.scripted_llm import Reply

    narration = "The ant circles the crumb, tasting the air. " * 3
    text = json.dumps(
        {
            "kind": "final_patch",
            "patch": {
                "narration": narration.strip(),
                "effects": [
                    {"op": "set_entity_state", "entity_id": "ant", "state": "circling the crumb"}
                ],
            },
        }
    )
    return Reply(text=text, chunk_size=8, chunk_delay_s=random.uniform(0.02, 0.06))


def any_reply(request: dict[str, Any]) -> Any:
    """A judge's score to a judge, the ant's patch to anyone else."""
    if fault_experiments.is_judge(request):
        return fault_experiments.judge_reply()
    return llm_reply(request)


# --- scenarios ------------------------------------------------------------------------------


def _tool_scenario() -> dict[str, Any]:
    schemas = json.loads(
        (PROJECT_DIR / "scenarios_app/scenario_fixtures/schemas/park_schemas.json").read_text()
    )
    tool = {
        "name": "buy_candy",
        "description": "Buy a candy bar.",
        "source_ref": {
            "inline": {
                "version": 1,
                "label": "slow_vending_machine",
                "interface": {
                    "name": "http_json",
                    "method": "POST",
                    "url_env": "CHUKWA_TOY_VENDING_URL",
                    "path": "/buy_candy",
                    "timeout_ms": 10000,
                },
            }
        },
        "arguments_schema_ref": {"inline": schemas["buy_candy_arguments"]},
        "result_schema_ref": {"inline": schemas["buy_candy_result"]},
    }
    rule = {
        "id": "buy",
        "when": [],
        "tool_call": {"tool": "buy_candy", "arguments": {"item": "candy_bar"}},
        "intent": "buy a candy bar",
        "plan": [
            {
                "op": "set_entity_state",
                "entity_id": "{{subject.id}}",
                "state": "turn {{world.attempted_turn}}: the machine said {{tool.result.result}}",
            }
        ],
        "memory": "Turn {{world.attempted_turn}}: {{tool.result.result}}.",
        "narration": "{{subject.name}} presses the button.",
    }
    workflow = {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {"id": "decide", "type": "rule_policy", "available_tools": [tool], "rules": [rule]}
        ],
        "apply": {"from": "decide.final"},
    }
    return {
        "scenario_slug": "fault_buyer",
        "description": "One rule agent calling a slow vending machine every turn.",
        "chronon_seconds": 60,
        "cognition_profiles": {"buyer": {"inline": {"workflow": {"inline": workflow}}}},
        "environments": {"park": {"inline": "A park with a vending machine."}},
        "entities": [
            {
                "inline": {
                    "id": "ann",
                    "name": "Ann",
                    "state": "hungry",
                    "environment": "park",
                    "kind": {"agent": {"goal": "eat", "memory": "", "cognition_profile": "buyer"}},
                }
            }
        ],
    }


def create_worlds(per_kind: int, experiment: tuple[int, int] = (0, 0)) -> dict[str, str]:
    """slug → kind ("llm" | "tool" | "fast" | "experiment"); ``experiment``: its replicates per
    arm (0: none) and its budget."""
    from scenarios_app.fixture_files import load_fixture
    from scenarios_app.services import scenario_assemble
    from worlds_app.services import world_create

    two_ants = load_fixture("ant_on_plate")
    second = json.loads(json.dumps(two_ants["entities"][0]))
    assert second["inline"]["id"] == "ant"
    second["inline"].update(id="ant_b", name="Second ant")
    two_ants["entities"].insert(1, second)
    bodies = {
        "llm": two_ants,
        "tool": _tool_scenario(),
        "fast": load_fixture("picnic_rules"),
    }
    worlds: dict[str, str] = {}
    for kind, body in bodies.items():
        body = {k: v for k, v in body.items() if k not in ("name", "note")}
        scenario_hash = scenario_assemble(data=body)["scenario_hash"]
        for i in range(1, per_kind + 1):
            slug = f"{kind}-{i}"
            world_create(data={"slug": slug, "scenario_ref": {"hash": scenario_hash}})
            worlds[slug] = kind
    replicates, budget = experiment
    if replicates:
        for slug in fault_experiments.create_experiment(two_ants, replicates, budget):
            worlds[slug] = "experiment"
    return worlds


# --- processes ------------------------------------------------------------------------------


class Workers:
    """The control worker (reaper/re-drive + beat; left alone) and the attempt worker (killed
    and restarted). Each has a session of its own so a kill takes its whole process group.

    Like a real deployment's process supervisor, a thread restarts the attempt worker whenever
    it is gone: after a kill of the whole group, and when Celery exits by itself (a pool
    process killed while the pool is still starting makes the worker give up)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.generation = 0
        self.attempts: subprocess.Popen[bytes] | None = None
        self.control: subprocess.Popen[bytes] | None = None
        self.exits_by_themselves = 0
        self._logs: list[IO[bytes]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True, name="supervisor")

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        command = [sys.executable, "-m", "celery", "-A", "chukwa_site", "worker", *args]
        command += ["--hostname", f"{name}@%h", "--loglevel", "WARNING"]
        # Workers log their warnings (deferred dispatches, lease renewals that failed).
        env = {**os.environ, "CHUKWA_LOG_LEVEL": "WARNING"}
        return subprocess.Popen(
            command,
            cwd=PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self) -> None:
        schedule = self.log_dir / "celerybeat-schedule"
        self.control = self._spawn(
            "control",
            ["--pool", "solo", "-Q", CONTROL_QUEUE, "--beat", "--schedule", str(schedule)],
        )
        with self._lock:
            self._start_attempts()
        self._supervisor.start()

    def _start_attempts(self) -> None:
        self.generation += 1
        # A new hostname per start: a lease names the worker process that holds it.
        self.attempts = self._spawn(
            f"attempts-{self.generation}",
            [
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "-Q",
                f"{ATTEMPT_QUEUE},{EXPERIMENT_QUEUE},{MEASURE_QUEUE}",
            ],
        )

    def _supervise(self) -> None:
        while not self._stopping.wait(0.25):
            with self._lock:
                if self.attempts is not None and self.attempts.poll() is not None:
                    self.exits_by_themselves += 1
                    self._start_attempts()

    def kill_group(self, restart_after: float) -> None:
        """kill -9 of the whole worker (main process and pool children): a machine dying."""
        with self._lock:
            assert self.attempts is not None
            os.killpg(self.attempts.pid, signal.SIGKILL)
            self.attempts.wait(timeout=30)
            time.sleep(restart_after)
            self._start_attempts()

    def stop_group(self) -> int:
        """SIGSTOP of the whole attempt worker (a paused VM, a long GC pause): nothing of it
        runs, its lease heartbeat neither. Returns its pid for :meth:`resume_group`."""
        with self._lock:
            assert self.attempts is not None
            os.killpg(self.attempts.pid, signal.SIGSTOP)
            return self.attempts.pid

    @staticmethod
    def resume_group(pid: int) -> None:
        os.killpg(pid, signal.SIGCONT)

    def kill_child(self) -> bool:
        """kill -9 of one pool process: the main process survives and replaces it."""
        import psutil

        with self._lock:
            assert self.attempts is not None
            try:
                children = psutil.Process(self.attempts.pid).children()
            except psutil.NoSuchProcess:
                return False  # it exited by itself just now; the supervisor restarts it
            if not children:
                return False
            random.choice(children).send_signal(signal.SIGKILL)
            return True

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join(timeout=5)
        for proc in (self.attempts, self.control):
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for log in self._logs:
            log.close()


# --- figures --------------------------------------------------------------------------------


@dataclass
class Figures:
    kills: int = 0
    kills_by_moment: Counter[str] = field(default_factory=Counter)
    kills_by_kind: Counter[str] = field(default_factory=Counter)
    redis_restarts: int = 0
    redis_restarts_by_kind: Counter[str] = field(default_factory=Counter)
    pg_restarts: int = 0
    pg_restarts_by_kind: Counter[str] = field(default_factory=Counter)
    stalls: int = 0
    stalls_reaped: int = 0  # the stalled attempt was interrupted before the worker woke
    worker_starts: int = 0
    worker_exits_by_themselves: int = 0
    batches_enqueued: int = 0
    enqueued_while_broker_down: int = 0
    enqueue_refused_database_down: int = 0
    dispatches_deferred: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    # failed attempts by their reason's first words (none expected: a restart is waited out)
    failures: Counter[str] = field(default_factory=Counter)
    turns_committed: int = 0
    requests_sent: int = 0  # generation requests the scripted model received
    settled: bool = False
    experiment: dict[str, Any] = field(default_factory=dict)  # fault_experiments.check
    violations: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: dict(v) if isinstance(v, Counter) else v for k, v in self.__dict__.items()}


class _DeferredDispatches(logging.Handler):
    """Counts the warnings of kicks that could not reach the broker."""

    def __init__(self, figures: Figures) -> None:
        super().__init__(logging.WARNING)
        self.figures = figures

    def emit(self, record: logging.LogRecord) -> None:
        if "not dispatched" in record.getMessage():
            self.figures.dispatches_deferred += 1


# --- the run --------------------------------------------------------------------------------


def _db_errors() -> tuple[type[Exception], ...]:
    from django.db import InterfaceError, OperationalError

    return (OperationalError, InterfaceError)


def _reset_connection() -> None:
    from django.db import connection

    connection.close()


class Feeder(threading.Thread):
    """Keeps every world with turns queued (batches of 1 to 3), through every outage."""

    def __init__(self, worlds: list[str], figures: Figures, rng: random.Random) -> None:
        super().__init__(daemon=True, name="feeder")
        self.worlds = worlds
        self.figures = figures
        self.rng = rng
        self.stopping = threading.Event()
        self.broker_down = threading.Event()

    def run(self) -> None:
        from worlds_app.models import AttemptStatus, TurnAttempt
        from worlds_app.services import turn_attempt_enqueue

        try:
            while not self.stopping.wait(0.3):
                for slug in self.worlds:
                    try:
                        active = TurnAttempt.objects.filter(
                            world__slug=slug,
                            status__in=[AttemptStatus.QUEUED, AttemptStatus.RUNNING],
                        ).count()
                        if active >= 2:
                            continue
                        turn_attempt_enqueue(
                            slug=slug, count=self.rng.randint(1, 3), requested_by="fault"
                        )
                    except _db_errors():
                        # PostgreSQL is down: the API would answer 503; try again later.
                        self.figures.enqueue_refused_database_down += 1
                        _reset_connection()
                        continue
                    self.figures.batches_enqueued += 1
                    if self.broker_down.is_set():
                        self.figures.enqueued_while_broker_down += 1
        finally:
            _reset_connection()


def _poll(predicate: Any, timeout: float, interval: float = 0.02) -> bool:
    """Wait until ``predicate()`` holds; database errors (an outage) count as 'not yet'."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except _db_errors():
            _reset_connection()
        time.sleep(interval)
    return False


def _moment_reached(moment: str) -> Any:
    from cognition_app.models import InvocationStatus, LlmCall, LlmChunk, SourceInvocation
    from worlds_app.models import AttemptStatus, TurnAttempt

    running = AttemptStatus.RUNNING
    if moment == "generation":  # a stream is in flight: chunks stored, the call still running
        return lambda: LlmChunk.objects.filter(
            call__status=InvocationStatus.RUNNING, call__invocation__attempt__status=running
        ).exists()
    if moment == "tool":
        return lambda: SourceInvocation.objects.filter(
            kind="model_elected_tool", status=InvocationStatus.RUNNING, attempt__status=running
        ).exists()
    if moment == "commit":  # the last reply is in: validation, apply and commit are next
        return lambda: (
            LlmCall.objects.filter(
                status=InvocationStatus.SUCCEEDED, invocation__attempt__status=running
            ).exists()
            or TurnAttempt.objects.filter(status=running, world__slug__startswith="fast-").exists()
        )
    return lambda: True


def kill_once(workers: Workers, figures: Figures, moment: str, rng: random.Random) -> None:
    if moment == "random":
        time.sleep(rng.uniform(0.0, 2.5))
        reached = True
    else:
        # up to 45 s: with an experiment beside them, the aimed-at worlds may wait for a slot
        reached = _poll(_moment_reached(moment), timeout=45.0)
        time.sleep(rng.uniform(0.0, 0.05))
    kind = "child" if rng.random() < 0.25 else "group"
    if kind == "child" and not workers.kill_child():
        kind = "group"
    if kind == "group":
        workers.kill_group(restart_after=rng.uniform(0.0, 0.5))
    figures.kills += 1
    figures.kills_by_moment[moment if reached else f"{moment}-not-reached"] += 1
    figures.kills_by_kind[kind] += 1
    time.sleep(rng.uniform(0.2, 1.0))  # let some turns commit between kills


def stall_once(workers: Workers, figures: Figures, rng: random.Random, lease: float) -> None:
    """Stop the worker mid-generation until the reaper has interrupted its attempts, wake it
    and kill it a moment later."""
    from worlds_app.models import AttemptStatus, TurnAttempt

    _poll(_moment_reached("generation"), timeout=15.0)
    pid = workers.stop_group()
    running = list(
        TurnAttempt.objects.filter(status=AttemptStatus.RUNNING).values_list("id", flat=True)
    )
    reaped = _poll(
        lambda: (
            not TurnAttempt.objects.filter(pk__in=running, status=AttemptStatus.RUNNING).exists()
        ),
        timeout=lease * 3 + 15,
        interval=0.1,
    )
    workers.resume_group(pid)
    time.sleep(rng.uniform(0.1, 0.6))  # awake: it reads the rest of its stream, goes on
    workers.kill_group(restart_after=rng.uniform(0.0, 0.5))
    figures.stalls += 1
    figures.stalls_reaped += bool(running) and reaped
    time.sleep(rng.uniform(0.2, 1.0))


def _call_just_opened() -> bool:
    from datetime import timedelta

    from django.utils import timezone

    from cognition_app.models import InvocationStatus, LlmCall

    return LlmCall.objects.filter(
        status=InvocationStatus.RUNNING,
        started_at__gte=timezone.now() - timedelta(milliseconds=50),
    ).exists()


def _attempt_running() -> bool:
    from worlds_app.models import AttemptStatus, TurnAttempt

    return TurnAttempt.objects.filter(status=AttemptStatus.RUNNING).exists()


def _enqueue_everywhere(worlds: list[str]) -> int:
    """One more turn for every world, now (during an outage)."""
    from worlds_app.services import turn_attempt_enqueue

    for slug in worlds:
        turn_attempt_enqueue(slug=slug, count=1, requested_by="fault")
    return len(worlds)


def restart_redis(feeder: Feeder, figures: Figures, rng: random.Random) -> None:
    """Clean shutdown or kill -9 (then up to a second of appended writes may be lost), while
    an attempt runs; turns are enqueued while Redis is away (their dispatch must not be lost)."""
    from chukwa_site import embedded

    kind = "kill" if figures.redis_restarts % 2 else "shutdown"
    _poll(_attempt_running, timeout=15.0)
    feeder.broker_down.set()
    if kind == "kill":
        pid = int((embedded.data_dir() / "redis" / "redis.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
    else:
        embedded.redis_stop()
    figures.enqueued_while_broker_down += _enqueue_everywhere(feeder.worlds)
    time.sleep(rng.uniform(1.0, 3.0))  # the feeder keeps enqueueing meanwhile
    embedded.redis_ensure()
    feeder.broker_down.clear()
    figures.redis_restarts += 1
    figures.redis_restarts_by_kind[kind] += 1


def restart_postgres(figures: Figures, rng: random.Random) -> None:
    """A fast shutdown (clients disconnected) or an immediate one (a crash, with recovery),
    while an attempt runs (its heartbeat must outlive the outage or the reaper settle it)."""
    from chukwa_site import embedded

    kind = "immediate" if figures.pg_restarts % 2 else "fast"
    _poll(_attempt_running, timeout=15.0)
    if kind == "immediate":
        # the unlucky moment: a model request has just been sent (its rows just committed)
        _poll(_call_just_opened, timeout=15.0, interval=0.01)
    try:
        embedded.postgres_stop(mode=kind)
    except subprocess.CalledProcessError:
        _show_postgres_state()
        raise
    time.sleep(rng.uniform(1.0, 3.0))
    embedded.postgres_ensure()
    _reset_connection()
    figures.pg_restarts += 1
    figures.pg_restarts_by_kind[kind] += 1


def _show_postgres_state() -> None:
    """What kept PostgreSQL from stopping: its log and its processes (for the operator)."""
    import psutil

    from chukwa_site import embedded

    pgdata = embedded.data_dir() / "postgres"
    print("--- PostgreSQL log tail ---", file=sys.stderr)
    print("\n".join((pgdata / "log").read_text().splitlines()[-60:]), file=sys.stderr)
    print("--- PostgreSQL processes ---", file=sys.stderr)
    for proc in psutil.process_iter(["pid", "ppid", "cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "postgres" in cmdline and (str(pgdata) in cmdline or proc.info["ppid"] > 1):
            print(
                proc.info["pid"],
                proc.info["ppid"],
                proc.info["status"],
                cmdline[:160],
                file=sys.stderr,
            )


def _schedule(args: argparse.Namespace, rng: random.Random) -> list[str]:
    """Kills with the Redis and PostgreSQL restarts spread evenly among them."""
    phases = [p for p in args.phases.split(",") if p]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown or not phases:
        raise SystemExit(f"--phases: unknown {unknown}; choose from {', '.join(PHASES)}")
    kills = [phases[i % len(phases)] for i in range(args.kills)]
    rng.shuffle(kills)
    restarts = ["redis"] * args.redis_restarts + ["pg"] * args.pg_restarts
    restarts += ["stall"] * args.stalls
    rng.shuffle(restarts)
    plan = list(kills)
    for i, restart in enumerate(restarts):
        plan.insert((i + 1) * len(plan) // (len(restarts) + 1), restart)
    return plan


def settle(timeout: float) -> bool:
    """Wait until no attempt is queued or running (the reaper settles dead workers' ones)."""
    from worlds_app.models import AttemptStatus, TurnAttempt

    return _poll(
        lambda: (
            not TurnAttempt.objects.filter(
                status__in=[AttemptStatus.QUEUED, AttemptStatus.RUNNING]
            ).exists()
        ),
        timeout=timeout,
        interval=0.5,
    )


def unrecorded_requests(requests: list[dict[str, Any]]) -> list[str]:
    """A generation's rows are written before any byte is sent, so every request the
    model received has its invocation, found by its request key (sha256 of the source hash and
    the request's canonical bytes, which are the bytes sent). A PostgreSQL crash must not take
    back a row whose request went out."""
    from chukwa_core.hashing import canonical_json_bytes
    from cognition_app.models import InvocationKind, SourceInvocation
    from cognition_app.sources.replay import request_key_of

    rows = SourceInvocation.objects.filter(
        kind__in=[InvocationKind.LLM_GENERATION, InvocationKind.JUDGE]  # a judge's too
    )
    keys = set(rows.values_list("request_key", flat=True))
    sources = set(rows.values_list("source_hash", flat=True).distinct())
    missing = []
    for number, body in enumerate(requests):
        sent = canonical_json_bytes(body)
        if not any(request_key_of(source, sent) in keys for source in sources):
            missing.append(f"request {number + 1} reached the model with no invocation row")
    return missing


def collect(figures: Figures, requests: list[dict[str, Any]]) -> None:
    from django.db.models import Count

    from tests.support.invariants import check_invariants
    from worlds_app.models import AttemptStatus, Turn, TurnAttempt

    figures.attempts = dict(
        TurnAttempt.objects.values_list("status").annotate(n=Count("id")).order_by("status")
    )
    failed = TurnAttempt.objects.filter(status=AttemptStatus.FAILED)
    figures.failures = Counter(
        f"{step}: {reason[:90]}"
        for step, reason in failed.values_list("failure_step", "failure_reason")
    )
    figures.turns_committed = Turn.objects.filter(number__gt=0).count()
    figures.requests_sent = len(requests)
    figures.violations = [str(v) for v in check_invariants(settled=True)]
    figures.violations += unrecorded_requests(requests)


def report(figures: Figures) -> None:
    lines = [
        f"kills:                 {figures.kills}  by moment {dict(figures.kills_by_moment)}  "
        f"by kind {dict(figures.kills_by_kind)}",
        f"worker starts:         {figures.worker_starts}  (exits by themselves, restarted by "
        f"the supervisor: {figures.worker_exits_by_themselves})",
        f"Redis restarts:        {figures.redis_restarts}  {dict(figures.redis_restarts_by_kind)}",
        f"PostgreSQL restarts:   {figures.pg_restarts}  {dict(figures.pg_restarts_by_kind)}",
        f"stalls:                {figures.stalls}  (attempts interrupted while stopped: "
        f"{figures.stalls_reaped})",
        f"batches enqueued:      {figures.batches_enqueued}  "
        f"(while Redis was down: {figures.enqueued_while_broker_down}; "
        f"refused while PostgreSQL was down: {figures.enqueue_refused_database_down}; "
        f"dispatches deferred to the re-drive: {figures.dispatches_deferred})",
        f"attempts:              {figures.attempts}",
        *[f"  failed, {n}: {why}" for why, n in figures.failures.most_common()],
        f"turns committed:       {figures.turns_committed}",
        f"model requests:        {figures.requests_sent} (each must have its invocation row)",
        f"settled:               {figures.settled}",
        *[f"experiment: {name}: {value}" for name, value in figures.experiment.items()],
        f"invariant violations:  {len(figures.violations)}",
        *[f"  {v}" for v in figures.violations[:30]],
        f"wall time:             {figures.wall_seconds:.1f} s",
    ]
    print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    rng = random.Random(args.seed)
    # A short path: Unix socket paths (PostgreSQL, Redis) are limited to ~100 bytes.
    data_dir = Path(tempfile.mkdtemp(prefix="chukwa-fault-", dir="/tmp"))
    log_dir = data_dir / "logs"
    log_dir.mkdir()
    tools = start_tool_server()
    # Set before Django loads its settings (read once, at import) and inherited by the workers.
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "chukwa_site.settings",
            "CHUKWA_DATA_DIR": str(data_dir),
            "CHUKWA_ATTEMPT_LEASE_SECONDS": str(args.lease),
            "CHUKWA_REAPER_PERIOD_SECONDS": str(args.period),
            "CHUKWA_CELERY_QUEUE": ATTEMPT_QUEUE,
            "CHUKWA_CELERY_CONTROL_QUEUE": CONTROL_QUEUE,
            "CHUKWA_CELERY_EXPERIMENT_QUEUE": EXPERIMENT_QUEUE,
            "CHUKWA_CELERY_MEASURE_QUEUE": MEASURE_QUEUE,
            "CHUKWA_LIMIT_LEASE_SECONDS": str(args.limit_lease),
            "CHUKWA_LOG_LEVEL": "ERROR",
            "CHUKWA_TOY_VENDING_URL": f"http://127.0.0.1:{tools.server_address[1]}",
        }
    )
    from chukwa_site import embedded

    # Start the throwaway servers here and hand their URLs to everyone: with no DATABASE_URL a
    # process "finds or starts" the embedded PostgreSQL when it loads its settings, so a worker
    # booting while the bench holds PostgreSQL down would start it again behind the bench's
    # back (and a stop waiting for the old server would wait for the new one).
    pg = embedded.postgres_ensure()
    socket_dir = quote(pg.socket_dir, safe="")
    os.environ["DATABASE_URL"] = f"postgres://{pg.user}@{socket_dir}:{pg.port}/{pg.database}"
    os.environ["REDIS_URL"] = embedded.redis_ensure()
    import django

    django.setup()
    from django.core.management import call_command

    from tests.support.scripted_llm import ScriptedLLM

    figures = Figures()
    attempts_log = logging.getLogger("worlds_app.services.dispatch")
    attempts_log.addHandler(_DeferredDispatches(figures))
    attempts_log.setLevel(logging.WARNING)
    attempts_log.propagate = False  # counted, not printed: one line per deferred dispatch
    llm = ScriptedLLM().start()
    llm.script(*([any_reply] * 100_000))
    os.environ["CHUKWA_LLM_BASE_URL"] = llm.base_url
    os.environ["CHUKWA_LLM_API_KEY"] = "fault-injection-key"
    workers = Workers(log_dir)
    feeder: Feeder | None = None
    try:
        call_command("migrate", verbosity=0)
        worlds = create_worlds(args.worlds, (args.experiment_replicates, args.experiment_budget))
        workers.start()
        feeder = Feeder(list(worlds), figures, rng)
        feeder.start()
        for event in _schedule(args, rng):
            if event == "redis":
                restart_redis(feeder, figures, rng)
            elif event == "pg":
                restart_postgres(figures, rng)
            elif event == "stall":
                stall_once(workers, figures, rng, args.lease)
            else:
                kill_once(workers, figures, event, rng)
        feeder.stopping.set()
        feeder.join(timeout=30)
        figures.settled = settle(args.settle_timeout)
        found: list[str] = []
        if args.experiment_replicates:  # first: it lets a dead judge's task limit pass
            figures.experiment, found = fault_experiments.check(args.limit_lease)
        collect(figures, llm.requests)
        figures.violations += found
        figures.worker_starts = workers.generation
        figures.worker_exits_by_themselves = workers.exits_by_themselves
    finally:
        if feeder is not None:
            feeder.stopping.set()
        workers.stop()
        llm.stop()
        tools.shutdown()
        _reset_connection()
        embedded.redis_stop()
        embedded.postgres_stop()
        if not args.keep:
            shutil.rmtree(data_dir)
    figures.wall_seconds = time.monotonic() - started
    report(figures)
    if args.keep:
        print(f"data and worker logs kept in {data_dir}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures.as_dict(), indent=2, sort_keys=True))
    failed = figures.violations or not figures.settled or not figures.turns_committed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
