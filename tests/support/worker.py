"""A real Celery worker subprocess for tests, and routing of attempt tasks to its queue."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


@contextmanager
def worker_process(
    name: str,
    *,
    env: dict[str, str] | None = None,
    queue: str | None = None,
    pool: str = "solo",
    concurrency: int = 1,
    timeout: float = 90.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``celery worker`` (hostname ``<name>@host``), wait until it answers a ping, and
    stop it afterwards. ``queue`` is also exported as CHUKWA_CELERY_QUEUE to the worker, and the
    worker consumes ``experiment_queue(queue)`` (exported as CHUKWA_CELERY_EXPERIMENT_QUEUE), as
    every turn worker does, and ``control_queue(queue)`` too (exported as CHUKWA_CELERY_CONTROL_QUEUE), so a
    test can drive the periodic reaper/re-drive on it, and ``measure_queue(queue)`` (exported as
    CHUKWA_CELERY_MEASURE_QUEUE), so measurements a test asks for run on it. Its log is
    var/<name>.log."""
    from chukwa_site.celery import app

    # The worker logs at CHUKWA_LOG_LEVEL (Celery's --loglevel is not used: chukwa_site.celery).
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chukwa_site.settings",
        "CHUKWA_LOG_LEVEL": "INFO",
        **(env or {}),
    }
    command = [sys.executable, "-m", "celery", "-A", "chukwa_site", "worker", "--pool", pool]
    if pool == "prefork":
        command += ["--concurrency", str(concurrency)]
    if queue is not None:
        full_env["CHUKWA_CELERY_QUEUE"] = queue
        full_env["CHUKWA_CELERY_EXPERIMENT_QUEUE"] = experiment_queue(queue)
        full_env["CHUKWA_CELERY_CONTROL_QUEUE"] = control_queue(queue)
        full_env["CHUKWA_CELERY_MEASURE_QUEUE"] = measure_queue(queue)
        queues = [queue, experiment_queue(queue), control_queue(queue), measure_queue(queue)]
        command += ["-Q", ",".join(queues)]
    command += ["--hostname", f"{name}@%h"]
    log_path = PROJECT / "var" / f"{name}.log"
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            command, cwd=PROJECT, env=full_env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + timeout
            while not any(
                n.startswith(name) for r in (app.control.ping(timeout=0.5) or []) for n in r
            ):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the Celery worker {name} did not start; see {log_path}")
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def experiment_queue(queue: str) -> str:
    """The experiments' attempt queue that goes with a test worker's attempt queue."""
    return f"{queue}-experiments"


def control_queue(queue: str) -> str:
    """The reaper/re-drive queue that goes with a test worker's attempt queue."""
    return f"{queue}-control"


def measure_queue(queue: str) -> str:
    """The measure queue that goes with a test worker's attempt queue."""
    return f"{queue}-measure"


@contextmanager
def routed_to(queue: str) -> Iterator[None]:
    """Attempt tasks queued meanwhile go to ``queue`` (those of experiments' worlds to its
    experiments queue), measurements to its measure queue (all read at send time)."""
    from django.conf import settings

    names = ("CELERY_TASK_DEFAULT_QUEUE", "CHUKWA_EXPERIMENT_QUEUE", "CHUKWA_MEASURE_QUEUE")
    previous = [getattr(settings, name) for name in names]
    for name, value in zip(
        names, (queue, experiment_queue(queue), measure_queue(queue)), strict=True
    ):
        setattr(settings, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, previous, strict=True):
            setattr(settings, name, value)


@contextmanager
def unread_queue(name: str) -> Iterator[str]:
    """Attempt tasks queued meanwhile go to ``name`` (and its experiments queue), queues no
    worker reads (emptied before and deleted after), so a test sees every kick."""
    delete_queue(name)
    delete_queue(experiment_queue(name))
    try:
        with routed_to(name):
            yield name
    finally:
        delete_queue(name)
        delete_queue(experiment_queue(name))


def taken_attempt_ids(queue: str) -> list[str]:
    """The attempt ids of the run_turn_attempt messages waiting in the queue (newest first),
    then the queue emptied."""
    import json

    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        raw = client.lrange(queue, 0, -1)
        client.delete(queue)
    return [json.loads(json.loads(m)["headers"]["argsrepr"].replace("'", '"'))[0] for m in raw]


def delete_queue(queue: str) -> None:
    """Remove a test queue, its messages and its bindings from the shared broker."""
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        bound = app.amqp.queues[queue].bind(conn.default_channel)
        bound.declare()  # the transport deletes only bindings it knows of
        bound.delete()
