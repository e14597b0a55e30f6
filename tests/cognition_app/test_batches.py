"""Requests gathered into provider batches, the database the queue of record: sent, polled and
answered against the scripted model over real HTTP, counting what the model receives."""

from __future__ import annotations

from typing import Any

import pytest

from cognition_app import batches
from cognition_app.models import BatchRequest, ProviderBatch
from scenarios_app.services import response_source_put
from tests.support.fixtures import scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.django_db

SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "batched-judge",
    "interface": {
        "name": "llm_chat_completions",
        "model": "judge-model",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "api_key_env": "CHUKWA_LLM_API_KEY",
        "schema_delivery": "response_format",
        "timeout_ms": 10000,
        "batch": {"api": "openai", "completion_window": "24h"},
    },
}


def payload(text: str) -> dict[str, Any]:
    return {
        "model": "judge-model",
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def enqueue(source_hash: str, text: str, owner: str = "experiment:1") -> BatchRequest:
    return batches.enqueue(
        source_hash=source_hash, reuse_key=f"key-{text}", body=payload(text), owner=owner
    )


def test_pending_requests_go_in_one_batch_and_are_answered(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    first, second = enqueue(source, "one"), enqueue(source, "two")
    assert enqueue(source, "one").pk == first.pk  # an identical request waits on one line
    scripted_llm.script("score 3", "score 5")
    assert batches.batch_tick() == (1, 1)
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.response_status) == ("completed", 200)
    assert first.response_body is not None
    assert first.response_body["choices"][0]["message"]["content"] == "score 3"
    assert second.status == "completed"
    # nothing live; the lines were sent unstreamed
    assert scripted_llm.requests == []
    assert scripted_llm.batch_requests == [
        {"model": "judge-model", "messages": [{"role": "user", "content": "one"}]},
        {"model": "judge-model", "messages": [{"role": "user", "content": "two"}]},
    ]
    assert batches.batch_tick() == (0, 0)  # nothing left: nothing sent
    assert len(scripted_llm.batches) == 1


@pytest.mark.parametrize(
    ("outcome", "failure_class"), [("failed", "batch_failed"), ("expired", "batch_expired")]
)
def test_a_failed_or_expired_batch_fails_its_requests(
    scripted_llm: ScriptedLLM,  # noqa: F811
    outcome: str,
    failure_class: str,
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    request = enqueue(source, "one")
    scripted_llm.script_batches(outcome)
    batches.batch_tick()
    request.refresh_from_db()
    assert (request.status, request.failure_class) == ("failed", failure_class)
    assert ProviderBatch.objects.get().status == outcome
    # a failed request is not shared: the same request asked again is a new line
    assert enqueue(source, "one").pk != request.pk


def test_a_pending_batch_survives_its_worker_and_cancel_reaches_the_provider(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    kept = enqueue(source, "kept", owner="experiment:1")
    scripted_llm.script_batches("in_progress")
    assert batches.batch_tick() == (1, 0)
    # a new process (a worker killed and restarted) polls from what the database holds
    scripted_llm.script("late answer")
    scripted_llm.settle_batches()
    assert batches.poll_submitted()[0].status == "completed"
    kept.refresh_from_db()
    assert kept.status == "completed"

    cancelled = enqueue(source, "cancel me", owner="experiment:2")
    scripted_llm.script_batches("in_progress")
    batches.submit_pending()
    assert batches.cancel_owner("experiment:2") == 1
    cancelled.refresh_from_db()
    assert cancelled.status == "cancelled"
    batch = ProviderBatch.objects.get(requests=cancelled)
    assert batch.status == "cancelled"
    assert [b["status"] for b in scripted_llm.batches][-1] == "cancelled"
    assert ("POST", f"/v1/batches/{batch.provider_batch_id}/cancel", 200) in (
        scripted_llm.batch_calls
    )
    assert batches.poll_submitted() == []
