"""Batches that recover: over real HTTP, with turns run by a real worker, a batch that failed at
its second turn is retried from that attempt (its turn and the turn the batch had left); the
world's last outcome reads as the failure, not the cancellations after it; every other retry is
a 409 that says why; readers cannot retry."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.surfaces.api.test_counterfactuals_http import _client, _wait
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO
from worlds_app.models import TurnAttempt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_a_failed_batch_is_retried_from_the_attempt_that_ended_it(
    live_server: Any, operator_user: User, reader_user: User, celery_worker: str
) -> None:
    with _client(live_server, operator_user) as ops, _client(live_server, reader_user) as reader:
        made = ops.post(
            "/api/worlds/", json={"slug": "coin", "scenario_ref": {"data": RULE_SCENARIO}}
        )
        assert made.status_code == 201
        # Turn 2 will fail: its intervention names an entity the world does not have.
        bad = ops.post(
            "/api/worlds/coin/interventions/",
            json={
                "patch": {
                    "narration": "The umbrella opens.",
                    "effects": [
                        {"op": "set_entity_state", "entity_id": "umbrella", "state": "open"}
                    ],
                },
                "turn": 2,
            },
        )
        assert bad.status_code == 201
        batch = ops.post("/api/worlds/coin/turns/", json={"count": 3}).json()["attempt_ids"]
        assert _wait(ops, batch) == ["committed", "failed", "cancelled"]
        # The world's last outcome is the failure that ended the batch, not its cancellation.
        listed = {w["slug"]: w for w in ops.get("/api/worlds/").json()["results"]}
        assert listed["coin"]["last_attempt"]["id"] == batch[1]
        assert listed["coin"]["last_attempt"]["status"] == "failed"

        # What cannot be retried says why.
        committed = ops.post(f"/api/attempts/{batch[0]}/retry/")
        assert committed.status_code == 409
        assert committed.json()["error"]["code"] == "not_retryable"
        cancelled = ops.post(f"/api/attempts/{batch[2]}/retry/")
        assert cancelled.status_code == 409
        assert reader.post(f"/api/attempts/{batch[1]}/retry/").status_code == 403
        assert ops.post("/api/attempts/not-a-uuid/retry/").status_code == 400
        missing = ops.post("/api/attempts/00000000-0000-4000-8000-000000000000/retry/")
        assert missing.status_code == 404

        # Fixed, then retried from the failed attempt: turn 2 and the turn the batch had left.
        assert ops.delete(f"/api/worlds/coin/interventions/{bad.json()['id']}/").status_code == 204
        retried = ops.post(f"/api/attempts/{batch[1]}/retry/")
        assert retried.status_code == 202, retried.text
        new = retried.json()["attempt_ids"]
        assert len(new) == 2
        assert _wait(ops, new) == ["committed", "committed"]
        assert [ops.get(f"/api/attempts/{i}/").json()["produced_turn"] for i in new] == [2, 3]
        assert ops.get("/api/worlds/coin/").json()["current_turn"] == 3
        # The failure no longer ended the world's last batch.
        again = ops.post(f"/api/attempts/{batch[1]}/retry/")
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "not_last_batch"


def test_a_retry_while_the_world_has_queued_attempts_is_409(
    live_server: Any, operator_user: User
) -> None:
    """No worker here: what is queued stays queued."""
    with _client(live_server, operator_user) as ops:
        ops.post("/api/worlds/", json={"slug": "idle", "scenario_ref": {"data": RULE_SCENARIO}})
        (first,) = ops.post("/api/worlds/idle/turns/", json={"count": 1}).json()["attempt_ids"]
        TurnAttempt.objects.filter(pk=first).update(status="failed", failure_step="test")
        ops.post("/api/worlds/idle/turns/", json={"count": 1})
        busy = ops.post(f"/api/attempts/{first}/retry/")
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "world_busy"
        assert TurnAttempt.objects.filter(world__slug="idle").count() == 2
