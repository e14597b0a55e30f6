"""The small worlds the tests share: fixture scenarios as assembly inputs, a world made from one,
and one turn run in this process (no Celery worker)."""

from __future__ import annotations

import copy
from typing import Any

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.models import TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

TOY_MCP_KEY = "toy-mcp-lamp-key-for-tests"


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


def backend_checked(base_url: str, model: str) -> None:
    """The backend's conformance check already passed (a fresh verdict stored), so a test about
    one generation's own figures runs that generation alone; what the check itself spends is
    tested in tests/worlds_app/test_probe_totals.py."""
    from cognition_app.models import SourceProbe

    SourceProbe.objects.update_or_create(
        base_url=base_url, model=model, defaults={"enforces_schema": True, "detail": "test"}
    )
