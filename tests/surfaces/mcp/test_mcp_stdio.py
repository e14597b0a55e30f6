"""The MCP server over stdio: ``manage.py mcp_stdio`` as a subprocess, driven by the
SDK's own stdio client the way a desktop MCP client launches it, with the API token in
CHUKWA_MCP_TOKEN."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from rest_framework.authtoken.models import Token

from scenarios_app.models import CognitionProfile, CognitionWorkflow, Scenario
from tests.support.mcp_steps import (
    OPERATOR_ONLY_TOOLS,
    SPEC_TOOLS,
    assert_one_byte_fork,
    author_and_fork,
    create_world_and_queue,
    error,
    ok,
)
from worlds_app.models import AttemptStatus, TurnAttempt

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = Path(__file__).resolve().parents[3]


def _database_url(name: str) -> str:
    db = connection.settings_dict
    return f"postgresql://{db['USER']}@/{name}?host={db['HOST']}&port={db['PORT']}"


def _env(token: str | None) -> dict[str, str]:
    """What the command needs: the project's variables, the deployment's DATABASE_URL (here
    the test database) and REDIS_URL, and the token; nothing on the command line."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("CHUKWA_", "DJANGO_")) or k in ("DATABASE_URL", "REDIS_URL")
    }
    env["DATABASE_URL"] = _database_url(connection.settings_dict["NAME"])
    env["REDIS_URL"] = settings.REDIS_URL
    env.pop("CHUKWA_MCP_TOKEN", None)
    if token is not None:
        env["CHUKWA_MCP_TOKEN"] = token
    return env


def _params(token: str | None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp_stdio"], env=_env(token), cwd=PROJECT
    )


async def _with_session(params: StdioServerParameters, errlog: IO[str], steps: Any) -> Any:
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await steps(session)


def test_an_operator_authors_forks_and_queues_a_turn_over_stdio(
    operator_user: User, tmp_path: Path
) -> None:
    token = Token.objects.create(user=operator_user).key
    before = (CognitionWorkflow.objects.count(), CognitionProfile.objects.count())

    async def steps(session: ClientSession) -> Any:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert SPEC_TOOLS <= names
        authored = await author_and_fork(session, slug="stdio_ant")
        world, attempt_id = await create_world_and_queue(
            session, slug="stdio-world", scenario=authored.fork
        )
        attempt = await ok(session, "attempt_get", attempt_id=attempt_id)
        missing = await error(session, "scenario_get", ref="0" * 64)
        return authored, world, attempt, missing

    with (tmp_path / "stderr.log").open("w+") as errlog:
        authored, world, attempt, missing = anyio.run(_with_session, _params(token), errlog, steps)
    assert_one_byte_fork(authored)
    assert (CognitionWorkflow.objects.count(), CognitionProfile.objects.count()) == (
        before[0] + 2,
        before[1] + 2,
    )
    assert Scenario.objects.filter(pk=authored.fork).exists()
    assert world["slug"] == "stdio-world"
    # No worker consumes this test's queue: the attempt stays queued, and reads back as such.
    assert attempt["status"] == "queued"
    assert TurnAttempt.objects.get(id=attempt["id"]).status == AttemptStatus.QUEUED
    assert missing["error"]["code"] == "scenario_not_found"


def test_a_reader_token_over_stdio_sees_no_write_tool_and_a_revoked_one_nothing(
    reader_user: User, tmp_path: Path
) -> None:
    token = Token.objects.create(user=reader_user).key

    async def steps(session: ClientSession) -> Any:
        names = {tool.name for tool in (await session.list_tools()).tools}
        refused = await error(session, "world_create", slug="w", scenario_ref={"name": "x"})
        await anyio.to_thread.run_sync(_revoke, token)
        after = await session.list_tools()
        revoked = await error(session, "world_list")
        return names, refused, after.tools, revoked

    with (tmp_path / "stderr.log").open("w+") as errlog:
        names, refused, after, revoked = anyio.run(_with_session, _params(token), errlog, steps)
    assert not names & OPERATOR_ONLY_TOOLS
    assert "world_get" in names
    assert refused["error"]["code"] == "permission_denied"
    # A long-lived stdio server checks its token at every call: revoked, it can do nothing.
    assert after == []
    assert revoked["error"]["code"] == "not_authenticated"


def _revoke(key: str) -> None:
    try:
        Token.objects.filter(key=key).delete()
    finally:
        connection.close()


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_the_command_refuses_to_start_without_a_valid_token(token: str | None) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio"],
        cwd=PROJECT,
        env={**os.environ, **_env(token)} if token else _without_token(),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "CHUKWA_MCP_TOKEN" in done.stderr
    assert done.stdout == ""
    if token:
        assert token not in done.stderr


def _without_token() -> dict[str, str]:
    env = {**os.environ, **_env(None)}
    env.pop("CHUKWA_MCP_TOKEN", None)
    return env


@pytest.mark.parametrize(
    "missing", [("DATABASE_URL",), ("REDIS_URL",), ("DATABASE_URL", "REDIS_URL")]
)
def test_without_the_deployment_settings_the_command_fails_in_one_line_and_starts_nothing(
    missing: tuple[str, ...], tmp_path: Path
) -> None:
    """A client that launches ``mcp_stdio`` without the deployment's settings gets one line,
    and no embedded server is started beside the deployment's (an empty data folder stays
    empty)."""
    data = tmp_path / "data"
    data.mkdir()
    env = {**os.environ, **_env("any-token"), "CHUKWA_DATA_DIR": str(data)}
    for name in missing:
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio"],
        cwd=PROJECT,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("manage.py mcp_stdio: ")
    for name in missing:
        assert name in line
    assert "Traceback" not in done.stderr
    assert list(data.iterdir()) == []


def test_a_database_without_chukwas_tables_is_one_line_too(tmp_path: Path) -> None:
    """DATABASE_URL set, but to a database that is not the deployment's (no tables)."""
    name = f"chukwa_empty_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        data = tmp_path / "data"
        data.mkdir()
        env = {
            **os.environ,
            **_env("any-token"),
            "DATABASE_URL": _database_url(name),
            "CHUKWA_DATA_DIR": str(data),
        }
        done = subprocess.run(
            [sys.executable, "manage.py", "mcp_stdio"],
            cwd=PROJECT,
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "DATABASE_URL" in lines[0] and "CHUKWA_MCP_TOKEN" in lines[0]
    assert "any-token" not in done.stderr
    # Only the secret key file (the settings create it); no embedded server was started.
    assert {p.name for p in data.iterdir()} <= {"secret_key"}
