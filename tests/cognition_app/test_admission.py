"""Call admission (``cognition_app.sources.admission``): every limit is passed for each request
sent, inside the retry loop, and every wait is recorded on the try's rows the same way.

Over the scripted model and the real Redis and PostgreSQL: a rate window counts a call's retried
requests; a concurrency slot is given back while a call waits to retry (another call is sent
meanwhile); the waits for each limit — the source's concurrency, its rate windows, the
endpoint's pause, the deployment's bound on the endpoint — land on the rows alike; the old
``max_concurrency`` is refused at put, naming ``limits.concurrency``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from chukwa_core.hashing import response_source_hash
from cognition_app.models import SourceInvocation
from cognition_app.sources.admission import cluster
from scenarios_app.models import ResponseSource
from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

pytestmark = pytest.mark.django_db(transaction=True)

OK = json.dumps(
    {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {"narration": "The ant waits.", "effects": []},
    }
)


def _scenario(tag: str, **iface_extra: Any) -> tuple[str, str]:
    """ant_on_plate on the scripted model; ``tag`` makes the source (and its Redis keys) the
    test's own. Returns the scenario's hash and its source's."""
    body = fixture_body("ant_on_plate")
    source = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]
    iface = source["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 10000
    iface["params"] = {"temperature": 0, "max_tokens": 200, "stop": f"{tag}-{time.time_ns()}"}
    iface.update(iface_extra)
    return str(scenario_assemble(data=body)["scenario_hash"]), response_source_hash(source)


def _turn(slug: str, scenario: str) -> str:
    """One turn of a new world, run here; returns how it ended."""
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
    (attempt_id,) = turn_attempt_enqueue(slug=slug)["attempt_ids"]
    return turn_attempt_run(attempt_id=attempt_id, owner="test")


def _turns_together(scenario: str, slugs: list[str], llm: ScriptedLLM) -> list[str]:
    """One turn of each new world, each on a thread of its own (a worker's call each), started
    one after another once the previous one's first request reached the model."""
    ids = []
    for slug in slugs:
        world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
        ids.extend(turn_attempt_enqueue(slug=slug)["attempt_ids"])
    ended: dict[str, str] = {}

    def run(attempt_id: str) -> None:
        try:
            ended[attempt_id] = turn_attempt_run(attempt_id=attempt_id, owner="test")
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(attempt_id,)) for attempt_id in ids]
    for n, thread in enumerate(threads):
        thread.start()
        if n + 1 < len(threads):
            assert llm.wait_for_requests(n + 1, timeout=30)
    for thread in threads:
        thread.join(timeout=60)
    return [ended.get(attempt_id, "still running") for attempt_id in ids]


def _generations(slug: str) -> list[SourceInvocation]:
    return list(
        SourceInvocation.objects.filter(world__slug=slug, kind="llm_generation").order_by("seq")
    )


def _first_failing(reply: Reply) -> Any:
    """A router: ``reply`` to the first request, OK to every later one."""
    seen: list[int] = []
    lock = threading.Lock()

    def route(request: dict[str, Any]) -> Reply | str:
        with lock:
            seen.append(1)
            first = len(seen) == 1
        return reply if first else OK

    return route


@override_settings(CHUKWA_LIMIT_WINDOW_SECONDS=2.0)
def test_a_rate_window_counts_every_request_sent_retries_included(
    scripted_llm: ScriptedLLM,
) -> None:
    """2 requests per window (2 s here): a call sent twice (a 503, then its retry) fills it, so
    the next call waits for the window, and its row says so."""
    scenario, _ = _scenario(
        "rpm-retries", limits={"requests_per_minute": 2}, retry={"attempts": 2, "backoff_ms": 0}
    )
    scripted_llm.route(_first_failing(Reply(status=503)))
    assert _turn("retried", scenario) == "committed"
    assert _turn("next", scenario) == "committed"
    first, retry = _generations("retried")
    (after,) = _generations("next")
    assert (first.http_status, retry.retry_of_id) == (503, first.pk)
    assert len(scripted_llm.requests) == 3
    assert (after.started_at - first.started_at).total_seconds() >= 1.7
    assert after.limit_wait == "requests_per_minute" and after.limit_wait_ms >= 1000
    # the retry itself fitted the window: it waited for nothing
    assert (retry.limit_wait, retry.limit_wait_ms) == ("", None)


def test_a_concurrency_slot_is_given_back_while_a_call_waits_to_retry(
    scripted_llm: ScriptedLLM,
) -> None:
    """One slot; the first call's first try fails (503) and it waits 1.5 s to try again: the
    second call takes the slot meanwhile instead of waiting for the whole first call."""
    scenario, _ = _scenario(
        "slot-backoff", limits={"concurrency": 1}, retry={"attempts": 2, "backoff_ms": 1500}
    )
    scripted_llm.route(_first_failing(Reply(status=503)))
    assert _turns_together(scenario, ["backing-off", "meanwhile"], scripted_llm) == [
        "committed",
        "committed",
    ]
    first, retry = _generations("backing-off")
    (other,) = _generations("meanwhile")
    assert first.status == "failed" and retry.retry_of_id == first.pk
    # sent during the first call's backoff: after its failed try, before its retry
    assert first.ended_at <= other.started_at < retry.started_at, (first, other, retry)
    assert (other.started_at - first.ended_at).total_seconds() < 1.0


def _hold_endpoint(monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM) -> tuple[str, list[str]]:
    monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "1")
    llm.route(lambda request: Reply(text=OK, delay_s=1.0))
    return _scenario("endpoint")[0], ["holder", "waiter"]


def _hold_concurrency(monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM) -> tuple[str, list[str]]:
    llm.route(lambda request: Reply(text=OK, delay_s=1.0))
    return _scenario("concurrency", limits={"concurrency": 1})[0], ["holder", "waiter"]


def _fill_requests_window(
    monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM
) -> tuple[str, list[str]]:
    llm.route(lambda request: OK)
    scenario = _scenario("rpm", limits={"requests_per_minute": 1})[0]
    assert _turn("holder", scenario) == "committed"
    return scenario, ["waiter"]


def _fill_tokens_window(monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM) -> tuple[str, list[str]]:
    # max_tokens 6000 against 10000 a window: one call fits, a second must wait (its prompt
    # estimate is far below the 4000 left)
    llm.route(lambda request: OK)
    scenario = _scenario(
        "tpm",
        limits={"tokens_per_minute": 10000},
        params={"temperature": 0, "max_tokens": 6000, "stop": f"tpm-{time.time_ns()}"},
    )[0]
    assert _turn("holder", scenario) == "committed"
    return scenario, ["waiter"]


def _pause_the_source(monkeypatch: pytest.MonkeyPatch, llm: ScriptedLLM) -> tuple[str, list[str]]:
    llm.route(lambda request: OK)
    scenario, source = _scenario("paused", limits={"requests_per_minute": 100})
    cluster.pause_for(source, 1.0)  # as a 429's Retry-After on another worker would
    return scenario, ["waiter"]


@override_settings(CHUKWA_LIMIT_WINDOW_SECONDS=2.0)
@pytest.mark.parametrize(
    ("limit", "arrange"),
    [
        ("concurrency", _hold_concurrency),
        ("endpoint_concurrency", _hold_endpoint),
        ("requests_per_minute", _fill_requests_window),
        ("tokens_per_minute", _fill_tokens_window),
        ("rate_limited", _pause_the_source),
    ],
)
def test_every_kind_of_wait_is_recorded_on_the_try_that_waited(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch, limit: str, arrange: Any
) -> None:
    scenario, slugs = arrange(monkeypatch, scripted_llm)
    if len(slugs) == 2:
        assert _turns_together(scenario, slugs, scripted_llm) == ["committed", "committed"]
    else:
        assert _turn(slugs[0], scenario) == "committed"
    (waited,) = _generations("waiter")
    assert waited.limit_wait == limit, (waited.limit_wait, waited.limit_wait_ms)
    assert waited.limit_wait_ms is not None and waited.limit_wait_ms >= 400
    if "holder" in slugs:
        (held,) = _generations("holder")
        assert (held.limit_wait, held.limit_wait_ms) == ("", None)


def test_the_old_concurrency_spelling_is_refused_naming_the_new_one(
    operator_client: APIClient,
) -> None:
    source = workflow_of(fixture_body("ant_on_plate"), "ant")["nodes"][0]["llm_source_ref"]
    content = source["inline"]
    content["interface"]["max_concurrency"] = 4
    answer = operator_client.post("/api/response-sources/", {"content": content}, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert error["details"]["field"] == "content.interface.max_concurrency"
    assert "content.interface.limits.concurrency" in error["message"]
    assert not ResponseSource.objects.exists()
    # the one spelling is stored
    del content["interface"]["max_concurrency"]
    content["interface"]["limits"] = {"concurrency": 4}
    answer = operator_client.post("/api/response-sources/", {"content": content}, format="json")
    assert answer.status_code == 201, answer.json()
