"""A secret canary (SPEC §5: secrets never appear in traces, pages, errors or logs).

The LLM key is set to a recognisable value; turns run against ordinary and hostile sources — a
model that echoes the key into its reply (whole and split across stream chunks), into an error
body and into a broken stream, and variables misconfigured to hold the key where a URL belongs.
Then the key must appear in no API response, no page, no database row and no log record.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from cognition_app.models import LlmCall, SourceInvocation
from tests.cognition_app.conftest import create_world, run_turn
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.support.scripted_llm import Reply, ScriptedLLM
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
    import json

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

    assert _database_rows_with(CANARY) == []
    assert _database_rows_with(CANARY[:12] + CANARY[12:]) == []

    pages = Client()
    pages.force_login(operator_user)
    urls = ["/api/worlds/canary/", "/api/worlds/canary/diff/?from=0&to=4", "/worlds/canary/"]
    for number in range(5):
        urls += [f"/api/worlds/canary/turns/{number}/", f"/worlds/canary/turns/{number}/"]
    for attempt in attempts:
        urls += [f"/api/attempts/{attempt.pk}/", f"/attempts/{attempt.pk}/"]
    for inv in SourceInvocation.objects.all():
        urls += [f"/api/source-invocations/{inv.pk}/", f"/invocations/{inv.pk}/"]
    for call in LlmCall.objects.all():
        urls += [f"/api/llm-calls/{call.pk}/", f"/llm-calls/{call.pk}/"]
    for url in urls:
        client = operator_client if url.startswith("/api/") else pages
        response = client.get(url)
        assert response.status_code in (200, 400), (url, response.status_code)
        assert CANARY not in response.content.decode(), url

    logged = "\n".join(
        record.getMessage() + (str(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    assert CANARY not in logged
    # and the redaction is visible where the echo was: the reader sees that a key was there
    assert SourceInvocation.objects.filter(response_text__contains="[redacted]").exists()
