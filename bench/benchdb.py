"""Shared plumbing for the benchmarks: a throwaway database on the embedded server, a private
Celery queue and a worker process consuming it. Import after the bench has set CHUKWA_DB_NAME / CHUKWA_CELERY_QUEUE."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
WORKER_START_TIMEOUT_S = 60.0


def recreate_database(name: str, *, create: bool, async_commit: bool = False) -> None:
    import psycopg
    from psycopg import sql

    from chukwa_site.embedded import postgres_ensure

    pg = postgres_ensure()
    with psycopg.connect(
        host=pg.socket_dir, port=pg.port, user=pg.user, dbname="postgres", autocommit=True
    ) as conn:
        # FORCE ends any connection still open on it (a worker child that did not exit).
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        if create and async_commit:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit TO off").format(
                    sql.Identifier(name)
                )
            )


def queue_purge(queue: str) -> int:
    """Drop the messages enqueue's on-commit kicks sent while no worker listened."""
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        return int(conn.default_channel.queue_purge(queue) or 0)


def queue_delete(queue: str) -> None:
    """Remove the bench queue and its bindings from the shared broker."""
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        bound = app.amqp.queues[queue].bind(conn.default_channel)
        bound.declare()  # the transport deletes only bindings it knows of
        bound.delete()


def start_worker(
    *,
    queue: str,
    name: str,
    concurrency: int,
    log: IO[bytes],
    pool: str = "prefork",
    extra_queues: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """A Celery worker (prefork with ``concurrency`` children, or solo) on ``queue`` and
    ``extra_queues``, its output in ``log``."""
    command = [sys.executable, "-m", "celery", "-A", "chukwa_site", "worker", "--pool", pool]
    if pool == "prefork":
        command += ["--concurrency", str(concurrency)]
    command += ["-Q", ",".join((queue, *extra_queues)), "-n", name]
    # A session of its own, so that a worker that ignores SIGTERM can be killed with its
    # children (and only those).
    return subprocess.Popen(
        command,
        cwd=PROJECT_DIR,
        env={**os.environ, "CHUKWA_LOG_LEVEL": "WARNING"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def log_tail(log: IO[bytes]) -> str:
    log.flush()
    log.seek(0)
    return "\n".join(log.read().decode("utf-8", "replace").splitlines()[-40:])


def wait_for_worker(proc: subprocess.Popen[bytes], *, name: str, log: IO[bytes]) -> float:
    """Seconds until the worker answers a ping; raises with its log if it exits or never does."""
    from chukwa_site.celery import app

    t0 = time.perf_counter()
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with status {proc.returncode}:\n{log_tail(log)}")
        if any(name in reply for reply in app.control.ping(destination=[name], timeout=0.5)):
            return time.perf_counter() - t0
    raise RuntimeError(
        f"the worker did not answer a ping within {WORKER_START_TIMEOUT_S:.0f} s:\n{log_tail(log)}"
    )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()  # warm shutdown: the main process stops its pool children
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# --- CPU seconds by process group (the machine's cores are shared by everything measured) ------


def postgres_processes(db_name: str | None = None) -> list[Any]:
    """The embedded PostgreSQL server's processes: all of them (the postmaster and its
    background processes too), or only the backends connected to ``db_name``."""
    import psutil

    from chukwa_site.embedded import data_dir

    pidfile = data_dir() / "postgres" / "postmaster.pid"
    try:
        postmaster = psutil.Process(int(pidfile.read_text().splitlines()[0]))
        children = postmaster.children()
    except (OSError, ValueError, IndexError, psutil.Error):
        return []
    if db_name is None:
        return [postmaster, *children]
    backends = []
    for child in children:
        try:
            if db_name in " ".join(child.cmdline()):
                backends.append(child)
        except psutil.Error:
            continue
    return backends


def process_tree(pid: int) -> list[Any]:
    """A process and all its descendants (a prefork worker and its pool)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def cpu_sample(groups: dict[str, list[Any]]) -> dict[str, dict[int, float]]:
    """User + system CPU seconds so far of each group's processes, by pid."""
    import psutil

    out: dict[str, dict[int, float]] = {}
    for group, procs in groups.items():
        out[group] = {}
        for proc in procs:
            try:
                t = proc.cpu_times()
                out[group][proc.pid] = t.user + t.system
            except psutil.Error:
                continue
    return out


def cpu_used(
    before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
) -> dict[str, float]:
    """CPU seconds per group between two samples (processes present in the second)."""
    return {
        group: sum(t - before.get(group, {}).get(pid, 0.0) for pid, t in after[group].items())
        for group in after
    }


def _spin(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i % 7
    return time.perf_counter() - t0


def machine_parallel_ratio(n: int = 5_000_000) -> float:
    """What this machine gives two processes at once right now: the work of two identical
    pure-Python loops run together over the same loop run alone (2.0 on two free cores). A
    shared machine's figure moves from minute to minute; read a parallel benchmark beside it."""
    import multiprocessing

    alone = _spin(n)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        together = max(pool.map(_spin, [n, n]))
    return 2 * alone / together
