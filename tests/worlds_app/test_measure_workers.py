"""Measuring on real workers, with nothing asked twice and nothing lost (docs/operations.md,
"Measurements re-driven"): several measure tasks of one world running at once ask the judge
once per (turn, metric); an experiment world's measure message lost after its last commit is
re-sent by the periodic reaper, as a lost turn message is."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.db import connection

from scenarios_app.services import metric_put, response_source_put, scenario_assemble
from tests.cognition_app.test_rule_tools import _scenario as rule_tool_scenario
from tests.conftest import LLM_SOURCE
from tests.support.fixtures import TEST_API_KEY
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import (
    control_queue,
    delete_queue,
    measure_queue,
    routed_to,
    unread_queue,
    worker_process,
)
from tests.worlds_app.test_measurements import DRANK, buyers_world, expression, judge
from worlds_app.models import AttemptStatus, Measurement, TurnAttempt, World
from worlds_app.services import turn_attempt_run
from worlds_app.services.dispatch import send_measure
from worlds_app.services.experiments import experiment_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

PROJECT = Path(__file__).resolve().parents[2]


def _succeeded(log: Path, task: str) -> int:
    """How many ``task`` runs the worker's log says succeeded."""
    text = log.read_text() if log.exists() else ""
    return sum(1 for line in text.splitlines() if task in line and "succeeded" in line)


def _until(check: Any, what: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} after {seconds} s")
        time.sleep(0.2)


def test_several_measure_tasks_at_once_ask_the_judge_once(
    toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    with unread_queue(f"unread-{uuid.uuid4().hex}"):
        world = buyers_world("judged", 2)  # turns 0, 1, 2
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    metric = metric_put(content=judge(source))["hash"]
    # slow answers, so the tasks overlap
    scripted_llm.route(
        lambda body: Reply(text=json.dumps({"score": 4, "rationale": "fine"}), delay_s=0.4)
    )
    queue = f"once-{uuid.uuid4().hex[:8]}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": scripted_llm.base_url,
        "CHUKWA_LLM_API_KEY": TEST_API_KEY,
    }
    tasks = 4
    with worker_process(queue, env=env, queue=queue, pool="prefork", concurrency=tasks):
        with routed_to(queue):
            for _ in range(tasks):
                send_measure(world.pk, [metric])
        log = PROJECT / "var" / f"{queue}.log"
        _until(
            lambda: _succeeded(log, "worlds.measure_world") >= tasks,
            f"fewer than {tasks} measure tasks succeeded",
        )
    # every task ran (at once: the worker has a process for each), one asked per turn
    assert Measurement.objects.filter(world=world, metric_id=metric).count() == 3
    assert len(scripted_llm.requests) == 3


def test_a_lost_measure_message_is_re_driven_by_the_reaper(toy_sources: str) -> None:
    scenario = scenario_assemble(data=rule_tool_scenario({"item": "candy_bar"}))["scenario_hash"]
    bought = metric_put(content=expression("bought", DRANK))["hash"]
    lost = f"lost-{uuid.uuid4().hex[:8]}"
    with unread_queue(lost):
        experiment_create(
            data={
                "slug": "lost",
                "arms": [{"label": "a", "scenario_ref": {"hash": scenario}}],
                "replicates": 1,
                "turns": 2,
                "metrics": [{"hash": bought}],
            },
            created_by="olga",
        )
        queued = TurnAttempt.objects.filter(status=AttemptStatus.QUEUED).order_by("seq")
        for attempt_id in queued.values_list("id", flat=True):
            assert turn_attempt_run(attempt_id=str(attempt_id), owner="test") == "committed"
        # every measure message (the baseline's, each turn's) is lost with its queue
        delete_queue(measure_queue(lost))
    (world,) = World.objects.filter(experiment__slug="lost")
    assert world.current_turn == 2
    assert not Measurement.objects.filter(world=world).exists()

    queue = f"redrive-{uuid.uuid4().hex[:8]}"
    env = {"CHUKWA_DB_NAME": connection.settings_dict["NAME"]}
    with worker_process(queue, env=env, queue=queue), routed_to(queue):
        current_app.send_task("worlds.reap_expired_attempts", queue=control_queue(queue))
        _until(
            lambda: Measurement.objects.filter(world=world).count() == 3,
            "the lost measuring was not re-driven",
        )
    assert sorted(Measurement.objects.filter(world=world).values_list("turn_number", "value")) == [
        (0, 0.0),
        (1, 1.0),
        (2, 0.0),
    ]
