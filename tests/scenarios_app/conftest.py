"""Fixtures of the scenario store's service and selector tests."""

from __future__ import annotations

import pytest

from scenarios_app import services
from tests.scenarios_app.store_helpers import WorkflowFactory, inline_body


@pytest.fixture
def base(make_workflow: WorkflowFactory) -> services.AssembleResult:
    """Profile p; environments room (inhabited) and hall (staged); agent ant and prop crumb."""
    return services.scenario_assemble(
        data=inline_body(
            make_workflow,
            environments={
                "room": {"inline": "A small white plate under a lamp."},
                "hall": {"inline": "An empty hallway."},
            },
            name="base",
        )
    )
