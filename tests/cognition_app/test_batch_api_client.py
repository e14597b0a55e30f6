"""The Batch API client against the scripted model over real HTTP: submit, poll, read the
output, cancel; failed and expired batches give their failure classes (no DB)."""

from __future__ import annotations

from typing import Any

import pytest

from cognition_app.failures import SourceFailure
from cognition_app.sources import batch_api
from tests.support.fixtures import TEST_API_KEY, scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import Reply, ScriptedLLM

INTERFACE: dict[str, Any] = {
    "base_url_env": "CHUKWA_LLM_BASE_URL",
    "api_key_env": "CHUKWA_LLM_API_KEY",
    "batch": {"api": "openai", "completion_window": "24h"},
}


def body(text: str) -> dict[str, Any]:
    return {"model": "judge-model", "messages": [{"role": "user", "content": text}], "seed": 3}


def test_a_completed_batch_answers_each_custom_id(scripted_llm: ScriptedLLM) -> None:  # noqa: F811
    scripted_llm.script("a score of 4", Reply(status=429))
    endpoint = batch_api.BatchEndpoint.of(INTERFACE)
    batch_id = batch_api.submit(endpoint, [("j-1", body("one")), ("j-2", body("two"))])
    state = batch_api.poll(endpoint, batch_id)
    assert (state.status, state.pending, state.failure_class) == ("completed", False, None)
    assert state.results["j-1"].status_code == 200
    assert state.results["j-1"].body["choices"][0]["message"]["content"] == "a score of 4"
    assert state.results["j-2"].status_code == 429
    # nothing went live: both requests travelled in the batch, exactly as given
    assert scripted_llm.requests == []
    assert scripted_llm.batch_requests == [body("one"), body("two")]


@pytest.mark.parametrize(
    ("outcome", "failure_class"), [("failed", "batch_failed"), ("expired", "batch_expired")]
)
def test_failed_and_expired_batches_fail_their_calls(
    scripted_llm: ScriptedLLM,  # noqa: F811
    outcome: str,
    failure_class: str,
) -> None:
    scripted_llm.script_batches(outcome)
    endpoint = batch_api.BatchEndpoint.of(INTERFACE)
    state = batch_api.poll(endpoint, batch_api.submit(endpoint, [("j-1", body("one"))]))
    assert (state.status, state.failure_class, state.results) == (outcome, failure_class, {})
    assert scripted_llm.batch_requests == []


def test_a_held_batch_stays_pending_until_it_ends_or_is_cancelled(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    scripted_llm.script_batches("in_progress", "in_progress")
    endpoint = batch_api.BatchEndpoint.of(INTERFACE)
    held = batch_api.submit(endpoint, [("j-1", body("one"))])
    cancelled = batch_api.submit(endpoint, [("j-2", body("two"))])
    assert batch_api.poll(endpoint, held).pending
    assert batch_api.cancel(endpoint, cancelled) == "cancelled"
    assert batch_api.poll(endpoint, cancelled).failure_class == "batch_cancelled"
    scripted_llm.script("late")
    scripted_llm.settle_batches()
    assert batch_api.poll(endpoint, held).results["j-1"].status_code == 200
    assert [b["messages"][0]["content"] for b in scripted_llm.batch_requests] == ["one"]


def test_exchange_errors_are_source_failures_without_the_key(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    endpoint = batch_api.BatchEndpoint.of(INTERFACE)
    with pytest.raises(SourceFailure) as missing:
        batch_api.poll(endpoint, "batch-404")
    assert missing.value.failure_class == "server_error"
    assert missing.value.http_status == 404
    assert TEST_API_KEY not in str(missing.value)
    gone = batch_api.BatchEndpoint("http://127.0.0.1:9/v1", TEST_API_KEY, "24h")
    with pytest.raises(SourceFailure) as refused:
        batch_api.submit(gone, [("j-1", body("one"))])
    assert refused.value.failure_class == "transport"
    assert TEST_API_KEY not in str(refused.value)


def test_a_source_without_batch_is_a_config_failure(scripted_llm: ScriptedLLM) -> None:  # noqa: F811
    with pytest.raises(SourceFailure) as caught:
        batch_api.BatchEndpoint.of({**INTERFACE, "batch": None})
    assert caught.value.failure_class == "config"
