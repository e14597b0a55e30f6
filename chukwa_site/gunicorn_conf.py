"""The web server's configuration, one for every way Chukwa is run (``stack up``, the
Dockerfile, docker-compose): ``gunicorn -c python:chukwa_site.gunicorn_conf``.

Threaded workers (``gthread``): a request mostly waits on PostgreSQL, so a few processes with
several threads each serve many clients at once, where sync workers (one request per process)
made every other client queue. Django keeps one database connection per thread
(``CONN_MAX_AGE``), so a process holds at most ``threads`` connections.

Environment: ``CHUKWA_WEB_WORKERS`` (processes, default 2), ``CHUKWA_WEB_THREADS`` (threads
per process, default 4), ``CHUKWA_WEB_BIND`` (default 127.0.0.1:8000; ``--bind`` overrides).
Gunicorn's control socket lives in the data folder (``CHUKWA_DATA_DIR``), not in the user's
home: two stacks on one machine would otherwise share ``~/.gunicorn/gunicorn.ctl``.

The defaults fit 2 cores (``bench/web_bench.py``, 20 keep-alive clients doing reads): a read now
costs a few ms of CPU and waits little on PostgreSQL, so one process per core is enough and
threads only cover the short database waits. With 8 threads a process's threads fought over its
GIL and some requests waited their turn several times (p99 0.36 to 0.93 s); 2 x 4 and 3 x 4 kept
p99 near 0.12 to 0.14 s at the same throughput, 4 x 4 (more processes than cores) widened p95. On
more cores, raise the workers to the cores; raise the threads when reads wait longer on the
database (a remote server).
"""

from __future__ import annotations

import os

from chukwa_site import embedded


def _positive(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise RuntimeError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise RuntimeError(f"{name} must be a positive integer, got {raw!r}")
    return value


wsgi_app = "chukwa_site.wsgi:application"
bind = [os.environ.get("CHUKWA_WEB_BIND", "127.0.0.1:8000")]
worker_class = "gthread"
workers = _positive("CHUKWA_WEB_WORKERS", 2)
threads = _positive("CHUKWA_WEB_THREADS", 4)
control_socket = str(embedded.data_dir() / "gunicorn.ctl")
# An idle keep-alive connection holds no thread in gthread workers; close it after a while.
keepalive = 5
