"""Web tier benchmark: concurrent API clients doing reads against gunicorn, as the stack runs it.

Run with ``.venv/bin/python bench/web_bench.py [--clients 20] [--seconds 15]`` from the project
folder; DATABASE_URL must be unset. It (re)creates the throwaway database ``chukwa_web_bench``,
builds a world of 20 rule-policy agents with a few committed turns (run in this process), signs
in an operator with an API token, starts gunicorn on a free loopback port with the project's
configuration (``chukwa_site/gunicorn_conf.py``, the one ``stack up``, the Dockerfile and
docker-compose use), and runs ``--clients`` threads, each a keep-alive HTTP client, doing GETs
of the world list, a world, a turn and an attempt in turn. It prints p50/p95/p99 latency and the
throughput, then the time of ``GET /api/schema/`` (the OpenAPI document) over a few requests.
The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import benchdb  # bench/ is the script's own folder, first on sys.path
import scale_worlds

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

BENCH_DB_NAME = "chukwa_web_bench"
BENCH_QUEUE = f"bench-{os.getpid()}"
os.environ["DJANGO_SETTINGS_MODULE"] = "chukwa_site.settings"
os.environ["CHUKWA_DB_NAME"] = BENCH_DB_NAME
os.environ["CHUKWA_CELERY_QUEUE"] = BENCH_QUEUE
P95_TARGET_MS = 100.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gunicorn_args() -> list[str]:
    """The project's gunicorn configuration; before it existed, the stack ran 2 sync workers."""
    if importlib.util.find_spec("chukwa_site.gunicorn_conf") is not None:
        return ["-c", "python:chukwa_site.gunicorn_conf"]
    return ["chukwa_site.wsgi:application", "--workers", "2"]


def _setup() -> tuple[str, list[str]]:
    """A world with turns, and an operator's token. Returns the token and the read paths."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from scenarios_app.services import scenario_assemble
    from worlds_app.models import TurnAttempt
    from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

    user = User.objects.create_user("bench", password="bench-password-1", is_staff=True)
    token = Token.objects.create(user=user).key
    result = scenario_assemble(data=scale_worlds.rule_scenario(20, "web_bench"))
    world_create(data={"slug": "web", "scenario_ref": {"hash": result["scenario_hash"]}})
    for attempt_id in turn_attempt_enqueue(slug="web", count=5, requested_by="bench")[
        "attempt_ids"
    ]:
        turn_attempt_run(attempt_id=attempt_id, owner="bench")
    attempt = TurnAttempt.objects.filter(world__slug="web").order_by("seq").last()
    assert attempt is not None
    paths = ["/api/worlds/", "/api/worlds/web/", "/api/worlds/web/turns/3/"]
    paths.append(f"/api/attempts/{attempt.pk}/")
    return token, paths


def _client_loop(
    base: str, token: str, paths: list[str], stop_at: float, out: list[float], errors: list[str]
) -> None:
    """One closed-loop client on a keep-alive connection. The standard library's http.client:
    the load generator shares the 2 cores with the server, and httpx cost about 2.5 ms of CPU
    per request here (a tenth of the machine), time the server did not get."""
    import http.client
    from urllib.parse import urlsplit

    address = urlsplit(base)
    headers = {"Authorization": f"Token {token}"}
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        i = 0
        while time.monotonic() < stop_at:
            path = paths[i % len(paths)]
            i += 1
            t0 = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError):
                # the server closed an idle keep-alive connection: reconnect, not an answer
                conn.close()
                continue
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status != 200:
                errors.append(f"{path}: HTTP {response.status}")
                continue
            out.append(elapsed)
    finally:
        conn.close()


class CpuMeter:
    """CPU seconds used during the timed window by the load generator (this process), the
    gunicorn processes and the PostgreSQL backends serving them (the bench database's backends
    of this clone's embedded server): what each costs per answer, on the same shared cores."""

    def __init__(self, gunicorn_pid: int) -> None:
        self.gunicorn_pid = gunicorn_pid

    def sample(self) -> dict[str, dict[int, float]]:
        import psutil

        return benchdb.cpu_sample(
            {
                "load generator": [psutil.Process()],
                "gunicorn": benchdb.process_tree(self.gunicorn_pid),
                "PostgreSQL": benchdb.postgres_processes(BENCH_DB_NAME),
            }
        )

    used = staticmethod(benchdb.cpu_used)


def _in_process_cpu(
    token: str, paths: list[str], rounds: int = 20, batches: int = 5
) -> dict[str, float]:
    """CPU ms per read served in this process through Django's full handler (middleware,
    authentication, view, rendering), no HTTP server or client: the application's own cost.
    The best of a few batches, as timeit does: other processes on the shared cores only ever
    add to it (cache misses, frequency), never take from it."""
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_HOST="127.0.0.1")
    for path in paths:  # warm: imports, URL resolver, connection, prepared statements
        for _ in range(10):
            if client.get(path).status_code != 200:
                raise RuntimeError(f"{path}: not 200 in-process")
    out = {}
    for path in paths:
        best = float("inf")
        for _ in range(batches):
            t0 = time.process_time()
            for _ in range(rounds):
                client.get(path)
            best = min(best, (time.process_time() - t0) / rounds * 1000)
        out[path] = best
    return out


def _pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _wait_up(base: str, proc: subprocess.Popen[bytes], log: Any) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{benchdb.log_tail(log)}")
        try:
            httpx.get(f"{base}/healthz", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not answer within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    if os.environ.get("DATABASE_URL"):
        print("refusing: DATABASE_URL is set, so CHUKWA_DB_NAME would not pick the bench database")
        return 2
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (shared: treat as noisy)")
    benchdb.recreate_database(BENCH_DB_NAME, create=True)
    log = tempfile.TemporaryFile(mode="a+b")
    proc: subprocess.Popen[bytes] | None = None
    django_ready = False
    try:
        import django

        django.setup()
        django_ready = True
        import httpx
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        token, paths = _setup()
        benchdb.queue_purge(BENCH_QUEUE)
        in_process = _in_process_cpu(token, paths)
        print("in-process CPU per read (Django's handler, no HTTP):")
        for path, ms in in_process.items():
            print(f"  {ms:5.1f} ms  {path}")
        print(f"  {statistics.mean(in_process.values()):5.1f} ms  mean over the {len(paths)} reads")
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        gunicorn = [sys.executable, "-m", "gunicorn", *_gunicorn_args()]
        command = [*gunicorn, "--bind", f"127.0.0.1:{port}"]
        print(f"gunicorn: {' '.join(command[2:])}")
        proc = subprocess.Popen(
            command,
            cwd=PROJECT_DIR,
            env={**os.environ, "CHUKWA_LOG_LEVEL": "WARNING"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_up(base, proc, log)
        # Warm every worker process and thread's connection before timing.
        warm_stop = time.monotonic() + 2
        threads = [
            threading.Thread(target=_client_loop, args=(base, token, paths, warm_stop, [], []))
            for _ in range(args.clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        latencies: list[float] = []
        errors: list[str] = []
        stop_at = time.monotonic() + args.seconds
        threads = [
            threading.Thread(
                target=_client_loop, args=(base, token, paths, stop_at, latencies, errors)
            )
            for _ in range(args.clients)
        ]
        meter = CpuMeter(proc.pid)
        cpu_before = meter.sample()
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        cpu_used = meter.used(cpu_before, meter.sample())
        print(f"\n{args.clients} clients, {args.seconds:.0f} s of GETs over {len(paths)} paths:")
        print(
            f"  {len(latencies)} answers ({len(latencies) / wall:.0f}/s), {len(errors)} errors"
            + (f" (first: {errors[0]})" if errors else "")
        )
        p50, p95, p99 = (_pct(latencies, p) for p in (50, 95, 99))
        print(f"  latency p50 {p50:.1f} ms, p95 {p95:.1f} ms, p99 {p99:.1f} ms")
        capacity = (os.cpu_count() or 1) * wall
        answers = max(1, len(latencies))
        print("  CPU during the timed window (share of all cores; ms per answer):")
        for group, seconds in [*cpu_used.items(), ("total", sum(cpu_used.values()))]:
            print(f"    {group:15} {seconds / capacity:6.1%}  {seconds / answers * 1000:5.2f} ms")
        schema: list[float] = []
        with httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}) as client:
            for _ in range(6):
                t1 = time.perf_counter()
                response = client.get("/api/schema/")
                schema.append((time.perf_counter() - t1) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"/api/schema/: HTTP {response.status_code}")
        print(
            f"  GET /api/schema/ one client after the others: first {schema[0]:.0f} ms, then "
            f"median {statistics.median(schema[1:]):.1f} ms"
        )
        mark = "PASS" if p95 <= P95_TARGET_MS else "FAIL"
        print(
            f"\ntargets (informational):\n  [{mark}] (f) {args.clients} API clients, reads, "
            f"p95 {p95:.1f} ms (target ≤ {P95_TARGET_MS:.0f} ms)"
        )
    finally:
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
            log.close()
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
