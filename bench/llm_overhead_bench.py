"""LLM overhead benchmark: Chukwa's own time and SQL per generation (against a scripted,
zero-latency OpenAI-compatible server), and the embedded model's tokens per second.

Run with ``.venv/bin/python bench/llm_overhead_bench.py [--generations 200]`` from the project
folder; DATABASE_URL must be unset. Part 1 (re)creates the throwaway database
``chukwa_llm_overhead_bench`` on the embedded PostgreSQL server, migrates it, builds a world with
one LLM agent (a single ``llm_tool_loop`` node, no tools, an ``llm_chat_completions`` source
with ``schema_delivery: response_format``) and ten props, and runs turns in-process
(``turn_attempt_enqueue`` + ``turn_attempt_run``) with DEBUG off, against
``tests.support.scripted_llm.ScriptedLLM`` run in a child process (``llm_overhead_scripted.py``
beside this file), so that its time does not share the GIL with the code measured. The
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
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import benchdb  # bench/ is the script's own folder, first on sys.path
from llm_overhead_model import part_two
from llm_overhead_scripted import CHUNK_SIZE, ChildProcessServer, InProcessServer, ScriptedServer
from llm_overhead_world import PROPS, WORLD_SLUG, make_world, patch_reply

if TYPE_CHECKING:
    import httpx

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
TIMED_REPLY_CHARS = 400  # "a few hundred characters"
SHORT_REPLY_CHARS = 100
LONG_REPLY_CHARS = 2000
WARMUP_TURNS = 5
GENERATION_TARGET_MS = 5.0  # issue 10's target for the raw median
API_KEY = "bench-key"


def _recreate_database(*, create: bool, async_commit: bool = False) -> None:
    benchdb.recreate_database(BENCH_DB_NAME, create=create, async_commit=async_commit)


def _queue_purge() -> int:
    return benchdb.queue_purge(BENCH_QUEUE)


def _queue_delete() -> None:
    benchdb.queue_delete(BENCH_QUEUE)


# --- the throwaway database and the Celery queue (as in bench/turn_bench.py) ------------------


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
    statement_ms: dict[str, list[float]] = field(default_factory=dict)
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
            if self.record:  # keyed by the statement's start (a batch: its first statements)
                key = sql.replace("SELECT set_config('synchronous_commit', 'off', true); ", "")[:60]
                self.statement_ms.setdefault(key, []).append((time.perf_counter() - t0) * 1000)

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
                if self.record:
                    self.statement_ms.setdefault("COMMIT", []).append(
                        (time.perf_counter() - t0) * 1000
                    )

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
    llm: ScriptedServer, body: dict[str, Any], reply_text: str, n: int
) -> list[float]:
    """The same request and reply through the transport Chukwa's calls use
    (``cognition_app.sources.transport``: urllib3's pooled connection under an httpx response),
    the body's lines split and dropped: loopback HTTP plus the scripted server's time, without
    any of Chukwa's own work."""
    from cognition_app.sources.transport import body_pieces, post

    content = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
    times: list[float] = []
    for _ in range(n):
        llm.script(reply_text)
        t0 = time.perf_counter()
        with post(
            f"{llm.base_url}/chat/completions", content=content, headers=headers, timeout=60
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"baseline request: HTTP {response.status_code}")
            for data in body_pieces(response):
                data.splitlines()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _httpx_baseline(
    llm: ScriptedServer, client: httpx.Client, body: dict[str, Any], reply_text: str, n: int
) -> list[float]:
    """The same exchange through an httpx client and its own transport (lines read and
    dropped): what the baseline was while Chukwa's calls went through one."""
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
            return _httpx_baseline(llm, client, body, reply_text, n)
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

    text = patch_reply(chars)
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
    generations: int,
    chunk_batch: int | None,
    show_sql: bool,
    in_process: bool,
    profile_path: str | None = None,
) -> OverheadResult:
    import httpx
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from cognition_app import runner, sources
    from cognition_app.models import LlmCall
    from cognition_app.recording import generations as llm_source

    db_name = settings.DATABASES["default"]["NAME"]
    if db_name != BENCH_DB_NAME:
        raise RuntimeError(f"settings point at {db_name!r}, not {BENCH_DB_NAME!r}")
    if settings.CELERY_TASK_DEFAULT_QUEUE != BENCH_QUEUE:
        raise RuntimeError(f"the default queue is {settings.CELERY_TASK_DEFAULT_QUEUE!r}")

    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    print(f"bench database {BENCH_DB_NAME!r}, queue {BENCH_QUEUE!r}")
    print(f"migrated in {time.perf_counter() - started:.1f} s")
    make_world()
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
        timed_text = patch_reply(TIMED_REPLY_CHARS)
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
            if profile_path:
                import cProfile

                profiler = cProfile.Profile()
                turn_ms = profiler.runcall(
                    lambda: [_run_turn(llm, timed_text) for _ in range(generations)]
                )
                profiler.dump_stats(profile_path)
                print(f"cProfile of the timed turns written to {profile_path} (times inflated)")
            else:
                turn_ms = [_run_turn(llm, timed_text) for _ in range(generations)]
        finally:
            probe.record = False
        accepted = llm.status()["accepted"] - accepted_before
        samples = probe.samples
        if len(samples) != generations or any(s.generations != 1 for s in samples):
            raise RuntimeError("expected exactly one generation per timed node run")
        baseline = _http_baseline(llm, request, timed_text, generations)
        with httpx.Client() as client:
            _httpx_baseline(llm, client, request, timed_text, 5)  # its connection opened
            httpx_baseline = _httpx_baseline(llm, client, request, timed_text, generations)
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
        for statement, times in probe.statement_ms.items():
            print(f"    {statistics.median(times):6.2f} ms median, n={len(times)}: {statement}…")
        print(
            f"  TCP connections the scripted server accepted during the timed generations: "
            f"{accepted}"
        )
        if accepted >= generations:
            print(
                "    (one per generation: the stream is left at its [DONE] event, before the "
                "body's last,\n     empty chunk is read, so the connection is closed instead "
                "of pooled)"
            )
        print(f"  loopback HTTP baseline                {_stats(baseline)}")
        print(
            "    (the same request and reply through Chukwa's transport, httpx on urllib3, lines "
            "split and dropped)"
        )
        print(f"  the same through an httpx client      {_stats(httpx_baseline)}")
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


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--generations", type=int, default=200, help="timed generations")
    parser.add_argument(
        "--chunk-batch",
        type=int,
        default=None,
        help="what-if: override cognition_app.recording.generations.CHUNK_BATCH in this process (default: the code's value)",
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
    parser.add_argument("--skip-model", action="store_true", help="skip part 2")
    parser.add_argument(
        "--profile", metavar="FILE", help="write a cProfile of the timed turns to FILE"
    )
    args = parser.parse_args()
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
                args.generations,
                args.chunk_batch,
                args.show_sql,
                args.in_process_server,
                args.profile,
            )
        purged = _queue_purge()
        print(f"purged {purged} kick message(s) sent while no worker listened")
        runs = [] if args.skip_model else part_two()

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
