"""A worker killed with an experiment's budget reserved (worlds_app/services/experiment_budget.py,
"settle_leaked"): a real Celery worker streams a slow reply of an experiment's world and is
killed mid-call, its reservation row still held; the reaper interrupts the attempt and settles
the reservation from the call's own row, so the ledger comes back to what the calls spent and
nothing stays reserved. A reservation whose worker died outside an attempt (older than any task
may run) is settled too, from its call's row."""

from __future__ import annotations

import os
import signal
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from cognition_app.models import LlmCall, LlmChunk
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.worlds_app.test_experiment_budget import API_KEY, _design, _final, _scenario
from worlds_app.models import AttemptStatus, BudgetReservation, ExperimentLedger, TurnAttempt
from worlds_app.services import turn_attempt_reap
from worlds_app.services.experiment_budget import experiment_budget
from worlds_app.services.experiments import experiment_cancel, experiment_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _streaming(experiment_id: int, found: list[BudgetReservation]) -> bool:
    """Is a call of the experiment well into the slow reply (more chunks than the first reply
    has), its reservation held? (it goes to ``found``)"""
    for held in BudgetReservation.objects.filter(experiment_id=experiment_id):
        call = LlmCall.objects.filter(pk=held.pk, status="running").first()
        if call is not None and LlmChunk.objects.filter(call=call).count() >= 40:
            found.append(held)
            return True
    return False


def _calls_spent(slug: str) -> int:
    calls = LlmCall.objects.filter(invocation__world__experiment__slug=slug)
    return sum((c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in calls)


def test_the_reaper_settles_the_reservation_of_a_killed_worker() -> None:
    llm = ScriptedLLM()
    llm.start()
    usage = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
    # the first call finishes (its spend settled by the worker); the second streams slowly and
    # is still in flight when the worker is killed
    llm.script(Reply(text=_final("The ant waits."), usage=usage))
    llm.script(
        Reply(text=_final("The ant walks. " * 200), usage=usage, chunk_size=6, chunk_delay_s=0.05)
    )
    queue = f"reap-budget-{os.getpid()}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }
    try:
        with worker_process(queue, env=env, queue=queue) as worker, routed_to(queue):
            experiment = experiment_create(
                data=_design("reaped", _scenario(), budget={"max_tokens_total": 100_000})
            )
            found: list[BudgetReservation] = []
            _wait_for(lambda: _streaming(experiment.pk, found), 90, "a call in flight, reserved")
            held = found[0]
            in_flight = LlmCall.objects.get(pk=held.pk)  # the reservation names its call
            assert in_flight.status == "running" and held.attempt_id is not None
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
        experiment_cancel(slug="reaped")  # nothing else starts meanwhile
        ledger = ExperimentLedger.objects.get(pk=experiment.pk)
        assert BudgetReservation.objects.filter(experiment=experiment).count() == 1
        assert ledger.reserved_tokens == held.tokens > 0  # leaked: held by a dead worker
        # the first call (70) and the conformance check before it, settled by the worker itself
        checks = LlmCall.objects.filter(
            invocation__world__experiment__slug="reaped", invocation__kind="conformance_check"
        )
        probe = sum((c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in checks)
        assert probe > 0
        assert ledger.spent_tokens == 70 + probe

        TurnAttempt.objects.filter(pk=held.attempt_id).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        assert turn_attempt_reap() == [str(held.attempt_id)]
        assert TurnAttempt.objects.get(pk=held.attempt_id).status == AttemptStatus.INTERRUPTED
        ledger.refresh_from_db()
        assert not BudgetReservation.objects.filter(experiment=experiment).exists()
        assert (ledger.reserved_tokens, ledger.reserved_cost) == (0, Decimal(0))
        assert ledger.spent_tokens == _calls_spent("reaped") == 70 + probe
        assert turn_attempt_reap() == []  # settled once: nothing counted twice
        ledger.refresh_from_db()
        assert (ledger.reserved_tokens, ledger.spent_tokens) == (0, 70 + probe)
    finally:
        llm.stop()


def test_a_reservation_older_than_any_task_is_settled_from_its_calls_row() -> None:
    experiment = experiment_create(
        data=_design("stale", _scenario(), budget={"max_tokens_total": 1000})
    )
    budget = experiment_budget(experiment.pk)
    assert budget is not None
    # a judge's reservation (no attempt) whose worker died before the call's rows existed
    lost = uuid.uuid4()
    assert budget.reserve(tokens=150, cost=Decimal(0), reservation_id=lost, attempt_id=None) is None
    assert ExperimentLedger.objects.get(pk=experiment.pk).reserved_tokens == 150
    assert turn_attempt_reap() == []  # too recent: its task may still be running
    assert BudgetReservation.objects.filter(pk=lost).exists()
    turn_attempt_reap(now=timezone.now() + timedelta(days=1))
    ledger = ExperimentLedger.objects.get(pk=experiment.pk)
    assert not BudgetReservation.objects.filter(pk=lost).exists()
    assert (ledger.reserved_tokens, ledger.spent_tokens) == (0, 0)  # no call row: spent nothing
