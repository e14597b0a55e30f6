"""Simulation time stays inside the calendar: a start time must leave room for one
turn, and a turn that would pass 9999-12-31 fails its attempt cleanly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from chukwa_core import clock
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.models import AttemptEvent, AttemptStatus, Turn, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

pytestmark = pytest.mark.django_db

SCENARIO = "ant_on_plate_rules"  # rule-policy agents, chronon 60 s: no LLM needed


@pytest.fixture
def scenario(db: Any) -> str:
    return scenario_assemble(data=load_fixture(SCENARIO))["scenario_hash"]


def create(client: APIClient, start_time: Any) -> Any:
    return client.post(
        "/api/worlds/",
        {"slug": "w1", "scenario_ref": {"name": SCENARIO}, "start_time": start_time},
        format="json",
    )


@pytest.mark.parametrize(
    "start_time",
    [
        "9999-12-31T23:59:59+00:00",  # no room for one 60 s turn
        "9999-12-31T23:59:00.000001Z",
        "9999-12-31T20:00:00-05:00",  # year 10000 in UTC
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
        "2030-01-01T00:00:00+24:00",  # offsets are under 24 h
        "2016-12-31T23:59:60Z",  # leap seconds are not representable
        "2030-02-30T00:00:00Z",
        "2030-01-01T00:00:00\u0000Z",
        "2" * 10_000,
    ],
)
def test_start_time_outside_the_calendar_is_a_400(
    operator_client: APIClient, scenario: str, start_time: str
) -> None:
    response = create(operator_client, start_time)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("invalid_start_time", "start_time")
    assert error["message"].startswith("start_time:")
    assert len(error["message"]) < 400  # a huge input is not echoed back whole
    assert not World.objects.exists()


@pytest.mark.parametrize(
    ("start_time", "stored"),
    [
        ("0001-01-01T00:00:00-05:00", datetime(1, 1, 1, 5, tzinfo=UTC)),
        ("2030-01-01T05:30:00+05:30", datetime(2030, 1, 1, tzinfo=UTC)),
        ("9999-12-31T23:58:59Z", datetime(9999, 12, 31, 23, 58, 59, tzinfo=UTC)),
    ],
)
def test_start_time_at_the_calendar_edges_is_stored_in_utc(
    operator_client: APIClient, scenario: str, start_time: str, stored: datetime
) -> None:
    response = create(operator_client, start_time)
    assert response.status_code == 201, response.content
    assert Turn.objects.get(world__slug="w1", number=0).simulation_time == stored


def test_a_turn_past_the_end_of_the_calendar_fails_its_attempt_cleanly(scenario: str) -> None:
    last_start = datetime.max.replace(tzinfo=UTC) - timedelta(seconds=60)
    world_create(
        data={
            "slug": "edge",
            "scenario_ref": {"name": SCENARIO},
            "start_time": last_start.isoformat(),
        }
    )
    first, second = turn_attempt_enqueue(slug="edge", count=2)["attempt_ids"]
    assert turn_attempt_run(attempt_id=first, owner="test") == AttemptStatus.COMMITTED
    assert turn_attempt_run(attempt_id=second, owner="test") == AttemptStatus.FAILED
    attempt = TurnAttempt.objects.get(pk=second)
    assert attempt.failure_step == "calendar"
    assert "past the end of the calendar" in attempt.failure_reason
    assert "OverflowError" not in attempt.failure_reason
    assert World.objects.get(slug="edge").current_turn == 1
    assert AttemptEvent.objects.filter(attempt=attempt, kind="attempt_failed").exists()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("2030-01-01T00:00:00", clock.NotAnInstant),  # no offset
        ("20300101T000000Z", clock.NotAnInstant),  # basic format
        ("2030-W01-1T00:00Z", clock.NotAnInstant),  # week date
        ("2030-01-01T00:00:00\u0000Z", clock.NotAnInstant),
        ("2016-12-31T23:59:60Z", clock.NotAnInstant),
        ("2030-01-01T00:00:00+24:00", clock.NotAnInstant),
        ("0001-01-01T00:00:00+00:01", clock.CalendarOverflow),
    ],
)
def test_parse_instant_refuses(raw: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        clock.parse_instant(raw)


def test_parse_instant_converts_to_utc() -> None:
    assert clock.parse_instant("2030-06-01t12:00z") == datetime(2030, 6, 1, 12, tzinfo=UTC)
    assert clock.parse_instant("2030-06-01 12:00:00.5-0230") == datetime(
        2030, 6, 1, 14, 30, 0, 500000, tzinfo=UTC
    )
