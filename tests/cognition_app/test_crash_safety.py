"""A worker killed while a streamed generation is in flight: the invocation and LLM
call rows are already there with the partial text, the reaper marks them interrupted, and the
world does not advance."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from cognition_app.models import LlmCall, LlmChunk, SourceInvocation
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from worlds_app.models import AttemptStatus, Turn, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, turn_attempt_reap, world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PROJECT = Path(__file__).resolve().parents[2]


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_killed_worker_leaves_partial_trace_then_interrupted(tmp_path: Path) -> None:
    llm = ScriptedLLM()
    llm.start()
    # A long, slow stream: it is still in flight when the worker is killed.
    long_patch = (
        '{"kind": "final_patch", "patch": {"narration": "'
        + "The ant walks. " * 200
        + '", "effects": []}}'
    )
    llm.script(Reply(text=long_patch, chunk_size=6, chunk_delay_s=0.05))
    queue = f"crash-{os.getpid()}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": "test-secret-key",
    }
    try:
        with worker_process(f"crash-{os.getpid()}", env=env, queue=queue) as worker:
            _run_and_kill(worker, queue, long_patch)
    finally:
        llm.stop()


def _run_and_kill(worker: subprocess.Popen[bytes], queue: str, long_patch: str) -> None:
    body = load_fixture("ant_on_plate")
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": "crash", "scenario_ref": {"hash": scenario}})
    with routed_to(queue):
        attempt_id = turn_attempt_enqueue(slug="crash")["attempt_ids"][0]

    # The rows exist and partial text has been persisted while the stream is in flight.
    _wait_for(
        lambda: LlmChunk.objects.filter(call__invocation__attempt_id=attempt_id).count() >= 3,
        60,
        "chunks",
    )
    call = LlmCall.objects.get(invocation__attempt_id=attempt_id, invocation__kind="llm_generation")
    assert call.status == "running"
    assert SourceInvocation.objects.get(pk=call.invocation_id).status == "running"

    os.kill(worker.pid, signal.SIGKILL)  # the worker dies mid-generation
    worker.wait(timeout=30)
    partial = "".join(
        LlmChunk.objects.filter(call=call).order_by("seq").values_list("text", flat=True)
    )
    assert partial and long_patch.startswith(partial) and len(partial) < len(long_patch)
    assert TurnAttempt.objects.get(pk=attempt_id).status == AttemptStatus.RUNNING

    # The lease runs out (no heartbeat any more); the reaper takes over.
    TurnAttempt.objects.filter(pk=attempt_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert turn_attempt_reap() == [attempt_id]
    attempt = TurnAttempt.objects.get(pk=attempt_id)
    assert attempt.status == AttemptStatus.INTERRUPTED
    call.refresh_from_db()
    invocation = SourceInvocation.objects.get(pk=call.invocation_id)
    assert (call.status, invocation.status) == ("interrupted", "interrupted")
    assert World.objects.get(slug="crash").current_turn == 0
    assert not Turn.objects.filter(world__slug="crash", number=1).exists()
