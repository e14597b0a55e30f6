"""Scale-out shown on one machine (docs/operations.md, "Scale-out"): two worker groups with
their own host names, in separate processes, consuming the same queues as two machines would
— one over the Unix sockets, the other over TCP (DATABASE_URL and REDIS_URL at 127.0.0.1) —
run one experiment together; one group is killed (SIGKILL, every process of it) mid-run, the
reaper interrupts what it was running, and the experiment still completes with every turn
committed exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from django.db import connection

from chukwa_site import embedded
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.tcp_relay import tcp_relay
from tests.support.worker import delete_queue, experiment_queue, routed_to, worker_process
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import AttemptStatus, Turn, TurnAttempt, World
from worlds_app.services import turn_attempt_reap, turn_attempt_redrive
from worlds_app.services.attempts import turn_attempt_retry, turn_attempt_retryable
from worlds_app.services.experiments import experiment_create
from worlds_app.services.measure_redrive import measure_redrive

API_KEY = "test-secret-key"
TURNS, WORLDS = 4, 8


# Replies are sent while this is set; cleared, every model call is held (a group killed then
# is surely caught mid-attempt, whatever the machine's load).
REPLYING = threading.Event()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        # Every turn's one model call takes 0.4 s.
        final = {
            "kind": "final_patch",
            "tool_call": None,
            "patch": {"narration": "The ant waits.", "effects": []},
        }

        def reply(request: dict[str, Any]) -> Reply:
            REPLYING.wait(timeout=30)
            return Reply(text=json.dumps(final), delay_s=0.4)

        REPLYING.set()
        server.route(reply)
        yield server
        REPLYING.set()


def _scenario() -> str:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 30000
    return str(scenario_assemble(data=body)["scenario_hash"])


def _metric() -> str:
    content = {
        "version": 1,
        "label": "turn_number",
        "kind": "expression",
        "aggregate": "last",
        "expression": "turn",
    }
    return str(metric_put(content=content)["hash"])


def _kill_group(process: Any) -> None:
    """SIGKILL a worker and every process under it, as a machine that loses power."""
    root = psutil.Process(process.pid)
    for proc in [*root.children(recursive=True), root]:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass  # already gone


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_two_worker_groups_run_an_experiment_and_losing_one_loses_nothing(
    llm: ScriptedLLM,
) -> None:
    queue = f"scale-{os.getpid()}"
    db = connection.settings_dict
    common = {
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
        # a dead group's attempts are given up 2 s after their last renewal
        "CHUKWA_ATTEMPT_LEASE_SECONDS": "2",
    }
    pg_socket = os.path.join(db["HOST"], f".s.PGSQL.{db['PORT']}")
    with (
        tcp_relay(pg_socket) as pg_port,
        tcp_relay(str(embedded._redis_socket())) as redis_port,
    ):
        # "Machine" b knows the services only by TCP address, as a second host would.
        over_tcp = {
            **common,
            "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{pg_port}/{db['NAME']}",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        }
        local = {**common, "CHUKWA_DB_NAME": str(db["NAME"])}
        group = {"a": f"{queue}-a", "b": f"{queue}-b"}
        try:
            with (
                worker_process(group["a"], env=local, queue=queue, pool="prefork", concurrency=2),
                worker_process(
                    group["b"], env=over_tcp, queue=queue, pool="prefork", concurrency=2
                ) as b,
                routed_to(queue),
            ):
                design = {
                    "slug": "spread",
                    "arms": [{"label": "a", "scenario_ref": {"hash": _scenario()}}],
                    "replicates": WORLDS,
                    "turns": TURNS,
                    "metrics": [{"hash": _metric()}],
                }
                experiment = experiment_create(data=design)
                attempts = TurnAttempt.objects.filter(world__experiment=experiment)
                on_b = attempts.filter(lease_owner__startswith=group["b"])
                # Kill b while it runs an attempt, once both groups committed turns.
                deadline = time.monotonic() + 40
                while not (
                    on_b.filter(status=AttemptStatus.RUNNING).exists()
                    and on_b.filter(status=AttemptStatus.COMMITTED).exists()
                    and attempts.filter(
                        lease_owner__startswith=group["a"], status=AttemptStatus.COMMITTED
                    ).exists()
                ):
                    assert time.monotonic() < deadline, "both groups did not get to run"
                    time.sleep(0.05)
                # hold the model: b's running attempt waits for its reply, and cannot commit
                REPLYING.clear()
                while not on_b.filter(status=AttemptStatus.RUNNING).exists():
                    assert time.monotonic() < deadline, "b did not start another attempt"
                    time.sleep(0.05)
                time.sleep(1.0)  # its call reaches the model (held there)
                _kill_group(b)
                REPLYING.set()
                # What the control worker and beat do every period; then what an operator does
                # with an interrupted turn (retry it: its turn and the rest of its batch).
                deadline = time.monotonic() + 45
                while experiment_get(slug="spread")["status"] == "running" or any(
                    turn_attempt_retryable(attempt_id=str(a))
                    for a in attempts.filter(status=AttemptStatus.INTERRUPTED).values_list(
                        "pk", flat=True
                    )
                ):
                    assert time.monotonic() < deadline, (
                        "the experiment did not complete",
                        experiment_get(slug="spread")["progress"],
                        sorted(attempts.values_list("status", flat=True)),
                        sorted(set(attempts.values_list("failure_reason", flat=True))),
                    )
                    turn_attempt_reap()
                    turn_attempt_redrive()
                    measure_redrive()  # a measure message lost with b's prefetch, sent again
                    for attempt_id in attempts.filter(status=AttemptStatus.INTERRUPTED).values_list(
                        "pk", flat=True
                    ):
                        if turn_attempt_retryable(attempt_id=str(attempt_id)):
                            turn_attempt_retry(attempt_id=str(attempt_id))
                    time.sleep(0.5)
        finally:
            delete_queue(queue)
            delete_queue(experiment_queue(queue))

    assert experiment_get(slug="spread")["status"] == "completed"
    owners = {
        owner.split("@")[0]
        for owner in attempts.filter(status=AttemptStatus.COMMITTED).values_list(
            "lease_owner", flat=True
        )
    }
    assert owners == {group["a"], group["b"]}, owners
    interrupted = attempts.filter(status=AttemptStatus.INTERRUPTED)
    assert interrupted.exists() and all(
        owner.startswith(group["b"]) for owner in interrupted.values_list("lease_owner", flat=True)
    )
    # every turn of every world committed exactly once
    for world in World.objects.filter(experiment=experiment):
        assert world.current_turn == TURNS
        committed = sorted(
            world.attempts.filter(status=AttemptStatus.COMMITTED).values_list(
                "produced_turn", flat=True
            )
        )
        assert committed == list(range(1, TURNS + 1)), (world.slug, committed)
        numbers = sorted(Turn.objects.filter(world=world).values_list("number", flat=True))
        assert numbers == list(range(TURNS + 1))
    assert not attempts.filter(status=AttemptStatus.RUNNING).exists()
