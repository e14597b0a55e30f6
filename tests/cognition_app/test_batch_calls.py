"""A call nobody waits for (``CallContext.batch_owner``) to a source declaring ``interface.batch``:
enqueued, then answered from its batch line, priced at the batch prices, nothing sent live; a
failed batch fails the call and is tried again per the source's retry policy."""

from __future__ import annotations

import itertools
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from cognition_app import batches
from cognition_app.failures import SourceFailure
from cognition_app.models import (
    BatchRequest,
    LlmCall,
    ModelPrice,
    ProviderBatch,
    SourceInvocation,
)
from cognition_app.sources.context import CallContext
from cognition_app.sources.llm import invoke_llm
from scenarios_app.services import response_source_put
from tests.cognition_app.test_batches import SOURCE
from tests.support.fixtures import scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.django_db

MESSAGES = [{"role": "user", "content": "rate it"}]


def _ctx(owner: str = "experiment:7") -> CallContext:
    seq = itertools.count()
    return CallContext(
        attempt_id=None,
        world_id=None,
        world_slug="",
        attempted_turn=0,
        next_seq=lambda: next(seq),
        batch_owner=owner,
    )


def _call(source: str, owner: str = "experiment:7") -> Any:
    return invoke_llm(source_hash=source, messages=MESSAGES, ctx=_ctx(owner), response_schema=None)


def _price(**batch: str) -> ModelPrice:
    return ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="judge-model",
        input_per_million=Decimal("1.5"),
        output_per_million=Decimal("6"),
        cached_input_per_million=Decimal("0.75"),
        valid_from=timezone.now() - timezone.timedelta(days=1),
        **{name: Decimal(value) for name, value in batch.items()},
    )


def test_a_batched_call_waits_then_is_answered_at_the_batch_price(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    _price(
        batch_input_per_million="0.75",
        batch_output_per_million="3",
        batch_cached_input_per_million="0.375",
    )
    with pytest.raises(batches.BatchPending) as waiting:
        _call(source)
    queued = BatchRequest.objects.get()
    assert waiting.value.request_id == queued.pk
    assert queued.owner == "experiment:7"
    # waiting writes nothing and sends nothing
    assert not SourceInvocation.objects.exists()
    with pytest.raises(batches.BatchPending):
        _call(source)
    assert BatchRequest.objects.count() == 1
    scripted_llm.script("score 4")
    assert batches.batch_tick() == (1, 1)
    gen = _call(source)
    assert gen.text == "score 4"
    call = LlmCall.objects.get()
    queued.refresh_from_db()
    assert queued.response_body is not None
    usage = queued.response_body["usage"]
    assert (call.prompt_tokens, call.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert call.batched
    assert call.batch_request_id == queued.pk
    assert queued.batch is not None
    assert call.invocation.response_headers == {
        "x-chukwa-provider-batch": queued.batch.provider_batch_id
    }
    expected = (
        usage["prompt_tokens"] * Decimal("0.75") + usage["completion_tokens"] * Decimal("3")
    ) / 1_000_000
    assert call.cost == expected
    assert scripted_llm.requests == []  # nothing live
    # asked again: the line was paid for once, this call is reused from the first
    assert _call(source).text == "score 4"
    again = LlmCall.objects.exclude(pk=call.pk).get()
    assert (again.cost, again.tokens_reused) == (
        0,
        usage["prompt_tokens"] + usage["completion_tokens"],
    )
    assert again.invocation.reused_from == call.invocation_id
    assert len(scripted_llm.batches) == 1


def test_no_batch_prices_leave_the_cost_unknown(scripted_llm: ScriptedLLM) -> None:  # noqa: F811
    source = response_source_put(content=SOURCE)["hash"]
    _price()
    with pytest.raises(batches.BatchPending):
        _call(source)
    scripted_llm.script("score 1")
    batches.batch_tick()
    _call(source)
    assert LlmCall.objects.get().cost is None


def test_a_call_without_an_owner_goes_live(scripted_llm: ScriptedLLM) -> None:  # noqa: F811
    source = response_source_put(content=SOURCE)["hash"]
    scripted_llm.script("live")
    assert _call(source, owner="").text == "live"
    assert len(scripted_llm.requests) == 1
    assert not BatchRequest.objects.exists()


@pytest.mark.parametrize(
    ("outcome", "failure_class"), [("failed", "batch_failed"), ("expired", "batch_expired")]
)
def test_a_failed_batch_fails_the_call_and_is_retried_per_the_policy(
    scripted_llm: ScriptedLLM,  # noqa: F811
    outcome: str,
    failure_class: str,
) -> None:
    retried = {**SOURCE, "interface": {**SOURCE["interface"], "retry": {"attempts": 2}}}
    source = response_source_put(content=retried)["hash"]
    with pytest.raises(batches.BatchPending):
        _call(source)
    scripted_llm.script_batches(outcome, outcome)
    batches.batch_tick()
    # the first try failed, traced; the second is a new request
    with pytest.raises(batches.BatchPending) as second:
        _call(source)
    first_failed = SourceInvocation.objects.get()
    assert (first_failed.status, first_failed.failure_class) == ("failed", failure_class)
    assert BatchRequest.objects.count() == 2
    assert second.value.request_id != BatchRequest.objects.order_by("created_at")[0].pk
    batches.batch_tick()
    with pytest.raises(SourceFailure) as failed:
        _call(source)
    assert failed.value.failure_class == failure_class
    # asked again, it fails again without a new row or a new request
    with pytest.raises(SourceFailure):
        _call(source)
    assert SourceInvocation.objects.filter(status="failed").count() == 2
    assert BatchRequest.objects.count() == 2
    assert len(scripted_llm.batches) == 2
    assert scripted_llm.requests == []


def test_a_cancelled_request_fails_the_call_untried(scripted_llm: ScriptedLLM) -> None:  # noqa: F811
    retried = {**SOURCE, "interface": {**SOURCE["interface"], "retry": {"attempts": 3}}}
    source = response_source_put(content=retried)["hash"]
    with pytest.raises(batches.BatchPending):
        _call(source)
    batches.cancel_owner("experiment:7")
    with pytest.raises(SourceFailure) as failed:
        _call(source)
    assert failed.value.failure_class == "batch_cancelled"
    assert BatchRequest.objects.count() == 1


def test_a_cancel_without_the_endpoint_variable_still_cancels_the_requests(
    scripted_llm: ScriptedLLM,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    with pytest.raises(batches.BatchPending):
        _call(source)
    scripted_llm.script_batches("in_progress")
    batches.batch_tick()
    monkeypatch.delenv("CHUKWA_LLM_BASE_URL")  # a process without it (never a 500)
    assert batches.cancel_owner("experiment:7") == 1
    assert BatchRequest.objects.get().status == "cancelled"
    assert ProviderBatch.objects.get().status == "in_progress"  # ends at the provider
    assert batches.poll_submitted() == []  # nor does a poll without it fail


def test_another_owners_ended_request_is_not_this_owners_try(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    source = response_source_put(content=SOURCE)["hash"]
    with pytest.raises(batches.BatchPending) as first:
        _call(source, owner="experiment:1")
    # experiment:2 asks the same meanwhile: it waits on the same line
    with pytest.raises(batches.BatchPending) as shared:
        _call(source, owner="experiment:2")
    assert shared.value.request_id == first.value.request_id
    batches.cancel_owner("experiment:1")
    # experiment:1's judging fails, cancelled; experiment:2's is asked again, its own
    with pytest.raises(SourceFailure) as cancelled:
        _call(source, owner="experiment:1")
    assert cancelled.value.failure_class == "batch_cancelled"
    with pytest.raises(batches.BatchPending) as again:
        _call(source, owner="experiment:2")
    assert again.value.request_id != first.value.request_id
    assert BatchRequest.objects.get(pk=again.value.request_id).owner == "experiment:2"
    scripted_llm.script("score 2")
    batches.batch_tick()
    assert _call(source, owner="experiment:2").text == "score 2"
    # the failed try written is experiment:1's alone
    assert SourceInvocation.objects.filter(status="failed").count() == 1
