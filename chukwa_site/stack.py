"""The local stack: embedded services, web server and a Celery worker in one command.

    python -m chukwa_site.stack up        # services + migrate + web + worker; Ctrl-C stops web/worker
    python -m chukwa_site.stack services  # only start (or find) the embedded PostgreSQL and Redis
    python -m chukwa_site.stack status    # what is running where, as JSON
    python -m chukwa_site.stack stop      # stop the embedded PostgreSQL and Redis

With DATABASE_URL / REDIS_URL set, those servers are used and nothing embedded is started.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from chukwa_site import embedded


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "chukwa_site.settings")
    return env


def services() -> dict[str, str]:
    info: dict[str, str] = {}
    if os.environ.get("DATABASE_URL"):
        info["database"] = "DATABASE_URL (external)"
    else:
        pg = embedded.postgres_ensure()
        info["database"] = (
            f"embedded PostgreSQL, socket {pg.socket_dir} port {pg.port}, db {pg.database}"
        )
    if os.environ.get("REDIS_URL"):
        info["redis"] = "REDIS_URL (external)"
    else:
        info["redis"] = f"embedded Redis, {embedded.redis_ensure()}"
    return info


def _manage(*args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], check=True, cwd=embedded.PROJECT_DIR, env=_env()
    )


LLM_PORT = int(os.environ.get("CHUKWA_EMBEDDED_LLM_PORT", "8091"))
TOYS_PORT = int(os.environ.get("CHUKWA_TOYS_PORT", "8092"))
TOY_MCP_PORT = int(os.environ.get("CHUKWA_TOY_MCP_PORT", "8093"))
TOY_MCP_URL_VAR = "CHUKWA_MCP_LAMP_URL"
TOY_MCP_KEY_VAR = "CHUKWA_MCP_LAMP_API_KEY"
TOY_VARS = (
    "CHUKWA_TOY_WEATHER_URL",
    "CHUKWA_TOY_PA_URL",
    "CHUKWA_TOY_PHONE_URL",
    "CHUKWA_TOY_VENDING_URL",
    "CHUKWA_TOY_FOUNTAIN_URL",
    "CHUKWA_TOY_SEND_TEXT_URL",
)


def start_aux(env: dict[str, str], children: list[subprocess.Popen[bytes]]) -> list[str]:
    """The embedded model (when CHUKWA_LLM_BASE_URL is unset), the toy sources (when the
    CHUKWA_TOY_* variables are unset) and the toy MCP server (when CHUKWA_MCP_LAMP_URL is
    unset); sets the variables in ``env`` for the web and worker."""
    lines: list[str] = []
    if not env.get("CHUKWA_LLM_BASE_URL"):
        log = (embedded.data_dir() / "embedded-llm.log").open("ab")
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "cognition_app.embedded_llm", "--port", str(LLM_PORT)],
                cwd=embedded.PROJECT_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        base = f"http://127.0.0.1:{LLM_PORT}"
        if not _wait_http(f"{base}/health", 60):
            raise RuntimeError(f"the embedded model did not start; see {log.name}")
        env["CHUKWA_LLM_BASE_URL"] = f"{base}/v1"
        # Sources may name an API key variable; the local server needs none.
        env.setdefault("CHUKWA_LLM_API_KEY", "embedded-model-needs-no-key")
        lines.append(f"embedded model (SmolLM2-135M-Instruct via llama.cpp): {base}/v1")
    else:
        lines.append(f"LLM endpoint from CHUKWA_LLM_BASE_URL: {env['CHUKWA_LLM_BASE_URL']}")
    if not any(env.get(name) for name in TOY_VARS):
        log = (embedded.data_dir() / "toys.log").open("ab")
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cognition_app.toys",
                    "--port",
                    str(TOYS_PORT),
                    "--state-dir",
                    str(embedded.data_dir() / "toys"),
                ],
                cwd=embedded.PROJECT_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        base = f"http://127.0.0.1:{TOYS_PORT}"
        if not _wait_http(f"{base}/health", 30):
            raise RuntimeError(f"the toy sources did not start; see {log.name}")
        for name in TOY_VARS:
            env[name] = base
        lines.append(f"toy sources (weather, PA, phone, vending, fountain, send_text): {base}")
    if not env.get(TOY_MCP_URL_VAR):
        lines.append(_start_toy_mcp(env, children))
    return lines


def _start_toy_mcp(env: dict[str, str], children: list[subprocess.Popen[bytes]]) -> str:
    """The park's toy MCP server (a lamp), requiring a bearer key made up for this run unless
    CHUKWA_MCP_LAMP_API_KEY is set; the worker sends it (the mcp_tool source names the
    variable)."""
    env.setdefault(TOY_MCP_KEY_VAR, secrets.token_urlsafe(24))
    log = (embedded.data_dir() / "toy-mcp.log").open("ab")
    children.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cognition_app.toy_mcp",
                "--port",
                str(TOY_MCP_PORT),
                "--api-key-env",
                TOY_MCP_KEY_VAR,
            ],
            cwd=embedded.PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    base = f"http://127.0.0.1:{TOY_MCP_PORT}"
    if not _wait_http(f"{base}/health", 30):
        raise RuntimeError(f"the toy MCP server did not start; see {log.name}")
    env[TOY_MCP_URL_VAR] = f"{base}/mcp"
    return f"toy MCP server (lamp; tool toggle_lamp): {base}/mcp"


def _wait_http(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - our own loopback URL
                return True
        except urllib.error.HTTPError:
            return True  # the server answered (a 503 health is still an answer)
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    return False


def up(host: str, port: int, concurrency: int) -> int:
    for line in services().values():
        print(f"[chukwa] {line}", flush=True)
    _manage("migrate", "--noinput", "-v", "0")
    env = _env()
    children: list[subprocess.Popen[bytes]] = []
    for line in start_aux(env, children):
        print(f"[chukwa] {line}", flush=True)
    bin_dir = os.path.dirname(sys.executable)
    web = subprocess.Popen(
        [
            os.path.join(bin_dir, "gunicorn"),
            "-c",
            "python:chukwa_site.gunicorn_conf",  # threaded workers (gthread)
            "--bind",
            f"{host}:{port}",
            "--access-logfile",
            "-",
        ],
        cwd=embedded.PROJECT_DIR,
        env=env,
    )
    queue = os.environ.get("CHUKWA_CELERY_QUEUE", "chukwa")
    control_queue = os.environ.get("CHUKWA_CELERY_CONTROL_QUEUE", "chukwa-control")
    worker = subprocess.Popen(
        [
            os.path.join(bin_dir, "celery"),
            "-A",
            "chukwa_site",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(concurrency),
            "--queues",
            queue,
            "--hostname",
            f"chukwa-worker-{os.getpid()}@%h",
        ],
        cwd=embedded.PROJECT_DIR,
        env=env,
    )
    # The periodic reaper/re-drive (interrupts attempts of dead workers, re-sends lost
    # dispatches) runs in a worker of its own, so it never waits behind turn attempts; the
    # beat scheduler that queues it runs in the same process.
    control = subprocess.Popen(
        [
            os.path.join(bin_dir, "celery"),
            "-A",
            "chukwa_site",
            "worker",
            "--loglevel",
            "INFO",
            "--pool",
            "solo",
            "--queues",
            control_queue,
            "--hostname",
            f"chukwa-control-{os.getpid()}@%h",
            "--beat",
            "--schedule",
            str(embedded.data_dir() / "celerybeat-schedule"),
        ],
        cwd=embedded.PROJECT_DIR,
        env=env,
    )
    children += [web, worker, control]

    def stop(*_args: object) -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    base = f"http://{host}:{port}"
    if _wait_http(f"{base}/healthz", 30):
        print(
            f"\n[chukwa] web:     {base}/\n"
            f"[chukwa] admin:   {base}/admin/\n"
            f"[chukwa] API:     {base}/api/  (OpenAPI schema at {base}/api/schema/)\n"
            f"[chukwa] MCP:     {base}/mcp/  (streamable HTTP, Authorization: Bearer <token>)\n"
            f"[chukwa] health:  {base}/healthz\n"
            "[chukwa] Ctrl-C stops the web server and the workers; "
            "`python -m chukwa_site.stack stop` stops PostgreSQL and Redis.\n",
            flush=True,
        )
    code = 0
    while all(child.poll() is None for child in children):
        time.sleep(0.5)
    for child in children:
        if child.poll() not in (None, 0, -signal.SIGTERM):
            code = 1
    stop()
    for child in children:
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
    return code


def status() -> dict[str, object]:
    pg = embedded._postmaster_running(embedded._pgdata())
    # The URLs are what a process started outside the stack (``manage.py mcp_stdio``, launched
    # by an MCP client) is given as DATABASE_URL and REDIS_URL to use these servers.
    url = (
        embedded.PostgresInfo(pg[0], pg[1], "postgres", embedded.DATABASE_NAME, False).url
        if pg
        else None
    )
    return {
        "data_dir": str(embedded.data_dir()),
        "postgres": {"running": pg is not None, "socket_dir": pg[0] if pg else None, "url": url},
        "redis": {
            "running": embedded._redis_ping(embedded._redis_socket()),
            "url": embedded.redis_url(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chukwa_site.stack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start services, web server and worker")
    p_up.add_argument("--host", default=os.environ.get("CHUKWA_HOST", "127.0.0.1"))
    p_up.add_argument("--port", type=int, default=int(os.environ.get("CHUKWA_PORT", "8000")))
    p_up.add_argument("--concurrency", type=int, default=2)
    sub.add_parser("services", help="start (or find) the embedded PostgreSQL and Redis")
    sub.add_parser("status", help="print what is running")
    sub.add_parser("stop", help="stop the embedded PostgreSQL and Redis")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.host, args.port, args.concurrency)
    if args.command == "services":
        for line in services().values():
            print(f"[chukwa] {line}")
        return 0
    if args.command == "status":
        print(json.dumps(status(), indent=2))
        return 0
    stopped_redis = embedded.redis_stop()
    stopped_pg = embedded.postgres_stop()
    if not (stopped_redis or stopped_pg):
        print("[chukwa] nothing was running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
