"""Two turns at once against the real embedded model (llama.cpp, one reply at a time), each on its
own database connection as two worker processes are. With the deployment's bound on the endpoint
(``CHUKWA_LLM_MAX_CONCURRENCY=1``, what the stack sets) the later call waits for the slot before
it is sent, so the duration its ``timeout_ms`` is measured against is its own generation only;
without it, both calls' clocks start at once and the later one's includes the wait in the
model's queue. Both halves are asserted from the recorded clocks (a deadline is exceeded exactly
when the duration it is measured against is), not by guessing a deadline between two noisy
generation times: on a loaded machine a generation alone can take twice as long as it did a
moment before. That the deadline itself starts after a limit's wait is shown with a wait twice
the deadline in tests/cognition_app/test_rows_before_limits.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from cognition_app.models import SourceInvocation
from devservices import embedded_llm
from scenarios_app.services import scenario_assemble
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.models import TurnAttempt
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

# transaction=True: each turn runs on its own thread and connection (the advisory locks are a
# connection's, as they are a worker process's)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def embedded_endpoint() -> Iterator[str]:
    server = embedded_llm.serve("127.0.0.1", 0, threads=2, ctx=4096)
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def ant_scenario(timeout_ms: int) -> str:
    """ant_on_plate with greedy decoding (the same reply to the same prompt) and ``timeout_ms``."""
    body = fixture_body("ant_on_plate")
    (profile,) = body["cognition_profiles"]
    iface = workflow_of(body, profile)["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["timeout_ms"] = timeout_ms
    iface["params"] = {**iface.get("params", {}), "temperature": 0}
    return str(scenario_assemble(data=body)["scenario_hash"])


def run_turns(scenario: str, slugs: list[str]) -> list[TurnAttempt]:
    """One turn of a new world per slug, all at once, each on a thread of its own."""
    attempt_ids = []
    for slug in slugs:
        world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
        attempt_ids.append(turn_attempt_enqueue(slug=slug)["attempt_ids"][0])
    start = threading.Barrier(len(slugs))

    def run(attempt_id: Any) -> None:
        try:
            start.wait()
            turn_attempt_run(attempt_id=attempt_id, owner=f"worker-{attempt_id}")
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(a,)) for a in attempt_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return [TurnAttempt.objects.get(pk=a) for a in attempt_ids]


def generations(attempt: TurnAttempt) -> list[SourceInvocation]:
    return list(
        SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation").order_by("seq")
    )


def test_two_workers_share_the_embedded_model_without_timing_out(
    embedded_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", embedded_endpoint)
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", "embedded-model-needs-no-key")
    # One turn alone first: the model warm, the conformance check made.
    generous = ant_scenario(120_000)
    (warm,) = run_turns(generous, ["warm"])
    assert warm.status == "committed", warm.failure_reason

    monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "1")
    bounded = run_turns(generous, ["bounded-a", "bounded-b"])
    assert [a.status for a in bounded] == ["committed", "committed"], [
        a.failure_reason for a in bounded
    ]
    first, later = sorted((g for a in bounded for g in generations(a)), key=lambda g: g.started_at)
    assert (first.status, later.status) == ("succeeded", "succeeded")
    assert first.ended_at is not None and later.ended_at is not None
    # one at a time: sent once the other's reply was read
    assert later.started_at >= first.ended_at
    # The later call waited at the endpoint's slot through (nearly) all of the other's
    # generation, and that wait is on its limit_wait_ms, not in the duration its deadline
    # measures: that duration ends within its own generation.
    assert later.limit_wait == "endpoint_concurrency"
    assert (later.limit_wait_ms or 0) >= 0.5 * (first.duration_ms or 0), (
        later.limit_wait_ms,
        first.duration_ms,
    )
    own_ms = (later.ended_at - first.ended_at).total_seconds() * 1000
    assert (later.duration_ms or 0) <= own_ms + 1, (later.duration_ms, own_ms)

    # The control: without the bound both calls start their clocks at once and the model serves
    # them one after the other, so the later call's recorded duration (what its deadline is
    # measured against) includes the whole wait for the other's generation: the cause of the
    # time-out, shown for every load the machine happens to be under.
    monkeypatch.delenv("CHUKWA_LLM_MAX_CONCURRENCY")
    unbounded = run_turns(generous, ["unbounded-a", "unbounded-b"])
    assert [a.status for a in unbounded] == ["committed", "committed"], [
        a.failure_reason for a in unbounded
    ]
    first, later = sorted(
        (g for a in unbounded for g in generations(a)), key=lambda g: g.ended_at or g.started_at
    )
    assert first.ended_at is not None and later.ended_at is not None
    # The later call's clock started while the model was still generating the other reply, and
    # ran through (nearly) all of it: the queue wait is inside the time its deadline measures.
    waited_ms = (first.ended_at - later.started_at).total_seconds() * 1000
    assert waited_ms >= 0.5 * (first.duration_ms or 0), (waited_ms, first.duration_ms)
    assert (later.duration_ms or 0) >= waited_ms, (later.duration_ms, waited_ms)
