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
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

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


LLM_PORT_VAR, TOYS_PORT_VAR, TOY_MCP_PORT_VAR = (
    "CHUKWA_EMBEDDED_LLM_PORT",
    "CHUKWA_TOYS_PORT",
    "CHUKWA_TOY_MCP_PORT",
)
LLM_PORT = int(os.environ.get(LLM_PORT_VAR, "8091"))
TOYS_PORT = int(os.environ.get(TOYS_PORT_VAR, "8092"))
TOY_MCP_PORT = int(os.environ.get(TOY_MCP_PORT_VAR, "8093"))
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


class StackError(Exception):
    """A server of the stack could not start or stopped: the message names it, its port and
    the variable that moves the port."""


@dataclass
class Child:
    """A process the stack started, with what a reader needs to know when it fails."""

    name: str
    process: subprocess.Popen[bytes]
    port: int | None = None
    port_variable: str | None = None
    log: str | None = None

    def where(self) -> str:
        parts = []
        if self.port is not None:
            parts.append(f"port {self.port}, moved by {self.port_variable}")
        if self.log is not None:
            parts.append(f"log {self.log}")
        return f" ({'; '.join(parts)})" if parts else ""


def _require_free(name: str, host: str, port: int, variable: str) -> None:
    """Fail at once, before anything starts, when another program holds a port the stack needs
    (a health check would otherwise be answered by that program and the stack stopped later,
    when its own server exited)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR, as the servers bind: a port left in TIME_WAIT by a stack that just
        # stopped is free to them, one that something listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise StackError(
                f"{name} cannot start: port {port} on {host} is taken ({exc.strerror}); "
                f"stop what uses it or set {variable} to a free port"
            ) from None


def _wait_ready(child: Child, url: str, timeout: float) -> None:
    """Wait until ``url`` answers, failing as soon as the child exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = child.process.poll()
        if code is not None:
            raise StackError(f"{child.name} exited with code {code} while starting{child.where()}")
        if _answers(url):
            if child.process.poll() is None:
                return
            continue  # someone else answered: report the child's exit above
        time.sleep(0.3)
    raise StackError(f"{child.name} did not answer {url} within {timeout:g} s{child.where()}")


def _spawn(
    children: list[Child],
    name: str,
    args: list[str],
    env: dict[str, str],
    *,
    port: int | None = None,
    port_variable: str | None = None,
    log_name: str | None = None,
) -> Child:
    log = (embedded.data_dir() / log_name).open("ab") if log_name else None
    process = subprocess.Popen(
        args,
        cwd=embedded.PROJECT_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT if log else None,
    )
    child = Child(name, process, port, port_variable, log.name if log else None)
    children.append(child)
    return child


def aux_ports(env: dict[str, str]) -> list[tuple[str, str, int, str]]:
    """(name, host, port, variable) of every loopback server :func:`start_aux` will start."""
    ports = []
    if not env.get("CHUKWA_LLM_BASE_URL"):
        ports.append(("the embedded model", "127.0.0.1", LLM_PORT, LLM_PORT_VAR))
    if not any(env.get(name) for name in TOY_VARS):
        ports.append(("the toy sources", "127.0.0.1", TOYS_PORT, TOYS_PORT_VAR))
    if not env.get(TOY_MCP_URL_VAR):
        ports.append(("the toy MCP server", "127.0.0.1", TOY_MCP_PORT, TOY_MCP_PORT_VAR))
    return ports


def start_aux(env: dict[str, str], children: list[Child]) -> list[str]:
    """The embedded model (when CHUKWA_LLM_BASE_URL is unset), the toy sources (when the
    CHUKWA_TOY_* variables are unset) and the toy MCP server (when CHUKWA_MCP_LAMP_URL is
    unset); sets the variables in ``env`` for the web and worker. :class:`StackError` when a
    port is taken or a server does not come up."""
    for name, host, port, variable in aux_ports(env):
        _require_free(name, host, port, variable)
    lines: list[str] = []
    if not env.get("CHUKWA_LLM_BASE_URL"):
        base = f"http://127.0.0.1:{LLM_PORT}"
        child = _spawn(
            children,
            "the embedded model",
            [sys.executable, "-m", "devservices.embedded_llm", "--port", str(LLM_PORT)],
            env,
            port=LLM_PORT,
            port_variable=LLM_PORT_VAR,
            log_name="embedded-llm.log",
        )
        _wait_ready(child, f"{base}/health", 60)
        env["CHUKWA_LLM_BASE_URL"] = f"{base}/v1"
        env["CHUKWA_EMBEDDED_MODEL"] = "true"  # the pages say replies come from a toy model
        # It generates one reply at a time: every worker's calls wait for it before their
        # timeout_ms starts (cognition_app/sources/admission/endpoint.py), not in its queue.
        env["CHUKWA_LLM_MAX_CONCURRENCY"] = "1"
        # Sources may name an API key variable; the local server needs none.
        env.setdefault("CHUKWA_LLM_API_KEY", "embedded-model-needs-no-key")
        lines.append(f"embedded model (SmolLM2-135M-Instruct via llama.cpp): {base}/v1")
    else:
        lines.append(f"LLM endpoint from CHUKWA_LLM_BASE_URL: {env['CHUKWA_LLM_BASE_URL']}")
    if not any(env.get(name) for name in TOY_VARS):
        base = f"http://127.0.0.1:{TOYS_PORT}"
        child = _spawn(
            children,
            "the toy sources",
            [
                sys.executable,
                "-m",
                "devservices.toys",
                "--port",
                str(TOYS_PORT),
                "--state-dir",
                str(embedded.data_dir() / "toys"),
            ],
            env,
            port=TOYS_PORT,
            port_variable=TOYS_PORT_VAR,
            log_name="toys.log",
        )
        _wait_ready(child, f"{base}/health", 30)
        for name in TOY_VARS:
            env[name] = base
        lines.append(f"toy sources (weather, PA, phone, vending, fountain, send_text): {base}")
    if not env.get(TOY_MCP_URL_VAR):
        lines.append(_start_toy_mcp(env, children))
    return lines


def _start_toy_mcp(env: dict[str, str], children: list[Child]) -> str:
    """The park's toy MCP server (a lamp), requiring a bearer key made up for this run unless
    CHUKWA_MCP_LAMP_API_KEY is set; the worker sends it (the mcp_tool source names the
    variable)."""
    env.setdefault(TOY_MCP_KEY_VAR, secrets.token_urlsafe(24))
    child = _spawn(
        children,
        "the toy MCP server",
        [
            sys.executable,
            "-m",
            "devservices.toy_mcp",
            "--port",
            str(TOY_MCP_PORT),
            "--api-key-env",
            TOY_MCP_KEY_VAR,
        ],
        env,
        port=TOY_MCP_PORT,
        port_variable=TOY_MCP_PORT_VAR,
        log_name="toy-mcp.log",
    )
    base = f"http://127.0.0.1:{TOY_MCP_PORT}"
    _wait_ready(child, f"{base}/health", 30)
    env[TOY_MCP_URL_VAR] = f"{base}/mcp"
    return f"toy MCP server (lamp; tool toggle_lamp): {base}/mcp"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - our own loopback URL
            return True
    except urllib.error.HTTPError:
        return True  # the server answered (a 503 health is still an answer)
    except (urllib.error.URLError, OSError):
        return False


def stop_children(children: list[Child]) -> None:
    """Terminate every child still running, newest first, and wait for each (kill after 20 s)."""
    for child in reversed(children):
        if child.process.poll() is None:
            child.process.terminate()
    for child in children:
        try:
            child.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.process.kill()


def up(host: str, port: int, concurrency: int) -> int:
    env = _env()
    # Every port is checked before anything starts or migrates: a taken one fails in a second.
    _require_free("the web server", host, port, "CHUKWA_PORT (or --port)")
    for name, aux_host, aux_port, variable in aux_ports(env):
        _require_free(name, aux_host, aux_port, variable)
    for line in services().values():
        print(f"[chukwa] {line}", flush=True)
    _manage("migrate", "--noinput", "-v", "0")
    children: list[Child] = []
    stopping = False

    def stop(*_args: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.process.poll() is None:
                child.process.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        code = _run_children(host, port, concurrency, env, children, lambda: stopping)
    except StackError:
        stop_children(children)
        if stopping:  # Ctrl-C while starting: the children's exits are not failures
            return 0
        raise
    stop_children(children)
    return code


def _run_children(
    host: str,
    port: int,
    concurrency: int,
    env: dict[str, str],
    children: list[Child],
    stopping: Callable[[], bool],
) -> int:
    for line in start_aux(env, children):
        print(f"[chukwa] {line}", flush=True)
    bin_dir = os.path.dirname(sys.executable)
    web = _spawn(
        children,
        "the web server (gunicorn)",
        [
            os.path.join(bin_dir, "gunicorn"),
            "-c",
            "python:chukwa_site.gunicorn_conf",  # threaded workers (gthread)
            "--bind",
            f"{host}:{port}",
            "--access-logfile",
            "-",
        ],
        env,
        port=port,
        port_variable="CHUKWA_PORT (or --port)",
    )
    queue = os.environ.get("CHUKWA_CELERY_QUEUE", "chukwa")
    experiment_queue = os.environ.get("CHUKWA_CELERY_EXPERIMENT_QUEUE", "chukwa-experiments")
    control_queue = os.environ.get("CHUKWA_CELERY_CONTROL_QUEUE", "chukwa-control")
    measure_queue = os.environ.get("CHUKWA_CELERY_MEASURE_QUEUE", "chukwa-measure")
    celery = [os.path.join(bin_dir, "celery"), "-A", "chukwa_site", "worker", "--loglevel", "INFO"]

    def worker(what: str, name: str, queue: str, *options: str) -> None:
        command = [*celery, *options, "--queues", queue, "--hostname", f"{name}-{os.getpid()}@%h"]
        _spawn(children, what, command, env)

    # Interactive turns and experiments' turns: kombu's Redis transport takes the two queues in
    # turn, so an operator's turn waits behind at most one experiment attempt per process.
    worker(
        "the Celery worker",
        "chukwa-worker",
        f"{queue},{experiment_queue}",
        "--concurrency",
        str(concurrency),
    )
    # Measuring (metrics over committed turns, LLM judges) on a worker of its own: a turn never
    # waits behind a measurement.
    worker("the measure worker", "chukwa-measure", measure_queue, "--pool", "solo")
    # The periodic reaper/re-drive (interrupts attempts of dead workers, re-sends lost
    # dispatches) runs in a worker of its own, so it never waits behind turn attempts; the
    # beat scheduler that queues it runs in the same process.
    worker(
        "the control worker (reaper and beat)",
        "chukwa-control",
        control_queue,
        "--pool",
        "solo",
        "--beat",
        "--schedule",
        str(embedded.data_dir() / "celerybeat-schedule"),
    )
    base = f"http://{host}:{port}"
    # healthy once the workers answer too: on a loaded machine that takes more than a minute
    # (a child that exits fails at once; only a slow start waits this long)
    _wait_ready(web, f"{base}/healthz", float(os.environ.get("CHUKWA_STACK_START_SECONDS", "180")))
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
    while True:
        ended = [child for child in children if child.process.poll() is not None]
        if ended:
            break
        time.sleep(0.5)
    if stopping():
        return 0
    for child in ended:
        print(
            f"[chukwa] {child.name} exited with code {child.process.returncode}{child.where()}; "
            f"stopping the rest of the stack",
            file=sys.stderr,
            flush=True,
        )
    return 1


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
        try:
            return up(args.host, args.port, args.concurrency)
        except StackError as exc:
            print(f"[chukwa] error: {exc}", file=sys.stderr, flush=True)
            return 1
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
