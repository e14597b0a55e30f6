"""A secret canary (secrets never appear in traces, pages, errors or logs).

The LLM key is set to a recognisable value; turns run against ordinary and hostile sources — a
model that echoes the key into its reply (whole and split across stream chunks), into an error
body and into a broken stream, and variables misconfigured to hold the key where a URL belongs.
Then the key must appear in no API response, no page, no database row and no log record. The
same holds for an ``mcp_tool`` source's key, echoed by a hostile MCP server into a tool's
structured result, its text result, its error and a non-JSON reply.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from rest_framework.test import APIClient

from cognition_app.models import LlmCall, SourceInvocation
from devservices import toy_mcp
from tests.cognition_app.test_llm_retry import ANT_OK, BOB_OK
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, fixture_body, run_turn, workflow_of
from worlds_app.models import AttemptStatus, TurnAttempt

pytestmark = pytest.mark.django_db

CANARY = "sk-canary-7f3a9e1c5b2d4086aa"


@pytest.fixture
def canary_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as llm:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("CHUKWA_LLM_API_KEY", CANARY)
        yield llm


def _echo_patch() -> dict[str, Any]:
    return {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {
            "narration": f"The ant reads the key {CANARY} aloud.",
            "effects": [
                {"op": "append_entity_memory", "entity_id": "ant", "content": f"key {CANARY}"},
                {"op": "set_entity_state", "entity_id": "ant", "state": f"holding {CANARY}"},
            ],
        },
    }


def _run_hostile_turns(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> list[TurnAttempt]:
    attempts: list[TurnAttempt] = []
    create_world("ant_on_plate", "canary")
    llm.script(ANT_OK)  # an ordinary turn
    attempts.append(run_turn("canary"))
    # the key echoed whole, then split across 5-character stream chunks
    llm.script(Reply(text=_echo_patch_text(), chunk_size=500))
    attempts.append(run_turn("canary"))
    llm.script(Reply(text=_echo_patch_text(), chunk_size=5))
    attempts.append(run_turn("canary"))
    # echoed into an invalid reply that the retry lane sends back to the model
    llm.script(f"not json, but the key: {CANARY}", ANT_OK)
    attempts.append(run_turn("canary"))
    # echoed into error bodies (client error, server error) and a broken stream
    llm.script(Reply(status=400, error_body={"error": {"message": f"bad key {CANARY}"}}))
    attempts.append(run_turn("canary"))
    llm.script(Reply(status=503, error_body={"error": {"message": f"down; key {CANARY}"}}))
    attempts.append(run_turn("canary"))
    llm.script(Reply(raw_body=f"data: {{not json {CANARY}\n\n".encode()))
    attempts.append(run_turn("canary"))
    # misconfigured variables holding the key where a URL belongs
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", CANARY)
    attempts.append(run_turn("canary"))
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", f"http://u:{CANARY}@127.0.0.1:{llm.port}")
    attempts.append(run_turn("canary"))
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
    return attempts


def _echo_patch_text() -> str:
    return json.dumps(_echo_patch())


def _database_rows_with(value: str) -> list[str]:
    """Every table whose row text (all columns) contains ``value``."""
    found: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
        tables = [row[0] for row in cursor.fetchall()]
        for table in tables:
            cursor.execute(
                # table names come from pg_tables, not from input
                f'SELECT count(*) FROM "{table}" t WHERE strpos(t::text, %s) > 0',  # noqa: S608
                [value],
            )
            if cursor.fetchone()[0]:
                found.append(table)
    return found


def _assert_shown_nowhere(
    secret: str,
    slug: str,
    attempts: list[TurnAttempt],
    operator_client: APIClient,
    operator_user: User,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``secret`` is in no database row, no API answer or page about the world, its attempts,
    invocations and LLM calls, and no log record."""
    assert _database_rows_with(secret) == []
    pages = Client()
    pages.force_login(operator_user)
    urls = [f"/api/worlds/{slug}/", f"/api/worlds/{slug}/diff/?from=0&to=4", f"/worlds/{slug}/"]
    for number in range(5):
        urls += [f"/api/worlds/{slug}/turns/{number}/", f"/worlds/{slug}/turns/{number}/"]
    for attempt in attempts:
        urls += [f"/api/attempts/{attempt.pk}/", f"/attempts/{attempt.pk}/"]
    for inv in SourceInvocation.objects.all():
        urls += [f"/api/source-invocations/{inv.pk}/", f"/invocations/{inv.pk}/"]
    for call in LlmCall.objects.all():
        urls += [f"/api/llm-calls/{call.pk}/", f"/llm-calls/{call.pk}/"]
    for url in urls:
        client = operator_client if url.startswith("/api/") else pages
        response = client.get(url)
        # (404: a diff past the turns a world has)
        assert response.status_code in (200, 400, 404), (url, response.status_code)
        assert secret not in response.content.decode(), url

    logged = "\n".join(
        record.getMessage() + (str(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    assert secret not in logged


def test_the_key_surfaces_nowhere(
    canary_llm: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    operator_client: APIClient,
    operator_user: User,
) -> None:
    caplog.set_level(logging.DEBUG)
    attempts = _run_hostile_turns(canary_llm, monkeypatch)
    statuses = [a.status for a in attempts]
    assert statuses[:4] == [AttemptStatus.COMMITTED] * 4, [a.failure_reason for a in attempts]
    assert statuses[4:] == [AttemptStatus.FAILED] * 5
    # the key really was sent, to its own host only, and echoed back at Chukwa
    assert any(h.get("authorization") == f"Bearer {CANARY}" for h in canary_llm.headers)

    _assert_shown_nowhere(CANARY, "canary", attempts, operator_client, operator_user, caplog)
    # and the redaction is visible where the echo was: the reader sees that a key was there
    assert SourceInvocation.objects.filter(response_text__contains="[redacted]").exists()


# --- an mcp_tool source's key ---------------------------------------------------------------

MCP_CANARY = "mcp-canary-4b1d8e0f93c2a7"


def _echoing_mcp_server() -> MCPServer:
    """A hostile MCP server whose tools echo the Authorization header they were sent."""
    server: MCPServer = MCPServer("hostile-echo", log_level="WARNING")

    def heard(ctx: Context) -> str:
        return (ctx.headers or {}).get("authorization", "")

    @server.tool()
    def echo_structured(ctx: Context) -> dict[str, Any]:
        return {"heard": heard(ctx)}

    @server.tool(structured_output=False)
    def echo_text(ctx: Context) -> CallToolResult:
        text = json.dumps({"heard": heard(ctx)})
        return CallToolResult(content=[TextContent(type="text", text=text)])

    @server.tool()
    def echo_error(ctx: Context) -> dict[str, Any]:
        raise ToolError(f"refused the key {heard(ctx)}")

    @server.tool(structured_output=False)
    def echo_not_json(ctx: Context) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=f"key? {heard(ctx)}")])

    return server


def test_an_mcp_tool_key_surfaces_nowhere(
    scripted_llm: ScriptedLLM,
    toy_sources: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    operator_client: APIClient,
    operator_user: User,
) -> None:
    caplog.set_level(logging.DEBUG)
    hostile = toy_mcp.serve(api_key=MCP_CANARY, server=_echoing_mcp_server())
    monkeypatch.setenv("CHUKWA_MCP_ECHO_URL", hostile.url)
    monkeypatch.setenv("CHUKWA_MCP_ECHO_API_KEY", MCP_CANARY)
    attempts: list[TurnAttempt] = []
    try:
        for tool in ("echo_structured", "echo_text", "echo_error", "echo_not_json"):
            body = fixture_body("park_mcp")
            (lamp,) = [
                t
                for t in workflow_of(body, "walker")["nodes"][0]["available_tools"]
                if t["name"] == "toggle_lamp"
            ]
            lamp["source_ref"]["inline"]["interface"].update(
                url_env="CHUKWA_MCP_ECHO_URL", api_key_env="CHUKWA_MCP_ECHO_API_KEY", tool=tool
            )
            del lamp["result_schema_ref"]  # whatever comes back is the result
            slug = f"mcp-canary-{tool.replace('_', '-')}"
            create_world(body, slug)
            call = {"kind": "tool_call", "tool_call": {"name": "toggle_lamp", "arguments": {}}}
            if tool in ("echo_structured", "echo_text"):
                scripted_llm.script(call, BOB_OK)
            else:  # a failed tool call ends the attempt: no final patch is asked for
                scripted_llm.script(call)
            attempts.append(run_turn(slug))
        # and the key variable's value where the URL belongs
        monkeypatch.setenv("CHUKWA_MCP_ECHO_URL", MCP_CANARY)
        scripted_llm.script(
            {"kind": "tool_call", "tool_call": {"name": "toggle_lamp", "arguments": {}}}
        )
        attempts.append(run_turn("mcp-canary-echo-not-json"))
    finally:
        hostile.shutdown()
    assert [a.status for a in attempts] == [
        AttemptStatus.COMMITTED,
        AttemptStatus.COMMITTED,
        AttemptStatus.FAILED,
        AttemptStatus.FAILED,
        AttemptStatus.FAILED,
    ], [a.failure_reason for a in attempts]
    # The server only answers with the key: it was sent, as a bearer token, and echoed back.
    echoed = SourceInvocation.objects.filter(kind="model_elected_tool").order_by("started_at")
    assert [inv.failure_class for inv in echoed] == ["", "", "tool_error", "non_json", "config"]
    assert echoed[0].response_json == {"heard": "Bearer [redacted]"}
    assert echoed[1].response_json == {"heard": "Bearer [redacted]"}
    assert "[redacted]" in echoed[2].failure_message
    assert "CHUKWA_MCP_ECHO_URL" in echoed[4].failure_message
    # the redacted result is what the next generation saw
    assert any("Bearer [redacted]" in json.dumps(r["messages"]) for r in scripted_llm.requests)
    for attempt in attempts:
        _assert_shown_nowhere(
            MCP_CANARY, attempt.world.slug, [attempt], operator_client, operator_user, caplog
        )
