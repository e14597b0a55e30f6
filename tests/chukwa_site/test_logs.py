"""Structured logs: one JSON object per line, a turn's lines carry its ids, no secret leaks."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from chukwa_core.log_context import LogContextFilter
from chukwa_site.logs import JsonFormatter
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, run_turn
from worlds_app.models import AttemptStatus

CANARY = "sk-canary-logs-5e1d0b7a94c2"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The root logger at INFO writing through the production filter and formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(LogContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _parse(stream: io.StringIO) -> list[dict[str, Any]]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _turn_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines from the attempt's claim to its end."""
    messages = [line["message"] for line in lines]
    start = messages.index("attempt claimed")
    end = next(i for i, m in enumerate(messages) if m in ("attempt committed", "attempt failed"))
    return lines[start : end + 1]


@pytest.mark.django_db
def test_a_rules_turn_logs_json_lines_carrying_world_and_attempt(
    json_lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", CANARY)
    create_world("ant_on_plate_rules", "logged")
    attempt = run_turn("logged")
    assert attempt.status == AttemptStatus.COMMITTED

    lines = _parse(json_lines)
    turn = _turn_lines(lines)
    assert [line["message"] for line in turn][-1] == "attempt committed"
    for line in turn:
        assert {"timestamp", "level", "logger", "message"} <= line.keys()
        assert (line["world"], line["attempt"]) == ("logged", str(attempt.pk))
    assert turn[-1]["turn"] == 1
    assert isinstance(turn[-1]["duration_ms"], int)
    assert CANARY not in json_lines.getvalue()


@pytest.mark.django_db
def test_an_llm_turn_logs_its_source_calls_with_the_subject_and_never_the_key(
    json_lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedLLM() as llm:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("CHUKWA_LLM_API_KEY", CANARY)
        create_world("ant_on_plate", "logged-llm")
        llm.script(ANT_OK)
        attempt = run_turn("logged-llm")
    assert attempt.status == AttemptStatus.COMMITTED

    turn = _turn_lines(_parse(json_lines))
    calls = [line for line in turn if line["message"] == "source call finished"]
    assert calls, "the LLM call is logged"
    for line in turn:
        assert (line["world"], line["attempt"]) == ("logged-llm", str(attempt.pk))
    for call in calls:
        assert call["subject"] == "ant"
        assert call["status"] == "succeeded"
        assert isinstance(call["duration_ms"], int)
    # the attempt's own lines are outside any subject's run
    assert "subject" not in turn[0] and "subject" not in turn[-1]
    assert CANARY not in json_lines.getvalue()


def test_a_line_keeps_its_traceback_and_drops_non_scalar_extras() -> None:
    """Django's request logger passes the request object as an extra: it must not be dumped."""
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.makeLogRecord(
        {
            "name": "django.request",
            "levelno": logging.ERROR,
            "levelname": "ERROR",
            "msg": "failed %s",
            "args": ("here",),
            "exc_info": exc_info,
            "request": object(),
            "status_code": 500,
        }
    )
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["logger"], line["message"]) == (
        "ERROR",
        "django.request",
        "failed here",
    )
    assert line["status_code"] == 500
    assert "request" not in line
    assert "ValueError: boom" in line["exception"]
