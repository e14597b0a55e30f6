"""The deployment's bound on an LLM endpoint (``CHUKWA_<X>_MAX_CONCURRENCY``): slots held as
advisory locks, so two database connections (two worker processes) share them; a malformed
value fails the call naming the variable. The real model's case is ``test_embedded_slots``."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection

from chukwa_core.ids import bound_concurrency_env_name
from cognition_app.failures import SourceFailure
from cognition_app.sources.admission import endpoint
from cognition_app.sources.admission.base import CallRequest, Held, LimitWaits, take_waiting
from cognition_app.sources.admission.endpoint import endpoint_limit
from cognition_app.sources.cancel import CancelScope
from cognition_app.sources.context import CallContext


def _request(what: str, cancel: CancelScope | None = None) -> CallRequest:
    """A request to the endpoint CHUKWA_LLM_BASE_URL names, outside any world."""
    ctx = CallContext(
        attempt_id=None, world_id=0, world_slug="", attempted_turn=0, next_seq=lambda: 0
    )
    ctx.cancel = cancel
    return CallRequest(
        source_hash="e" * 64,
        interface={"base_url_env": "CHUKWA_LLM_BASE_URL", "model": "m"},
        ctx=ctx,
        what=what,
        prompt_tokens=0,
        max_completion=None,
        price=None,
        call_id=uuid.uuid4(),
    )


def _slot(what: str, cancel: CancelScope | None = None) -> Held:
    """The endpoint's slot, waited for in admission's one wait loop."""
    held = take_waiting(endpoint.LIMIT, _request(what, cancel), LimitWaits())
    assert isinstance(held, Held)
    return held


@pytest.mark.parametrize(
    ("url_env", "bound"),
    [
        ("CHUKWA_LLM_BASE_URL", "CHUKWA_LLM_MAX_CONCURRENCY"),
        ("CHUKWA_OLLAMA_URL", "CHUKWA_OLLAMA_MAX_CONCURRENCY"),
    ],
)
def test_the_bound_is_named_after_the_url_variable(url_env: str, bound: str) -> None:
    assert bound_concurrency_env_name(url_env) == bound


@pytest.mark.parametrize("value", ["0", "257", "two", "-1", "1.5"])
def test_a_malformed_bound_fails_naming_the_variable(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", value)
    with pytest.raises(SourceFailure) as excinfo:
        endpoint_limit("CHUKWA_LLM_BASE_URL")
    assert excinfo.value.failure_class == "config"
    assert "CHUKWA_LLM_MAX_CONCURRENCY" in excinfo.value.message


def test_no_bound_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHUKWA_LLM_MAX_CONCURRENCY", raising=False)
    assert endpoint_limit("CHUKWA_LLM_BASE_URL") is None
    assert endpoint.LIMIT.take(_request("a call")) == Held()


@pytest.mark.django_db(transaction=True)
def test_a_slot_is_shared_by_every_connection_and_a_stop_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "1")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:  # another worker's call, on its own connection
        try:
            held = _slot("their call")
            holding.set()
            release.wait(10)
            held.give_back()
        finally:
            connection.close()

    other = threading.Thread(target=hold)
    other.start()
    assert holding.wait(10)
    cancel = CancelScope()
    threading.Timer(0.3, cancel.cancel, args=("another subject failed",)).start()
    started = time.monotonic()
    with pytest.raises(SourceFailure) as excinfo:
        _slot("our call", cancel)
    assert excinfo.value.failure_class == "cancelled"
    assert 0.25 <= time.monotonic() - started < 5  # it waited for the slot until stopped
    release.set()
    other.join(10)
    _slot("our call").give_back()  # given back: free at once
