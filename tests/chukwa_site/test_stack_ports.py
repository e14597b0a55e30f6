"""``stack up`` fails loudly (chukwa_site/stack.py): a taken port stops it at once with the port
and the variable that moves it; a server that dies later is named before the rest is stopped;
gunicorn's control socket is kept in the data folder, not shared through the home folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chukwa_site import embedded

PROJECT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _taken_port() -> Iterator[int]:
    """A port another program listens on (and answers health checks on, as the toy MCP
    server's would be answered)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _stack_env(**ports: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in list(env):
        # the stack starts the toys itself only when none of their variables is set
        if name.startswith(("CHUKWA_TOY_", "CHUKWA_MCP_LAMP_")):
            del env[name]
    # an endpoint that is never called here: the stack does not start the embedded model
    env["CHUKWA_LLM_BASE_URL"] = "http://127.0.0.1:9/v1"
    env["CHUKWA_PORT"] = str(_free_port())
    env["CHUKWA_TOYS_PORT"] = str(_free_port())
    env["CHUKWA_TOY_MCP_PORT"] = str(_free_port())
    env.update({name: str(port) for name, port in ports.items()})
    return env


def _up(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "chukwa_site.stack", "up"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("variable", ["CHUKWA_TOY_MCP_PORT", "CHUKWA_TOYS_PORT", "CHUKWA_PORT"])
def test_a_taken_port_stops_the_stack_at_once_naming_it(variable: str) -> None:
    with _taken_port() as port:
        stack = _up(_stack_env(**{variable: port}))
        try:
            out, err = stack.communicate(timeout=60)
        finally:
            if stack.poll() is None:
                stack.kill()
    assert stack.returncode == 1
    assert f"port {port}" in err
    assert variable in err
    assert "is taken" in err
    assert "Traceback" not in out + err
    # It stopped before starting or migrating anything.
    assert "[chukwa] web:" not in out


@pytest.mark.integration
def test_a_server_that_dies_later_is_named_and_the_rest_is_stopped() -> None:
    env = _stack_env()
    stack = _up(env)
    try:
        assert stack.stdout is not None
        deadline = time.monotonic() + 120
        for line in stack.stdout:
            if "[chukwa] web:" in line or time.monotonic() > deadline:
                break
        assert stack.poll() is None, stack.stderr.read() if stack.stderr else ""
        # gunicorn's control socket is this stack's, under its data folder
        assert (embedded.data_dir() / "gunicorn.ctl").exists()
        toy_mcp = subprocess.run(
            ["pgrep", "-f", f"devservices.toy_mcp --port {env['CHUKWA_TOY_MCP_PORT']}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert len(toy_mcp) == 1
        os.kill(int(toy_mcp[0]), signal.SIGKILL)
        _, err = stack.communicate(timeout=90)
    finally:
        if stack.poll() is None:
            stack.kill()
    assert stack.returncode == 1
    assert "the toy MCP server exited with code -9" in err
    assert f"port {env['CHUKWA_TOY_MCP_PORT']}, moved by CHUKWA_TOY_MCP_PORT" in err
    assert "stopping the rest of the stack" in err
    # Nothing of it is left running.
    left = subprocess.run(
        ["pgrep", "-f", f"gunicorn.*127.0.0.1:{env['CHUKWA_PORT']}"], capture_output=True, text=True
    )
    assert left.stdout.strip() == ""


@pytest.mark.slow
def test_the_embedded_model_is_started_bounded_and_announced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no CHUKWA_LLM_BASE_URL the stack starts the embedded model and tells the web and
    workers that it serves (the pages' banner) and that it answers one generation at a time
    (CHUKWA_LLM_MAX_CONCURRENCY=1, so no generation's deadline runs while it waits)."""
    from chukwa_site import stack

    port = _free_port()
    monkeypatch.setattr(stack, "LLM_PORT", port)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("CHUKWA_LLM_", "CHUKWA_EMBEDDED_MODEL"))
    }
    env.update({name: "http://127.0.0.1:9" for name in stack.TOY_VARS})  # toys: not started
    env[stack.TOY_MCP_URL_VAR] = "http://127.0.0.1:9/mcp"
    children: list[stack.Child] = []
    try:
        lines = stack.start_aux(env, children)
    finally:
        stack.stop_children(children)
    assert [c.name for c in children] == ["the embedded model"]
    assert env["CHUKWA_LLM_BASE_URL"] == f"http://127.0.0.1:{port}/v1"
    assert env["CHUKWA_EMBEDDED_MODEL"] == "true"
    assert env["CHUKWA_LLM_MAX_CONCURRENCY"] == "1"
    assert any("embedded model" in line for line in lines)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"CHUKWA_PORT": "9123"}, "http://127.0.0.1:9123"),
        ({"CHUKWA_PORT": "9123", "CHUKWA_SITE_URL": "https://sim.example/"}, "https://sim.example"),
    ],
)
def test_printed_links_follow_the_port_the_stack_serves_on(
    extra: dict[str, str], expected: str
) -> None:
    """Links the demo and run_experiment print start with CHUKWA_SITE_URL, which defaults to the
    stack's own port (a stack moved off 8000 printed links to 8000)."""
    env = {k: v for k, v in os.environ.items() if k != "CHUKWA_SITE_URL"}
    env.update(extra, DJANGO_SETTINGS_MODULE="chukwa_site.settings")
    code = "import django; django.setup(); from django.conf import settings; print(settings.CHUKWA_SITE_URL)"
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == expected
