"""Batches that recover: over real HTTP, with turns run by a real worker, a batch that failed at
its second turn is retried from that attempt (its turn and the turn the batch had left); the
world's last outcome reads as the failure, not the cancellations after it (which name the
failed attempt by its number); every other retry is a 409 that says why; a retry while the
failure's cause is still there (its intervention pending, its experiment's budget exhausted)
warns first (the API's 409, the page's confirmation) unless forced; readers cannot retry."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from tests.surfaces.api.test_counterfactuals_http import _client, _wait
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO
from worlds_app.models import Experiment, TurnAttempt, World

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

        # The cancelled turn names the failed attempt by its number in the world.
        failed_seq = ops.get(f"/api/attempts/{batch[1]}/").json()["seq"]
        cancelled_row = TurnAttempt.objects.get(pk=batch[2])
        assert f"attempt {failed_seq} of this batch failed" in cancelled_row.failure_reason
        assert batch[1] not in cancelled_row.failure_reason

        # While the intervention that failed it is still pending, a retry warns first.
        warned = ops.post(f"/api/attempts/{batch[1]}/retry/")
        assert warned.status_code == 409
        error = warned.json()["error"]
        assert error["code"] == "intervention_still_pending"
        assert error["details"]["intervention"] == bad.json()["id"]
        assert TurnAttempt.objects.filter(world__slug="coin").count() == 3  # nothing queued
        page = Client()
        page.force_login(operator_user)
        confirm = page.post(f"/attempts/{batch[1]}/retry/")
        assert confirm.status_code == 409
        text = confirm.content.decode()
        assert "still pending" in text and 'name="force" value="1"' in text
        assert TurnAttempt.objects.filter(world__slug="coin").count() == 3
        # Retried anyway (the page's "Retry anyway"): it fails the same way again.
        forced = page.post(f"/attempts/{batch[1]}/retry/", {"force": "1"})
        assert forced.status_code == 302
        again = list(
            TurnAttempt.objects.filter(world__slug="coin", seq__gt=3)
            .order_by("seq")
            .values_list("pk", flat=True)
        )
        assert len(again) == 2
        assert _wait(ops, [str(i) for i in again]) == ["failed", "cancelled"]
        batch = [batch[0], str(again[0]), str(again[1])]

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


def test_a_retry_warns_while_the_experiments_budget_is_exhausted(
    live_server: Any, operator_user: User
) -> None:
    """No worker here: what is queued stays queued."""
    with _client(live_server, operator_user) as ops:
        ops.post("/api/worlds/", json={"slug": "spent", "scenario_ref": {"data": RULE_SCENARIO}})
        (first,) = ops.post("/api/worlds/spent/turns/", json={"count": 1}).json()["attempt_ids"]
        TurnAttempt.objects.filter(pk=first).update(
            status="failed", failure_step="budget_exhausted"
        )
        experiment = Experiment.objects.create(
            slug="thrift", name="thrift", design={}, seed=1, max_tokens_total=10
        )
        World.objects.filter(slug="spent").update(experiment=experiment)
        experiment.budget_exhausted_at = timezone.now()
        experiment.save(update_fields=["budget_exhausted_at"])
        warned = ops.post(f"/api/attempts/{first}/retry/")
        assert warned.status_code == 409
        assert warned.json()["error"]["code"] == "experiment_budget_exhausted"
        assert "'thrift'" in warned.json()["error"]["message"]
        assert ops.post(f"/api/attempts/{first}/retry/", json={"force": "maybe"}).status_code == 400
        assert TurnAttempt.objects.filter(world__slug="spent").count() == 1
        forced = ops.post(f"/api/attempts/{first}/retry/", json={"force": True})
        assert forced.status_code == 202, forced.text
        assert len(forced.json()["attempt_ids"]) == 1
        assert TurnAttempt.objects.filter(world__slug="spent", status="queued").count() == 1
