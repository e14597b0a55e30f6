"""A batch-mode experiment on real workers (docs/costs.md, "Batch mode"): the worker that ran
its attempts up to their park is killed (SIGKILL) while they wait in a provider batch; nothing
is lost — the parked state is in the database only — so when the batch ends another worker
resumes the same attempts, and the experiment completes with the online run's results."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from cognition_app.models import BatchRequest, ProviderBatch
from cognition_app.tasks import batch_tick
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.worlds_app.test_batch_mode import (
    _all_parked_or_done,
    _attempts,
    _design,
    _finished,
    _measured,
    _states,
    _until,
    by_request,
    llm,  # noqa: F401  (fixture import)
    worker_env,
)
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import ACTIVE_STATUSES, AttemptStatus, Experiment, TurnAttempt
from worlds_app.services.batch_mode import batch_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _parked(slug: str) -> dict[Any, tuple[int, int | None]]:
    """Each parked attempt's id: (its world, the turn it tries to produce)."""
    return {
        pk: (world, turn)
        for pk, world, turn in TurnAttempt.objects.filter(
            world__experiment__slug=slug, status=AttemptStatus.WAITING
        ).values_list("pk", "world_id", "attempted_turn")
    }


def test_a_worker_killed_while_an_attempt_is_parked_loses_nothing(
    llm: ScriptedLLM,  # noqa: F811
    operator_client: Any,
) -> None:
    llm.reset()
    llm.route(by_request)
    queue = f"batch-kill-{os.getpid()}"
    env = worker_env(llm)
    online = _design("online-k") | {"turns": 2}
    batched = copy.deepcopy(online) | {"slug": "batched-k", "mode": "batch"}
    with routed_to(queue):
        with worker_process(f"{queue}-a", env=env, queue=queue) as first:
            answer = operator_client.post("/api/experiments/", online, format="json")
            assert answer.status_code == 201, answer.json()
            _until(lambda: _finished("online-k"), "the online experiment did not finish")
            assert experiment_get(slug="online-k")["status"] == "completed"
            sent_online = len(llm.requests)
            assert sent_online > 0

            answer = operator_client.post("/api/experiments/", batched, format="json")
            assert answer.status_code == 201, answer.json()
            _until(lambda: _all_parked_or_done("batched-k"), "the worlds did not all park")
            llm.script_batches("in_progress")
            batch_tick()  # sent; held in progress by the model
            assert ProviderBatch.objects.get(status="in_progress")
            parked = _parked("batched-k")
            assert len(parked) == 2 * batched["replicates"]
            first.kill()  # SIGKILL: nothing of the worker's memory survives
            first.wait(timeout=30)
        # the worker that ran them is gone: the database still holds every parked attempt,
        # with no lease, and the requests they wait for still pending at the provider
        assert _parked("batched-k") == parked
        assert not TurnAttempt.objects.filter(pk__in=parked).exclude(lease_owner="").exists()
        owner = batch_owner(Experiment.objects.get(slug="batched-k").pk)
        pending = BatchRequest.objects.filter(owner=owner)
        assert pending.exists()
        assert set(pending.values_list("status", flat=True)) == {"submitted"}
        assert experiment_get(slug="batched-k")["batch"]["attempts_waiting"] == len(parked)

        llm.settle_batches()
        with worker_process(f"{queue}-b", env=env, queue=queue):
            ticks = 0
            while _attempts("batched-k", *ACTIVE_STATUSES):
                _until(lambda: _all_parked_or_done("batched-k"), "the worlds did not all park")
                if not _attempts("batched-k", AttemptStatus.WAITING):
                    break
                batch_tick()
                ticks += 1
                assert ticks <= 20, "too many ticks"
            _until(lambda: _finished("batched-k"), "the batch-mode experiment was not measured")
    state = experiment_get(slug="batched-k")
    assert state["status"] == "completed", state
    # the attempts parked when the worker died were resumed — the same rows — and committed
    resumed = TurnAttempt.objects.filter(pk__in=parked)
    assert {(a.world_id, a.attempted_turn) for a in resumed} == set(parked.values())
    assert set(resumed.values_list("status", flat=True)) == {AttemptStatus.COMMITTED}
    assert all(parks >= 1 for parks in resumed.values_list("parks", flat=True))
    # nothing of the batch-mode run was sent live, nothing was lost or asked twice
    assert len(llm.requests) == sent_online
    # one provider batch per tick (two ants one after the other: two ticks a turn), the one
    # pending at the kill polled again by the next worker, never sent twice
    assert ticks == state["batch"]["ticks"] == len(llm.batches) == 2 * batched["turns"]
    assert set(pending.values_list("status", flat=True)) == {"completed"}
    assert _states("batched-k") == _states("online-k")
    assert _measured("batched-k") == _measured("online-k")
