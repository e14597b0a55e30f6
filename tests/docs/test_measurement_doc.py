"""docs/measurement.md shows a real turn view: the view of turn 1 of a world of two rule-policy
buyers and the toy vending machine, made here by the code and compared with the guide's block
character for character, so the example never drifts from what a metric reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scenarios_app.services import scenario_assemble
from tests.cognition_app.test_rule_tools import _scenario as rule_tool_scenario
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create
from worlds_app.turn_view import turn_view

pytestmark = pytest.mark.django_db

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "measurement.md"
_BLOCK = re.compile(r"<!-- turn-view: park-1, turn 1 -->\n```json\n(.*?)```", re.S)


def test_the_guides_turn_view_is_the_one_the_code_makes(toy_sources: str) -> None:
    scenario = scenario_assemble(data=rule_tool_scenario({"item": "candy_bar"}))["scenario_hash"]
    world_create(
        data={
            "slug": "park-1",
            "scenario_ref": {"hash": scenario},
            "start_time": "2026-05-01T08:00:00+00:00",
        }
    )
    (attempt_id,) = turn_attempt_enqueue(slug="park-1")["attempt_ids"]
    assert turn_attempt_run(attempt_id=attempt_id, owner="test") == "committed"
    made = json.dumps(turn_view(slug="park-1", number=1), indent=2, ensure_ascii=False) + "\n"
    (shown,) = _BLOCK.findall(GUIDE.read_text())
    assert shown == made, f"docs/measurement.md's turn view is out of date; the code makes:\n{made}"
