"""The official MCP Inspector CLI (pinned, installed from npm with the Node it needs by
``tests/support/inspector.py``) against the live ``/mcp/`` and against ``manage.py mcp_stdio``:
tools/list with zero portability findings, a read and a write, and the 401 challenge.

Skipped, with the reason printed, only when npm or its registry is unavailable; the same
portability rules run in ``test_mcp_catalog.py`` whatever happens here."""

from __future__ import annotations

import json
import os
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token

from cognition_app.models import ModelPrice
from tests.support.inspector import Inspector, inspector

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cli() -> Inspector:
    return inspector()


def _stdout_json(done: Any) -> Any:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def _tool_body(result: dict[str, Any]) -> Any:
    (content,) = result["content"]
    return json.loads(content["text"])


def test_the_inspector_lists_reads_and_writes_over_http(
    cli: Inspector, live_server: Any, operator_user: User
) -> None:
    url = f"{live_server.url}/mcp/"
    header = f"Authorization: Bearer {Token.objects.create(user=operator_user).key}"
    base = (url, "--transport", "http", "--header", header)

    listed = cli.run(*base, "--method", "tools/list", "--strict")
    tools = _stdout_json(listed)["tools"]
    assert len(tools) > 40
    # --strict prints every portability finding on stderr; none is printed.
    assert "Warning:" not in listed.stderr and "Error:" not in listed.stderr, listed.stderr
    assert "Schema portability" not in listed.stderr, listed.stderr
    for tool in tools:
        assert "SPEC" not in tool["description"], tool["name"]

    write = cli.run(
        *base,
        "--method",
        "tools/call",
        "--tool-name",
        "model_price_put",
        "--tool-arg",
        "url_env=CHUKWA_LLM_BASE_URL",
        "model=inspector-model",
        "input_per_million=1.5",
        "output_per_million=2",
        "cached_input_per_million=0.5",
    )
    written = _stdout_json(write)
    assert written.get("isError") is not True, written
    price = ModelPrice.objects.get(model="inspector-model")
    assert price.input_per_million == Decimal("1.5")

    read = cli.run(*base, "--method", "tools/call", "--tool-name", "model_price_list")
    prices = _tool_body(_stdout_json(read))
    assert "inspector-model" in json.dumps(prices)


def test_the_inspector_without_a_token_meets_the_bearer_challenge(
    cli: Inspector, live_server: Any
) -> None:
    """Without a token, the Inspector reads the 401's Bearer challenge and the API's body; with
    ``--stored-auth-only`` (its mode for scripts) it stops there instead of starting OAuth."""
    done = cli.run(
        f"{live_server.url}/mcp/",
        "--transport",
        "http",
        "--method",
        "tools/list",
        "--stored-auth-only",
    )
    assert done.returncode == 3, done.stdout + done.stderr  # the Inspector's "auth required"
    (line,) = [x for x in done.stderr.splitlines() if x.startswith('{"error"')]
    said = json.loads(line)
    assert said["error"]["code"] == "auth_required"
    body = json.loads(said["error"]["message"].partition(": ")[2])
    assert body["error"]["code"] == "not_authenticated"
    assert "Authorization: Bearer <API token>" in body["error"]["message"]


def test_the_inspector_lists_and_reads_over_stdio(cli: Inspector, reader_user: User) -> None:
    db = connection.settings_dict
    database_url = f"postgresql://{db['USER']}@/{db['NAME']}?host={db['HOST']}&port={db['PORT']}"
    token = Token.objects.create(user=reader_user).key
    env_args = [
        "-e",
        f"DATABASE_URL={database_url}",
        "-e",
        f"REDIS_URL={settings.REDIS_URL}",
        "-e",
        f"CHUKWA_MCP_TOKEN={token}",
        "-e",
        f"CHUKWA_DATA_DIR={os.environ.get('CHUKWA_DATA_DIR', PROJECT / 'var')}",
    ]
    target = ["--cwd", str(PROJECT), sys.executable, "manage.py", "mcp_stdio"]
    listed = cli.run(*env_args, "--method", "tools/list", "--strict", *target)
    tools = _stdout_json(listed)["tools"]
    names = {tool["name"] for tool in tools}
    assert "world_list" in names and "world_create" not in names  # a reader's tools
    assert "Warning:" not in listed.stderr and "Error:" not in listed.stderr, listed.stderr
    read = cli.run(*env_args, "--method", "tools/call", "--tool-name", "world_list", *target)
    assert _tool_body(_stdout_json(read))["count"] == 0
