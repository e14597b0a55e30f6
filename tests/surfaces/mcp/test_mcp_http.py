"""The MCP server over streamable HTTP at /mcp/, driven by the SDK's own client against
the live server: authoring piece by piece, a one-byte fork, a world whose turn a real worker
commits, the API's errors and rights."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scenarios_app.models import CognitionProfile, CognitionWorkflow, Scenario
from tests.support.mcp_steps import (
    OPERATOR_ONLY_TOOLS,
    SPEC_TOOLS,
    assert_one_byte_fork,
    author_and_fork,
    body_of,
    create_world_and_queue,
    error,
    ok,
)
from worlds_app.models import AttemptStatus, TurnAttempt

pytestmark = pytest.mark.django_db(transaction=True)


@asynccontextmanager
async def mcp_session(url: str, authorization: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(
        headers={"Authorization": authorization}, timeout=httpx2.Timeout(60.0)
    )
    async with http, streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def _token(user: User) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def test_an_operator_authors_forks_and_runs_a_scenario(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    url = f"{live_server.url}/mcp/"
    authorization = f"Bearer {_token(operator_user)}"
    workflows, profiles, scenarios = (
        CognitionWorkflow.objects.count(),
        CognitionProfile.objects.count(),
        Scenario.objects.count(),
    )

    async def author() -> Any:
        async with mcp_session(url, authorization) as session:
            listed = await session.list_tools()
            names = {tool.name for tool in listed.tools}
            assert SPEC_TOOLS <= names
            put = next(tool for tool in listed.tools if tool.name == "scenario_assemble")
            assert "chronon_seconds" in put.input_schema["properties"]
            assert put.annotations is not None and put.annotations.read_only_hint is False
            authored = await author_and_fork(session, slug="mcp_ant")
            world, attempt_id = await create_world_and_queue(
                session, slug="mcp-world", scenario=authored.fork
            )
            return authored, world, attempt_id

    authored, world, attempt_id = anyio.run(author)
    assert_one_byte_fork(authored)
    # The rows the tools counted are the database's.
    assert CognitionWorkflow.objects.count() == workflows + 2
    assert CognitionProfile.objects.count() == profiles + 2
    assert Scenario.objects.count() == scenarios + 2
    assert world["slug"] == "mcp-world"

    deadline = time.monotonic() + 120
    while TurnAttempt.objects.get(id=attempt_id).status in (
        AttemptStatus.QUEUED,
        AttemptStatus.RUNNING,
    ):
        assert time.monotonic() < deadline, "the worker did not finish the attempt"
        time.sleep(0.2)

    async def read_back() -> dict[str, Any]:
        async with mcp_session(url, authorization) as session:
            attempt = await ok(session, "attempt_get", attempt_id=attempt_id)
            turn = await ok(session, "turn_get", slug="mcp-world", number=1)
            diff = await ok(session, "world_diff", slug="mcp-world", **{"from": 0, "to": 1})
            lineage = await ok(session, "scenario_lineage", ref=authored.fork)
            return {"attempt": attempt, "turn": turn, "diff": diff, "lineage": lineage}

    read = anyio.run(read_back)
    assert read["attempt"]["status"] == "committed", read["attempt"]["failure"]
    assert read["attempt"]["produced_turn"] == 1
    (patch,) = read["turn"]["patches"]
    assert patch["subject_id"] == "ant"
    assert patch["narration"] == "The ant walks east across the plate to the crumb."
    assert {c["target_id"] for c in read["diff"]["changes"]} >= {"ant"}
    assert [(e["parent"], e["child"]) for e in read["lineage"]["edges"]] == [
        (authored.scenario, authored.fork)
    ]


def test_names_worlds_and_errors_match_the_rest_api(
    live_server: Any, operator_user: User, operator_client: APIClient
) -> None:
    url = f"{live_server.url}/mcp"  # without the slash too
    authorization = f"Token {_token(operator_user)}"
    missing = "0" * 64
    nobody = str(uuid.uuid4())
    bad_assembly = {
        "scenario_slug": "x",
        "description": "d",
        "chronon_seconds": 0,
        "cognition_profiles": {},
        "environments": {},
        "entities": [],
    }

    async def run() -> dict[str, Any]:
        async with mcp_session(url, authorization) as session:
            authored = await author_and_fork(session, slug="names_ant")
            named = await ok(session, "scenario_name_set", name="ant", hash=authored.scenario)
            conflict = await error(
                session,
                "scenario_name_set",
                name="ant",
                hash=authored.fork,
                expected_current_hash=authored.fork,
            )
            await ok(session, "scenario_name_set", name="ant", hash=authored.fork)
            by_name = await ok(session, "scenario_get", ref="ant")
            unset = await ok(
                session, "scenario_name_unset", name="ant", expected_current_hash=authored.fork
            )
            await ok(session, "world_create", slug="doomed", scenario_ref={"hash": authored.fork})
            listed = await ok(session, "world_list")
            deleted = await ok(session, "world_delete", slug="doomed")
            return {
                "named": named,
                "conflict": conflict,
                "by_name": by_name,
                "unset": unset,
                "listed": listed,
                "deleted": deleted,
                "fork": authored.fork,
                "errors": {
                    "missing_schema": await error(session, "json_schemas_get", hash=missing),
                    "bad_hash": await error(session, "entities_get", hash="nope"),
                    "bad_assembly": await error(session, "scenario_assemble", **bad_assembly),
                    "unknown_field": await error(session, "turn_enqueue", slug="x", counts=2),
                    "no_world": await error(session, "world_get", slug="no-such-world"),
                    "no_attempt": await error(session, "attempt_get", attempt_id=nobody),
                    "no_invocation": await error(
                        session, "source_invocation_get", invocation_id=nobody
                    ),
                    "no_call": await error(session, "llm_call_get", call_id=nobody),
                    "slash_in_slug": await error(session, "world_get", slug="a/b"),
                },
            }

    result = anyio.run(run)
    assert result["named"]["hash"] is not None
    assert result["conflict"]["error"]["code"] == "cas_failed"
    assert result["by_name"]["names"] == ["ant"]
    assert result["by_name"]["hash"] == result["fork"]
    assert result["unset"]["hash"] is None
    assert [w["slug"] for w in result["listed"]["results"]] == ["doomed"]
    assert result["deleted"]["deleted"] == "doomed"

    errors = result["errors"]
    rest = {
        "missing_schema": operator_client.get(f"/api/json-schemas/{missing}/"),
        "bad_hash": operator_client.get("/api/entities/nope/"),
        "bad_assembly": operator_client.post(
            "/api/scenarios/assemble/", bad_assembly, format="json"
        ),
        "unknown_field": operator_client.post("/api/worlds/x/turns/", {"counts": 2}, format="json"),
        "no_world": operator_client.get("/api/worlds/no-such-world/"),
        "no_attempt": operator_client.get(f"/api/attempts/{nobody}/"),
        "no_invocation": operator_client.get(f"/api/source-invocations/{nobody}/"),
        "no_call": operator_client.get(f"/api/llm-calls/{nobody}/"),
        "slash_in_slug": operator_client.get("/api/worlds/a/b/"),
    }
    for key, response in rest.items():
        assert response.status_code >= 400
        assert errors[key] == response.json(), key
    assert errors["missing_schema"]["error"]["code"] == "component_not_found"
    assert errors["bad_assembly"]["error"]["code"] == "invalid_chronon"
    assert errors["unknown_field"]["error"]["details"]["field"] == "counts"
    for key in ("no_attempt", "no_invocation", "no_call"):
        assert errors[key]["error"]["code"].endswith("not_found"), errors[key]


def test_a_reader_sees_and_may_call_only_read_tools(
    live_server: Any, reader_user: User, reader_client: APIClient
) -> None:
    url = f"{live_server.url}/mcp/"
    authorization = f"Bearer {_token(reader_user)}"

    async def run() -> tuple[set[str], dict[str, Any], dict[str, Any]]:
        async with mcp_session(url, authorization) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            refused = await error(session, "environments_put", content="A quiet field.")
            listed = await ok(session, "scenario_list")
            return names, refused, listed

    names, refused, listed = anyio.run(run)
    assert not names & OPERATOR_ONLY_TOOLS
    assert SPEC_TOOLS - OPERATOR_ONLY_TOOLS <= names
    assert listed["count"] == 0
    rest = reader_client.post("/api/environments/", {"content": "A quiet field."}, format="json")
    assert rest.status_code == 403
    assert refused == rest.json()
    assert refused["error"]["code"] == "permission_denied"


def test_without_a_valid_token_the_endpoint_answers_401(
    live_server: Any, reader_user: User
) -> None:
    url = f"{live_server.url}/mcp/"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=30) as client:
        anonymous = client.post(url, json=initialize, headers=headers)
        wrong = client.post(
            url, json=initialize, headers={**headers, "Authorization": "Bearer " + "f" * 40}
        )
        token = _token(reader_user)
        good = client.post(
            url, json=initialize, headers={**headers, "Authorization": f"Token {token}"}
        )
        stream = client.get(
            url, headers={"Accept": "text/event-stream", "Authorization": f"Token {token}"}
        )
        end = client.delete(url, headers={**headers, "Authorization": f"Token {token}"})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "not_authenticated"
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "not_authenticated"
    # A Bearer challenge that names the error and says how to send the token, so that an MCP
    # client does not take the 401 for "go and find an OAuth server".
    for refused in (anonymous, wrong):
        challenge = refused.headers["WWW-Authenticate"]
        assert challenge.startswith("Bearer ")
        assert 'realm="chukwa"' in challenge
        assert 'error="invalid_token"' in challenge
        assert "Authorization: Bearer <API token>" in challenge
        assert refused.headers["Content-Type"].startswith("application/json")
    assert good.status_code == 200
    assert good.json()["result"]["serverInfo"]["name"] == "chukwa"
    # Stateless: no SSE stream to open and no session to end.
    assert stream.status_code == 405
    assert end.status_code == 405


def test_tool_results_carry_the_body_as_text_and_structure(
    live_server: Any, operator_user: User
) -> None:
    authorization = f"Bearer {_token(operator_user)}"

    async def run() -> Any:
        async with mcp_session(f"{live_server.url}/mcp/", authorization) as s:
            return await s.call_tool("world_patch_schema_get", {})

    result = anyio.run(run)
    assert result.is_error is False
    assert body_of(result)["schema"]["type"] == "object"


def test_the_sdk_high_level_client_connects_and_calls(
    live_server: Any, operator_user: User
) -> None:
    """``mcp.Client`` (which probes the newer protocol first) lists and calls tools too."""
    authorization = f"Bearer {_token(operator_user)}"

    async def run() -> tuple[set[str], dict[str, Any]]:
        http = httpx2.AsyncClient(headers={"Authorization": authorization}, timeout=60.0)
        async with (
            http,
            Client(streamable_http_client(f"{live_server.url}/mcp/", http_client=http)) as client,
        ):
            names = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("json_schemas_get", {"hash": "0" * 64})
            assert result.is_error
            # A name that is no tool at all is a protocol error, not a tool result.
            with pytest.raises(MCPError, match="Unknown tool: no_such_tool"):
                await client.call_tool("no_such_tool", {})
            # The per-request protocol era, where ClientSession.initialize() takes the handshake.
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
            return names, body_of(result)

    names, missing = anyio.run(run)
    assert SPEC_TOOLS <= names
    assert missing["error"]["code"] == "component_not_found"


OAUTH_PATHS = (
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/mcp",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp/",
    "/.well-known/openid-configuration",
    "/.well-known/openid-configuration/mcp",
    "/mcp/.well-known/openid-configuration",
    "/register",
)


def test_oauth_discovery_paths_answer_the_api_json_404(live_server: Any) -> None:
    """What MCP clients probe before (or after a 401) to find an OAuth server: Chukwa has
    none, and each answer says so in the API's error shape, never with the HTML 404 page."""
    with httpx.Client(timeout=30) as client:
        answers = {path: client.get(live_server.url + path) for path in OAUTH_PATHS}
        registered = client.post(
            live_server.url + "/register", json={"redirect_uris": ["http://localhost:1/cb"]}
        )
    for path, response in [*answers.items(), ("POST /register", registered)]:
        assert response.status_code == 404, path
        assert response.headers["Content-Type"] == "application/json", path
        body = response.json()
        assert set(body) == {"error"}, path
        assert set(body["error"]) == {"code", "message", "details"}, path
        assert body["error"]["code"] == "oauth_not_supported", path
        assert "Authorization: Bearer <API token>" in body["error"]["message"], path
        assert body["error"]["details"]["field"] == "path", path
    # Other well-known paths are not claimed by this rule.
    with httpx.Client(timeout=30) as client:
        other = client.get(live_server.url + "/.well-known/security.txt")
    assert other.status_code == 404
    assert not other.headers["Content-Type"].startswith("application/json")
