"""Two turns at once against the real embedded model (llama.cpp, one reply at a time), each on its
own database connection as two worker processes are: with the deployment's bound on the endpoint
(``CHUKWA_LLM_MAX_CONCURRENCY=1``, what the stack sets) both commit within a ``timeout_ms`` that
covers one generation only, because the wait for the model happens before a call's deadline
starts; without it, both calls' clocks start at once and the later one's includes the wait in the
model's queue (so a deadline covering one generation is exceeded)."""

from __future__ import annotations

import itertools
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
    # One turn alone, twice: how long one generation takes here once the model is warm (the
    # first also makes the conformance check).
    generous = ant_scenario(120_000)
    for slug in ("warm", "solo"):
        (solo,) = run_turns(generous, [slug])
        assert solo.status == "committed", solo.failure_reason
    one = max(g.duration_ms or 0 for g in generations(solo))
    # Enough for one generation, not for one generation plus the wait for another.
    scenario = ant_scenario(int(one * 1.7) + 200)

    monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "1")
    bounded = run_turns(scenario, ["bounded-a", "bounded-b"])
    assert [a.status for a in bounded] == ["committed", "committed"], [
        a.failure_reason for a in bounded
    ]
    calls = sorted((g for a in bounded for g in generations(a)), key=lambda g: g.started_at)
    assert all(g.status == "succeeded" for g in calls)
    for earlier, later in itertools.pairwise(calls):
        assert earlier.ended_at is not None
        assert later.started_at >= earlier.ended_at  # one at a time, waiting before its deadline

    # The control: without the bound both calls start their clocks at once and the model serves
    # them one after the other, so the later call's recorded duration (what its deadline is
    # measured against) includes the whole wait for the other's generation. Asserted from the
    # recorded clocks, not by guessing a deadline between two noisy durations: a deadline is
    # exceeded exactly when the duration it is measured against is, so this is the cause of the
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
