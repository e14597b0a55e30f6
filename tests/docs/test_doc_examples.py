"""The examples in docs/ are executed, in order, so they never rot.

A fenced ``http`` block is one API call: its first line is ``METHOD PATH`` optionally followed by
``-> $NAME`` (keep the hash the call returns) or ``-> !STATUS code`` (the call must fail so); the
rest is the JSON body, in which ``$NAME`` stands for a hash kept earlier."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

DOCS = Path(__file__).resolve().parents[2] / "docs"
_BLOCK = re.compile(r"```http\n(.*?)```", re.S)
_HEAD = re.compile(r"^(GET|POST|PUT|DELETE) (\S+)(?: -> (?:\$([A-Z_]+)|!(\d{3}) ([a-z_]+)))?$")


def _blocks(name: str) -> list[str]:
    return _BLOCK.findall((DOCS / name).read_text())


def _substitute(text: str, kept: dict[str, str]) -> str:
    return re.sub(r"\$([A-Z_]+)", lambda m: kept[m.group(1)], text)


def _run(client: APIClient, name: str) -> int:
    kept: dict[str, str] = {}
    blocks = _blocks(name)
    for block in blocks:
        head, _, body = block.partition("\n")
        match = _HEAD.match(head.strip())
        assert match, f"{name}: cannot read the example head {head!r}"
        method, path, keep, status, code = match.groups()
        path = _substitute(path, kept)
        payload: Any = json.loads(_substitute(body, kept)) if body.strip() else None
        response = getattr(client, method.lower())(path, payload, format="json")
        answer = response.json() if response.content else {}
        if status:
            assert response.status_code == int(status), (head, answer)
            assert answer["error"]["code"] == code, (head, answer)
            continue
        assert 200 <= response.status_code < 300, (head, response.status_code, answer)
        if keep:
            kept[keep] = answer.get("hash") or answer.get("scenario_hash") or str(answer["id"])
    return len(blocks)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["scenarios.md", "workflows.md", "measurement.md"])
def test_every_example_runs(name: str, operator_client: APIClient) -> None:
    assert _run(operator_client, name) >= 5


@pytest.mark.django_db
def test_every_world_example_runs_on_the_demo_fixtures(operator_client: APIClient) -> None:
    """docs/worlds.md runs against the scenarios ``./bin/demo`` stores."""
    call_command("load_demo_scenarios", "ant_on_plate_rules", "picnic_rules", stdout=StringIO())
    assert _run(operator_client, "worlds.md") >= 10


@pytest.mark.django_db
def test_every_experiment_example_runs_on_the_demo_fixtures(operator_client: APIClient) -> None:
    """docs/experiments.md runs against the scenarios ``./bin/demo`` stores."""
    call_command("load_demo_scenarios", "ant_on_plate_rules", stdout=StringIO())
    assert _run(operator_client, "experiments.md") >= 5


def test_the_example_reader_refuses_what_it_cannot_read() -> None:
    assert _HEAD.match("POST /api/environments/ -> $PLATE")
    assert _HEAD.match("PUT /api/x/ -> !409 cas_failed")
    assert not _HEAD.match("POST /api/environments/ -> PLATE")
