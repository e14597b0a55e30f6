"""The periodic batch poll on real Celery workers: a worker killed while a batch is pending
loses nothing; the next worker's poll writes the answers."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from celery import current_app
from django.db import connection

from cognition_app import batches
from cognition_app.models import BatchRequest, ProviderBatch
from scenarios_app.services import response_source_put
from tests.cognition_app.test_batches import SOURCE, payload
from tests.support.fixtures import TEST_API_KEY, scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worker import control_queue, worker_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _until(check: Any, what: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} after {seconds} s")
        time.sleep(0.2)


def test_a_worker_killed_with_a_batch_pending_loses_nothing(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    request = batches.enqueue(
        source_hash=source, reuse_key="key-one", body=payload("one"), owner="experiment:1"
    )
    scripted_llm.script_batches("in_progress")
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": scripted_llm.base_url,
        "CHUKWA_LLM_API_KEY": TEST_API_KEY,
    }
    queue = f"batch-{uuid.uuid4().hex[:8]}"
    with worker_process(f"{queue}-a", env=env, queue=queue) as first:
        current_app.send_task("cognition.batch_tick", queue=control_queue(queue))
        # sent and polled once (in progress at the provider): a kill before the first poll left
        # the scripted model no plan for the batch, so settling it later did not reach it
        _until(
            lambda: ProviderBatch.objects.filter(polled_at__isnull=False).exists(),
            "the batch was not sent and polled",
        )
        first.kill()  # SIGKILL: nothing of the worker's memory survives
        first.wait(timeout=30)
    # the first worker is gone with its batch in progress: the database still knows it
    assert BatchRequest.objects.get(pk=request.pk).status == "submitted"
    scripted_llm.script("the answer")
    scripted_llm.settle_batches()
    with worker_process(f"{queue}-b", env=env, queue=queue):
        current_app.send_task("cognition.batch_tick", queue=control_queue(queue))
        _until(
            lambda: BatchRequest.objects.get(pk=request.pk).status == "completed",
            "the pending batch was not picked up",
        )
    answered = BatchRequest.objects.get(pk=request.pk)
    assert answered.response_body is not None
    assert answered.response_body["choices"][0]["message"]["content"] == "the answer"
    assert len(scripted_llm.batches) == 1  # polled again, never sent twice
    assert scripted_llm.requests == []
