"""Fixtures for the source-layer tests: the toy HTTP sources, the toy MCP server, worlds built from
fixture scenarios, and one turn run in-process (no Celery worker)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cognition_app.sources import conformance
from devservices import toy_mcp
from devservices.toys import serve, toy_env
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.models import TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create


@pytest.fixture
def toy_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The toy service on a free port with a private state dir; the six CHUKWA_TOY_*_URL
    variables point at it. Yields its base URL."""
    server = serve("127.0.0.1", 0, tmp_path / "toys")
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    for name, value in toy_env(base_url).items():
        monkeypatch.setenv(name, value)
    try:
        yield base_url
    finally:
        server.shutdown()
        server.server_close()


TOY_MCP_KEY = "toy-mcp-lamp-key-for-tests"


@pytest.fixture
def toy_mcp_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[toy_mcp.RunningMcp]:
    """The toy MCP server (the lamp) on a free port, requiring :data:`TOY_MCP_KEY`;
    CHUKWA_MCP_LAMP_URL and CHUKWA_MCP_LAMP_API_KEY point at it."""
    server = toy_mcp.serve(api_key=TOY_MCP_KEY)
    monkeypatch.setenv(toy_mcp.LAMP_URL_ENV, server.url)
    monkeypatch.setenv(toy_mcp.LAMP_KEY_ENV, TOY_MCP_KEY)
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture(autouse=True)
def _fresh_probe_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The conformance-probe cache is process-wide and keyed by base URL; a later test's scripted
    server may get a port an earlier one had, so every test starts with an empty cache."""
    monkeypatch.setattr(conformance, "_probe_cache", {})


def fixture_body(name: str) -> dict[str, Any]:
    """A fixture scenario's assembly input without its name/note metadata (a fresh copy)."""
    return {k: v for k, v in copy.deepcopy(load_fixture(name)).items() if k not in ("name", "note")}


def entity_of(body: dict[str, Any], entity_id: str) -> dict[str, Any]:
    return next(e["inline"] for e in body["entities"] if e["inline"]["id"] == entity_id)


def workflow_of(body: dict[str, Any], profile: str) -> dict[str, Any]:
    return body["cognition_profiles"][profile]["inline"]["workflow"]["inline"]


def create_world(scenario: str | dict[str, Any], slug: str) -> World:
    """A world from a fixture name or an assembly input."""
    body = fixture_body(scenario) if isinstance(scenario, str) else scenario
    scenario_hash = scenario_assemble(data=body)["scenario_hash"]
    return world_create(data={"slug": slug, "scenario_ref": {"hash": scenario_hash}})


def run_turn(slug: str) -> TurnAttempt:
    """Enqueue one attempt and run it in this process; returns the finished attempt."""
    (attempt_id,) = turn_attempt_enqueue(slug=slug)["attempt_ids"]
    status = turn_attempt_run(attempt_id=attempt_id, owner="test")
    attempt = TurnAttempt.objects.get(pk=attempt_id)
    assert attempt.status == status
    return attempt
