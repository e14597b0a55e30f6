"""LLM overhead benchmark: Chukwa's own time and SQL per generation (against a scripted,
zero-latency OpenAI-compatible server), and the embedded model's tokens per second.

Run with ``.venv/bin/python bench/llm_overhead_bench.py [--generations 200]`` from the project
folder; DATABASE_URL must be unset. Part 1 (re)creates the throwaway database
``chukwa_llm_overhead_bench`` on the embedded PostgreSQL server, migrates it, builds a world with
one LLM agent (a single ``llm_tool_loop`` node, no tools, an ``llm_chat_completions`` source
with ``schema_delivery: response_format``) and ten props, and runs turns in-process
(``turn_attempt_enqueue`` + ``turn_attempt_run``) with DEBUG off, against
``tests.support.scripted_llm.ScriptedLLM`` run in a child process (this file with
``--serve-scripted``), so that its time does not share the GIL with the code measured. The
``llm_tool_loop`` executor is wrapped with a timer: each sample is one generation's whole path
(prompt rendering, model schema, the SourceInvocation/LlmCall/LlmChunk rows, the SSE stream,
judging, patch validation, the judgement rows). The same request and reply through a bare HTTP
client give the loopback baseline. The database is dropped at the end; Celery kicks go to a
queue of their own (``bench-<pid>``), which is purged and deleted. Part 2 loads the embedded
SmolLM2 model on a free port and times streamed ``json_schema`` requests. Targets are reported
as PASS/FAIL; they are informational, and the exit status is 0 unless something errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import benchdb  # bench/ is the script's own folder, first on sys.path

if TYPE_CHECKING:
    import httpx

    from cognition_app.embedded_llm import EmbeddedLLMServer
    from cognition_app.subject_run import SubjectRun

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_llm_overhead_bench"
BENCH_QUEUE = f"bench-{os.getpid()}"
# Set before Django loads its settings: they are read once, at import.
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
os.environ["CHUKWA_CELERY_QUEUE"] = BENCH_QUEUE

OWNER = "bench"
WORLD_SLUG = "llm-overhead"
AGENT = "keeper"
PROPS = 10
ROOM = "storeroom"
MAX_STRING = 200  # the source's max_string_length (as in the ant_on_plate fixture)
CHUNK_SIZE = 8
TIMED_REPLY_CHARS = 400  # "a few hundred characters"
SHORT_REPLY_CHARS = 100
LONG_REPLY_CHARS = 2000
WARMUP_TURNS = 5
GENERATION_TARGET_MS = 15.0
API_KEY = "bench-key"
FILLER = (
    "The keeper walks the aisle between the shelves, checks each crate against the ledger, "
    "and pauses to listen to the rain on the tin roof. "
)
# Part 2: the embedded model.
MODEL_REQUESTS = 3
MODEL_MAX_TOKENS = 256
MODEL_TIMEOUT_S = 300.0


def _recreate_database(*, create: bool, async_commit: bool = False) -> None:
    benchdb.recreate_database(BENCH_DB_NAME, create=create, async_commit=async_commit)


def _queue_purge() -> int:
    return benchdb.queue_purge(BENCH_QUEUE)


def _queue_delete() -> None:
    benchdb.queue_delete(BENCH_QUEUE)


# --- the throwaway database and the Celery queue (as in bench/turn_bench.py) ------------------


# --- the scenario -----------------------------------------------------------------------------


def _prop_id(i: int) -> str:
    return f"p{i:02d}"


def _workflow() -> dict[str, Any]:
    from chukwa_core.patch_schema import world_patch_schema_hash

    source = {
        "version": 1,
        "label": "chat",
        "interface": {
            "name": "llm_chat_completions",
            "model": "bench-model",
            "base_url_env": "CHUKWA_LLM_BASE_URL",
            "api_key_env": "CHUKWA_LLM_API_KEY",
            "schema_delivery": "response_format",
            "timeout_ms": 60000,
            "params": {"temperature": 0.7, "max_tokens": 800, "seed": 7},
            "max_string_length": MAX_STRING,
        },
    }
    system = (
        "You are the simulation director. Decide what actually happens this turn for the acting "
        "subject. Return JSON only. Never create or delete entities. Only change the acting "
        "subject, existing entities listed in the world, or existing environments listed in the "
        "world, using their exact ids and labels.\n\nRules for the WorldPatch you return:\n"
        "- `narration` is one or two past-tense sentences saying what happened.\n"
        "- Use `set_entity_state` for the acting subject's resulting physical state and for every "
        "entity that changed.\n"
        "- Every `entity_id` and `environment_label` must be copied exactly from the world."
    )
    user = (
        "Simulation time: {{world.simulation_time}} (turn {{world.attempted_turn}})\n\n"
        "World:\n{{world.projection}}\n\nWhere the subject is:\n{{environment.rendered}}\n\n"
        "Acting subject:\n{{subject.rendered}}\n\nDecide the outcome for exactly one turn."
    )
    node = {
        "id": "act",
        "type": "llm_tool_loop",
        "llm_source_ref": {"inline": source},
        "prompt_template": {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]
        },
        "available_tools": [],
        "max_generation_attempts": 3,
        "max_tool_calls": 0,
        "final_schema_ref": {"hash": world_patch_schema_hash()},
    }
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [node],
        "apply": {"from": "act.final"},
    }


def _scenario_input() -> dict[str, Any]:
    entities: list[dict[str, Any]] = [
        {
            "inline": {
                "id": AGENT,
                "name": "Keeper",
                "state": "standing at the storeroom door with a lantern.",
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
    ]
    for i in range(PROPS):
        entities.append(
            {
                "inline": {
                    "id": _prop_id(i),
                    "name": f"Crate {i}",
                    "state": f"a wooden crate on shelf {i % 4}, labelled batch {100 + i}.",
                    "environment": ROOM,
                    "kind": "prop",
                }
            }
        )
    return {
        "scenario_slug": "llm_overhead_bench",
        "description": "LLM overhead bench: one LLM agent, ten props.",
        "chronon_seconds": 60,
        "cognition_profiles": {"director": {"inline": {"workflow": {"inline": _workflow()}}}},
        "environments": {
            ROOM: {
                "inline": "A narrow storeroom with four shelves, a tin roof and one small window."
            }
        },
        "entities": entities,
        "note": "llm overhead bench",
    }


def _make_world() -> None:
    from scenarios_app.services import scenario_assemble
    from worlds_app.services import world_create

    result = scenario_assemble(data=_scenario_input())
    world_create(data={"slug": WORLD_SLUG, "scenario_ref": {"hash": result["scenario_hash"]}})


# --- scripted replies -------------------------------------------------------------------------


def _filler(n: int) -> str:
    return (FILLER * (n // len(FILLER) + 1))[:n]


def _patch_reply(chars: int) -> str:
    """A valid final-patch reply of about ``chars`` characters, within the source's
    max_string_length (200) and the model schema's 8 effects: the narration, the agent's state,
    then props' states are filled in turn. Only set_entity_state, so the world does not grow."""
    effects: list[dict[str, str]] = [{"op": "set_entity_state", "entity_id": AGENT, "state": "x"}]
    patch: dict[str, Any] = {"narration": "x", "effects": effects}
    reply = {"kind": "final_patch", "patch": patch}

    def size() -> int:
        return len(json.dumps(reply))

    slots: list[tuple[dict[str, Any], str]] = [(patch, "narration"), (effects[0], "state")]
    if size() > chars:  # too short for an effect: a narration-only patch
        effects.clear()
        slots.pop()
    prop = 0
    while True:
        for target, key in slots:
            room = chars - size()
            if room <= 0:
                break
            grow = min(MAX_STRING - len(target[key]), room)
            target[key] = _filler(len(target[key]) + grow)
        if size() >= chars or len(effects) >= 8 or prop >= PROPS:
            break
        effect = {"op": "set_entity_state", "entity_id": _prop_id(prop), "state": "x"}
        effects.append(effect)
        if size() > chars:
            effects.pop()
            break
        slots.append((effect, "state"))
        prop += 1
    return json.dumps(reply)


# --- the scripted server: in a child process by default -------------------------------------


class ScriptedServer:
    """The ScriptedLLM, driven through a small interface, so that it can run either in this
    process or in a child process. In this process its handler thread shares the GIL with the
    code being measured: while Chukwa waits on a socket, the server thread takes the GIL, and
    Chukwa's thread may then wait up to the interpreter's switch interval (5 ms) to get it
    back, so the server's time leaks into Chukwa's. A child process keeps it out."""

    base_url: str

    def script(self, text: str) -> None:
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        """pending, failures, requests, probes, accepted (connections accepted so far)."""
        raise NotImplementedError

    def last_request(self) -> dict[str, Any]:
        raise NotImplementedError

    def set_nagle(self, on: bool) -> None:
        """Nagle's algorithm on connections accepted from now on (on = as shipped)."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class _Controller:
    """Answers the control operations on a running ScriptedLLM (both modes use it)."""

    def __init__(self) -> None:
        from tests.support import scripted_llm

        self.module = scripted_llm
        # TCP_NODELAY on accepted connections, as real OpenAI-compatible servers set it: with
        # Nagle's algorithm on (socketserver's default), a streamed reply's first event waits
        # for the client's delayed ACK, about 40 ms on Linux; that is neither model nor Chukwa.
        scripted_llm._Handler.disable_nagle_algorithm = True
        self.llm = scripted_llm.ScriptedLLM().start()
        self.accepted = 0
        track = self.llm._track

        def counting_track(conn: Any) -> None:
            self.accepted += 1
            track(conn)

        self.llm._track = counting_track  # type: ignore[method-assign]

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "script":
            reply = self.module.Reply(text=command["text"], chunk_size=CHUNK_SIZE, delay_s=0)
            self.llm.script(reply)
            return {"pending": self.llm.pending}
        if op == "status":
            return {
                "pending": self.llm.pending,
                "failures": self.llm.failures,
                "requests": len(self.llm.requests),
                "probes": len(self.llm.probes),
                "accepted": self.accepted,
            }
        if op == "last_request":
            return {"request": self.llm.requests[-1]}
        if op == "nagle":
            self.module._Handler.disable_nagle_algorithm = not command["on"]
            return {}
        raise ValueError(f"unknown operation {op!r}")

    def stop(self) -> None:
        self.llm.stop()


class InProcessServer(ScriptedServer):
    def __init__(self) -> None:
        self.controller = _Controller()
        self.base_url = self.controller.llm.base_url

    def script(self, text: str) -> None:
        self.controller.handle({"op": "script", "text": text})

    def status(self) -> dict[str, Any]:
        return self.controller.handle({"op": "status"})

    def last_request(self) -> dict[str, Any]:
        return self.controller.handle({"op": "last_request"})["request"]

    def set_nagle(self, on: bool) -> None:
        self.controller.handle({"op": "nagle", "on": on})

    def stop(self) -> None:
        self.controller.stop()


class ChildProcessServer(ScriptedServer):
    """This file run with ``--serve-scripted``: JSON lines in on stdin, out on stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-scripted"],
            cwd=PROJECT_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.base_url = self._read()["base_url"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the scripted server process exited ({self.proc.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"scripted server process: {answer['error']}")
        return answer

    def _call(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def script(self, text: str) -> None:
        self._call({"op": "script", "text": text})

    def status(self) -> dict[str, Any]:
        return self._call({"op": "status"})

    def last_request(self) -> dict[str, Any]:
        return self._call({"op": "last_request"})["request"]

    def set_nagle(self, on: bool) -> None:
        self._call({"op": "nagle", "on": on})

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # end of input: the child stops its server and exits
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _serve_scripted_child() -> int:
    """The child side of ChildProcessServer (no Django here)."""
    controller = _Controller()
    print(json.dumps({"base_url": controller.llm.base_url}), flush=True)
    try:
        for line in sys.stdin:
            try:
                answer = controller.handle(json.loads(line))
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    finally:
        controller.stop()
    return 0


# --- timing one generation: the llm_tool_loop executor, wrapped ------------------------------


@dataclass
class GenSample:
    node_ms: float
    invoke_ms: float
    sql_queries: int
    sql_ms: float
    block_commits: int
    block_commit_ms: float
    generations: int

    @property
    def db_ms(self) -> float:
        return self.sql_ms + self.block_commit_ms


@dataclass
class NodeProbe:
    """Wraps the llm_tool_loop executor (timed; statements counted and timed through an
    execute wrapper, and the COMMITs that end transaction.atomic blocks, which do not pass
    through it, through the connection's commit) and sources.invoke_llm (timed). ``capture``
    records the SQL of the next node run with CaptureQueriesContext instead (its debug cursor
    costs time, so that run is not a sample)."""

    record: bool = False
    capture: bool = False
    samples: list[GenSample] = field(default_factory=list)
    captured_sql: list[str] = field(default_factory=list)
    llm_call_ids: list[Any] = field(default_factory=list)
    _invoke_s: float = 0.0
    _generations: int = 0
    _sql_count: int = 0
    _sql_s: float = 0.0
    _commits: int = 0
    _commit_s: float = 0.0

    def sql_wrapper(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self._sql_s += time.perf_counter() - t0
            self._sql_count += 1

    def wrap_invoke(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def invoke_llm(**kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                generation = inner(**kwargs)
            finally:
                self._invoke_s += time.perf_counter() - t0
                self._generations += 1
            self.llm_call_ids.append(generation.call.pk)
            return generation

        return invoke_llm

    def wrap_node(
        self, inner: Callable[[Mapping[str, Any], SubjectRun], Any]
    ) -> Callable[[Mapping[str, Any], SubjectRun], Any]:
        from django.db import DEFAULT_DB_ALIAS, connections
        from django.test.utils import CaptureQueriesContext

        conn = connections[DEFAULT_DB_ALIAS]

        def timed_commit() -> None:
            t0 = time.perf_counter()
            try:
                type(conn).commit(conn)
            finally:
                self._commit_s += time.perf_counter() - t0
                self._commits += 1

        def llm_tool_loop(node: Mapping[str, Any], run: SubjectRun) -> Any:
            self._invoke_s, self._generations = 0.0, 0
            self._sql_count, self._sql_s, self._commits, self._commit_s = 0, 0.0, 0, 0.0
            if self.capture:
                self.capture = False
                with CaptureQueriesContext(conn) as captured:
                    output = inner(node, run)
                self.captured_sql = [q["sql"] for q in captured.captured_queries]
                return output
            conn.commit = timed_commit  # an instance attribute shadows the method
            try:
                t0 = time.perf_counter()
                with conn.execute_wrapper(self.sql_wrapper):
                    output = inner(node, run)
                elapsed = time.perf_counter() - t0
            finally:
                del conn.commit
            if self.record:
                self.samples.append(
                    GenSample(
                        node_ms=elapsed * 1000,
                        invoke_ms=self._invoke_s * 1000,
                        sql_queries=self._sql_count,
                        sql_ms=self._sql_s * 1000,
                        block_commits=self._commits,
                        block_commit_ms=self._commit_s * 1000,
                        generations=self._generations,
                    )
                )
            return output

        return llm_tool_loop


def _run_turn(llm: ScriptedServer, reply_text: str) -> float:
    """Script one reply, run one turn in-process; returns turn_attempt_run's wall time (ms)."""
    from worlds_app.models import AttemptStatus, TurnAttempt
    from worlds_app.services import turn_attempt_enqueue, turn_attempt_run

    llm.script(reply_text)
    enqueued = turn_attempt_enqueue(slug=WORLD_SLUG, count=1, requested_by=OWNER)
    attempt_id = enqueued["attempt_ids"][0]
    t0 = time.perf_counter()
    status = turn_attempt_run(attempt_id=attempt_id, owner=OWNER)
    elapsed = (time.perf_counter() - t0) * 1000
    if status != AttemptStatus.COMMITTED:
        row = TurnAttempt.objects.values("failure_step", "failure_reason").get(pk=attempt_id)
        raise RuntimeError(
            f"attempt {attempt_id} ended {status!r}: {row['failure_step']}: {row['failure_reason']}"
        )
    server = llm.status()
    if server["pending"] or server["failures"]:
        raise RuntimeError(f"scripted LLM: {server}")
    return elapsed


def _http_baseline(
    llm: ScriptedServer, client: httpx.Client, body: dict[str, Any], reply_text: str, n: int
) -> list[float]:
    """The same request and reply through a bare client (lines read and dropped): loopback
    HTTP plus the scripted server's time, without any of Chukwa."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
    times: list[float] = []
    for _ in range(n):
        llm.script(reply_text)
        t0 = time.perf_counter()
        with client.stream(
            "POST", f"{llm.base_url}/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"baseline request: HTTP {response.status_code}")
            for _line in response.iter_lines():
                pass
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _as_shipped_baseline(
    llm: ScriptedServer, body: dict[str, Any], reply_text: str, n: int
) -> list[float]:
    """The baseline over a new connection the scripted server accepts with Nagle's algorithm
    on, as tests/support/scripted_llm.py ships (socketserver's default): the handler reads the
    flag when it accepts the connection, i.e. at the first request."""
    import httpx

    llm.set_nagle(True)
    try:
        with httpx.Client() as client:
            return _http_baseline(llm, client, body, reply_text, n)
    finally:
        llm.set_nagle(False)


def _sql_summary(statements: list[str]) -> str:
    """Statements grouped by verb and table, in first-seen order."""
    counts: Counter[str] = Counter()
    for sql in statements:
        words = sql.split()
        verb = words[0].upper() if words else "?"
        table = ""
        for keyword in ("INTO", "UPDATE", "FROM"):
            if keyword in (w.upper() for w in words):
                index = [w.upper() for w in words].index(keyword)
                if index + 1 < len(words):
                    table = words[index + 1].strip('"')
                break
        for prefix in ("cognition_app_", "worlds_app_", "scenarios_app_"):
            table = table.removeprefix(prefix)
        counts[f"{verb} {table}".strip()] += 1
    return ", ".join(f"{key} ×{n}" for key, n in counts.items())


@dataclass
class CapturedRun:
    reply_chars: int
    chunks: int
    chunk_rows: int
    queries: int
    sql: list[str]

    @property
    def commits(self) -> int:
        return _transactions(self.sql)

    @property
    def statements(self) -> int:
        return sum(sql.split(maxsplit=1)[0].upper() not in ("BEGIN", "COMMIT") for sql in self.sql)


def _captured_run(llm: ScriptedServer, probe: NodeProbe, chars: int) -> CapturedRun:
    from cognition_app.models import LlmChunk

    text = _patch_reply(chars)
    probe.capture = True
    _run_turn(llm, text)
    if probe.capture:
        raise RuntimeError("the llm_tool_loop executor did not run")
    call_id = probe.llm_call_ids[-1]
    return CapturedRun(
        reply_chars=len(text),
        chunks=-(-len(text) // CHUNK_SIZE),
        chunk_rows=LlmChunk.objects.filter(call_id=call_id).count(),
        queries=len(probe.captured_sql),
        sql=probe.captured_sql,
    )


def _round_trips_ms(n: int = 100) -> tuple[float, float]:
    """Medians of a ``SELECT 1`` round trip and of a single-row autocommit INSERT into a logged
    table of the bench database; the difference is about what a synchronous commit waits for
    (the WAL flush) on this machine."""
    from django.db import connection

    selects: list[float] = []
    inserts: list[float] = []
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_commit_probe (x integer)")
        try:
            for i in range(n):
                t0 = time.perf_counter()
                cursor.execute("SELECT 1")
                t1 = time.perf_counter()
                cursor.execute("INSERT INTO bench_commit_probe VALUES (%s)", [i])
                t2 = time.perf_counter()
                selects.append((t1 - t0) * 1000)
                inserts.append((t2 - t1) * 1000)
        finally:
            cursor.execute("DROP TABLE bench_commit_probe")
    return statistics.median(selects), statistics.median(inserts)


def _transactions(statements: list[str]) -> int:
    """Commits in a captured run: each BEGIN…COMMIT block, plus each write outside one
    (autocommit). Reads outside a block commit nothing worth waiting for."""
    count = 0
    in_block = False
    for sql in statements:
        verb = sql.split(maxsplit=1)[0].upper() if sql.strip() else ""
        if verb == "BEGIN":
            in_block = True
        elif verb in ("COMMIT", "ROLLBACK"):
            in_block = False
            count += verb == "COMMIT"
        elif not in_block and verb in ("INSERT", "UPDATE", "DELETE"):
            count += 1
    return count


# --- report helpers ---------------------------------------------------------------------------


def _p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def _stats(values: list[float], unit: str = "ms") -> str:
    return (
        f"median {statistics.median(values):6.2f} {unit}  p90 {_p90(values):6.2f}  "
        f"max {max(values):6.2f}  (n={len(values)})"
    )


def _mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


@dataclass
class OverheadResult:
    median_ms: float
    baseline_median_ms: float
    timed: CapturedRun
    short: CapturedRun
    long: CapturedRun


# --- part 1 -----------------------------------------------------------------------------------


def _part_one(
    generations: int, chunk_batch: int | None, show_sql: bool, in_process: bool
) -> OverheadResult:
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from cognition_app import runner, sources
    from cognition_app.models import LlmCall
    from cognition_app.sources import llm as llm_source

    db_name = settings.DATABASES["default"]["NAME"]
    if db_name != BENCH_DB_NAME:
        raise RuntimeError(f"settings point at {db_name!r}, not {BENCH_DB_NAME!r}")
    if settings.CELERY_TASK_DEFAULT_QUEUE != BENCH_QUEUE:
        raise RuntimeError(f"the default queue is {settings.CELERY_TASK_DEFAULT_QUEUE!r}")

    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    print(f"bench database {BENCH_DB_NAME!r}, queue {BENCH_QUEUE!r}")
    print(f"migrated in {time.perf_counter() - started:.1f} s")
    _make_world()
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        synchronous_commit = cursor.fetchone()[0]
    select_ms, insert_ms = _round_trips_ms()
    print(
        f"database round trips here: SELECT 1 {select_ms:.2f} ms, single-row autocommit INSERT "
        f"{insert_ms:.2f} ms (medians of 100; synchronous_commit={synchronous_commit})"
    )

    original_batch = llm_source.CHUNK_BATCH
    if chunk_batch is not None:
        print(f"what-if: CHUNK_BATCH overridden {llm_source.CHUNK_BATCH} → {chunk_batch}")
        llm_source.CHUNK_BATCH = chunk_batch

    probe = NodeProbe()
    original_node = runner.NODE_EXECUTORS["llm_tool_loop"]
    original_invoke = sources.invoke_llm
    runner.NODE_EXECUTORS["llm_tool_loop"] = probe.wrap_node(original_node)
    sources.invoke_llm = probe.wrap_invoke(original_invoke)
    llm: ScriptedServer | None = None
    try:
        llm = InProcessServer() if in_process else ChildProcessServer()
        os.environ["CHUKWA_LLM_BASE_URL"] = llm.base_url
        os.environ["CHUKWA_LLM_API_KEY"] = API_KEY
        timed_text = _patch_reply(TIMED_REPLY_CHARS)
        print(
            f"\n== 1. Chukwa's own time per generation (ScriptedLLM at {llm.base_url}, "
            f"zero model latency) =="
        )
        print(
            f"scripted server: {'in this process' if in_process else 'a child process'}, "
            f"TCP_NODELAY on its connections; DEBUG off (no query log)"
        )
        print(
            f"world {WORLD_SLUG!r}: 1 LLM agent + {PROPS} props in one room; one llm_tool_loop node "
            f"(no tools, max_tool_calls 0), llm_chat_completions, schema_delivery response_format"
        )
        print(
            f"chunk persistence: CHUNK_BATCH {llm_source.CHUNK_BATCH}, "
            f"CHUNK_FLUSH_SECONDS {llm_source.CHUNK_FLUSH_SECONDS}"
        )

        for _ in range(WARMUP_TURNS):  # the first also runs the conformance probe
            _run_turn(llm, timed_text)
        request = llm.last_request()
        prompt_chars = sum(len(m["content"]) for m in request["messages"])
        schema_chars = len(json.dumps(request["response_format"]))
        print(
            f"request: {len(request['messages'])} messages, {prompt_chars} prompt chars, "
            f"response_format {schema_chars} chars; conformance probes sent: "
            f"{llm.status()['probes']}"
        )
        print(
            f"reply: {len(timed_text)} chars in {-(-len(timed_text) // CHUNK_SIZE)} chunks of "
            f"{CHUNK_SIZE}; {WARMUP_TURNS} warm-up turns not counted"
        )

        accepted_before = llm.status()["accepted"]
        probe.record = True
        try:
            turn_ms = [_run_turn(llm, timed_text) for _ in range(generations)]
        finally:
            probe.record = False
        accepted = llm.status()["accepted"] - accepted_before
        samples = probe.samples
        if len(samples) != generations or any(s.generations != 1 for s in samples):
            raise RuntimeError("expected exactly one generation per timed node run")
        baseline = _http_baseline(llm, sources.http_client(), request, timed_text, generations)
        shipped = _as_shipped_baseline(llm, request, timed_text, 20)

        node_ms = [s.node_ms for s in samples]
        invoke_ms = [s.invoke_ms for s in samples]
        outside_ms = [s.node_ms - s.invoke_ms for s in samples]
        db_ms = [s.db_ms for s in samples]
        rest_ms = [s.node_ms - s.db_ms for s in samples]
        queries = Counter((s.sql_queries, s.block_commits) for s in samples)
        baseline_median = statistics.median(baseline)
        net = [v - baseline_median for v in node_ms]
        python_ms = [v - baseline_median for v in rest_ms]
        print(f"\nper generation (one llm_tool_loop node run = one generation), n={len(samples)}:")
        print(f"  wall time, raw (incl. loopback HTTP)  {_stats(node_ms)}")
        print(f"    in sources.invoke_llm               {_stats(invoke_ms)}")
        print(f"    outside it (render, schema, judge)  {_stats(outside_ms)}")
        print(f"    waiting on the database             {_stats(db_ms)}")
        print(f"    the rest (Python, HTTP)             {_stats(rest_ms)}")
        print(
            "  database round trips per timed generation: "
            + ", ".join(
                f"{q} statements + {c} transaction-block COMMITs in {n} runs"
                for (q, c), n in sorted(queries.items())
            )
        )
        print(
            f"  TCP connections the scripted server accepted during the timed generations: "
            f"{accepted}"
        )
        if accepted >= generations:
            print(
                "    (one per generation: the stream is left at its [DONE] event, before the "
                "body's last,\n     empty chunk is read, so httpx closes the connection instead "
                "of pooling it)"
            )
        print(f"  loopback HTTP baseline                {_stats(baseline)}")
        print(
            "    (the same request and reply through the shared httpx client, lines read and "
            "dropped)"
        )
        print(f"  raw − baseline median                 {_stats(net)}")
        print(f"  raw − database − baseline median      {_stats(python_ms)}")
        print(
            f"  scripted server as shipped (Nagle on): baseline median "
            f"{statistics.median(shipped):.2f} ms over {len(shipped)} requests"
        )
        print(f"  whole turn (turn_attempt_run)         {_stats(turn_ms)}")
        stored = LlmCall.objects.filter(status="succeeded").count()
        print(f"  LlmCall rows succeeded: {stored} ({WARMUP_TURNS} warm-up + {generations} timed)")

        short = _captured_run(llm, probe, SHORT_REPLY_CHARS)
        medium = _captured_run(llm, probe, TIMED_REPLY_CHARS)
        long = _captured_run(llm, probe, LONG_REPLY_CHARS)
        print(
            "\nSQL per generation (CaptureQueriesContext around one node run, not timed; it logs "
            "BEGIN/COMMIT\nof transaction.atomic blocks too; the conformance probe is cached by "
            "then; the turn's claim\nand commit are outside the node run):"
        )
        for run in (short, medium, long):
            print(
                f"  reply {run.reply_chars:>4} chars, {run.chunks:>3} chunks → "
                f"{run.chunk_rows:>3} LlmChunk rows: {run.queries:>2} queries "
                f"({run.statements} statements), {run.commits:>2} commits"
            )
            print(f"      {_sql_summary(run.sql)}")
            if show_sql:
                for sql in run.sql:
                    print(f"      {sql[:140]}")
        return OverheadResult(statistics.median(node_ms), baseline_median, medium, short, long)
    finally:
        runner.NODE_EXECUTORS["llm_tool_loop"] = original_node
        sources.invoke_llm = original_invoke
        llm_source.CHUNK_BATCH = original_batch
        if llm is not None:
            llm.stop()


# --- part 2: the embedded model ---------------------------------------------------------------

MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["narration", "effects"],
    "properties": {
        "narration": {"type": "string", "maxLength": 160},
        "effects": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["op", "entity_id", "state"],
                "properties": {
                    "op": {"type": "string", "enum": ["set_entity_state"]},
                    "entity_id": {"type": "string", "enum": [AGENT, "p00", "p01", "p02"]},
                    "state": {"type": "string", "maxLength": 80},
                },
            },
        },
    },
}
MODEL_MESSAGES = [
    {
        "role": "system",
        "content": "You are the simulation director. Reply with one JSON object: a past-tense "
        "narration and the state changes of the entities involved.",
    },
    {
        "role": "user",
        "content": "Storeroom: a narrow room with four shelves and a tin roof. Entities: keeper "
        "(the acting subject, standing at the door with a lantern), p00 (a wooden crate on "
        "shelf 0), p01 (a crate on shelf 1), p02 (a crate on shelf 2). The keeper wants to check "
        "the crates. Decide what happens this turn.",
    },
]


@dataclass
class ModelRun:
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    total_s: float
    decode_s: float
    valid: bool
    finish_reason: str

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.total_s

    @property
    def decode_tokens_per_s(self) -> float:
        return (self.completion_tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


def _model_request(base_url: str, seed: int) -> ModelRun:
    import httpx
    from jsonschema import Draft202012Validator

    payload = {
        "model": "SmolLM2-135M-Instruct",
        "messages": MODEL_MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": MODEL_MAX_TOKENS,
        "temperature": 0.7,
        "seed": seed,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "world_patch", "schema": MODEL_SCHEMA, "strict": True},
        },
    }
    parts: list[str] = []
    usage: dict[str, Any] = {}
    finish_reason = ""
    first: float | None = None
    last = 0.0
    with httpx.Client() as client:
        t0 = time.perf_counter()
        with client.stream(
            "POST", f"{base_url}/chat/completions", json=payload, timeout=MODEL_TIMEOUT_S
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(
                    f"embedded model: HTTP {response.status_code}: {response.read()[:300]!r}"
                )
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(f"embedded model: {event['error']}")
                usage = event.get("usage") or usage
                for choice in event.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        last = time.perf_counter()
                        first = first if first is not None else last
                        parts.append(content)
                    finish_reason = choice.get("finish_reason") or finish_reason
        done = time.perf_counter()
    if first is None or not usage:
        raise RuntimeError("embedded model: no content or no usage in the stream")
    text = "".join(parts)
    try:
        valid = not list(Draft202012Validator(MODEL_SCHEMA).iter_errors(json.loads(text)))
    except ValueError:
        valid = False
    return ModelRun(
        prompt_tokens=int(usage["prompt_tokens"]),
        completion_tokens=int(usage["completion_tokens"]),
        ttft_s=first - t0,
        total_s=done - t0,
        decode_s=last - first,
        valid=valid,
        finish_reason=finish_reason,
    )


def _part_two() -> list[ModelRun]:
    from cognition_app import embedded_llm

    print("\n== 2. Embedded model: tokens per second ==")
    t0 = time.perf_counter()
    server: EmbeddedLLMServer = embedded_llm.serve("127.0.0.1", 0, threads=2, ctx=4096)
    try:
        host, port = server.server_address[:2]
        base_url = f"http://{host}:{port}/v1"
        print(
            f"{embedded_llm.MODEL_NAME} ({server.engine.path.name}) loaded and serving at "
            f"{base_url} in {time.perf_counter() - t0:.1f} s (threads 2, ctx 4096)"
        )
        print(
            f"{MODEL_REQUESTS} streamed requests, response_format json_schema (narration ≤160 "
            f"chars, ≤2 effects with state ≤80 chars), max_tokens {MODEL_MAX_TOKENS}, "
            f"temperature 0.7"
        )
        runs: list[ModelRun] = []
        for i in range(MODEL_REQUESTS):
            run = _model_request(base_url, seed=1000 + i)
            runs.append(run)
            print(
                f"  request {i + 1}: prompt {run.prompt_tokens} tok, completion "
                f"{run.completion_tokens} tok ({run.finish_reason}), TTFT "
                f"{run.ttft_s * 1000:.0f} ms, total {run.total_s:.2f} s → "
                f"{run.tokens_per_s:.1f} tok/s (decode only {run.decode_tokens_per_s:.1f} tok/s), "
                f"schema-valid JSON: {'yes' if run.valid else 'NO'}"
            )
        print("  (request 1 also pays first-use costs: the weights are paged in from the file)")
        print(
            f"  median: {statistics.median(r.tokens_per_s for r in runs):.1f} tok/s "
            f"(completion tokens / request-to-last-byte time), decode only "
            f"{statistics.median(r.decode_tokens_per_s for r in runs):.1f} tok/s, TTFT "
            f"{statistics.median(r.ttft_s for r in runs) * 1000:.0f} ms"
        )
        return runs
    finally:
        server.shutdown()
        server.server_close()


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--generations", type=int, default=200, help="timed generations")
    parser.add_argument(
        "--chunk-batch",
        type=int,
        default=None,
        help="what-if: override cognition_app.sources.llm.CHUNK_BATCH in this process (default: the code's value)",
    )
    parser.add_argument(
        "--async-commit",
        action="store_true",
        help="what-if: synchronous_commit=off on the bench database (no commit waits for fsync)",
    )
    parser.add_argument(
        "--in-process-server",
        action="store_true",
        help="run the scripted server in this process (it then shares the GIL with Chukwa)",
    )
    parser.add_argument("--show-sql", action="store_true", help="print the captured SQL")
    parser.add_argument("--serve-scripted", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-model", action="store_true", help="skip part 2")
    args = parser.parse_args()
    if args.serve_scripted:
        return _serve_scripted_child()
    if args.generations < 1:
        parser.error("--generations must be at least 1")

    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set, so CHUKWA_DB_NAME would not pick the bench database")
        return 2

    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load} (other processes' load skews "
        f"every figure below)"
    )
    _recreate_database(create=True, async_commit=args.async_commit)
    if args.async_commit:
        print("what-if: synchronous_commit=off on the bench database")
    django_ready = False
    try:
        import django

        django.setup()
        django_ready = True
        from django.test.utils import override_settings

        # DEBUG (CHUKWA_DEBUG=true) logs every query on every cursor: production
        # runs without it, and CaptureQueriesContext turns logging on where it is needed.
        with override_settings(DEBUG=False):
            overhead = _part_one(
                args.generations, args.chunk_batch, args.show_sql, args.in_process_server
            )
        purged = _queue_purge()
        print(f"purged {purged} kick message(s) sent while no worker listened")
        runs = [] if args.skip_model else _part_two()

        print("\ntargets (informational):")
        print(
            f"  [{_mark(overhead.median_ms < GENERATION_TARGET_MS)}] Chukwa time per generation "
            f"under {GENERATION_TARGET_MS:.0f} ms: raw median {overhead.median_ms:.2f} ms "
            f"(includes loopback HTTP and the scripted server; baseline median "
            f"{overhead.baseline_median_ms:.2f} ms → about "
            f"{overhead.median_ms - overhead.baseline_median_ms:.2f} ms net; "
            f"{overhead.timed.commits} commits per generation)"
        )
        short, timed, long = overhead.short, overhead.timed, overhead.long
        print(
            f"  [{_mark(short.queries == long.queries)}] SQL queries per generation do not grow "
            f"with the reply: {short.queries} at {short.reply_chars} chars ({short.chunks} "
            f"chunks), {timed.queries} at {timed.reply_chars}, {long.queries} at "
            f"{long.reply_chars} chars ({long.chunks} chunks)"
        )
        if runs:
            valid = sum(r.valid for r in runs)
            print(
                f"  [{_mark(valid == len(runs))}] embedded model replies are schema-valid JSON: "
                f"{valid}/{len(runs)}; median "
                f"{statistics.median(r.tokens_per_s for r in runs):.1f} tok/s, TTFT "
                f"{statistics.median(r.ttft_s for r in runs) * 1000:.0f} ms (no target)"
            )
    finally:
        try:
            if django_ready:
                _queue_delete()
        finally:
            from django.db import connections

            connections.close_all()
            _recreate_database(create=False)
            print(f"\ndropped bench database {BENCH_DB_NAME!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
