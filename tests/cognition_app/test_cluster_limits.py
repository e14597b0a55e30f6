"""An LLM source's cluster-wide ``limits`` (docs/workflows.md, "Limits"), enforced through the
real Redis across worker processes: a concurrency limit of 2 holds at the server while 4 worlds
run on two worker groups; a requests-per-minute limit spaces the requests (a window shortened
for the test); a 429 with ``Retry-After`` is waited out and the attempt commits; the slot of a
killed worker comes back within its lease; the wait is recorded on the call's rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from chukwa_core.errors import ChukwaError
from cognition_app.models import SourceInvocation
from cognition_app.sources.admission import cluster as cluster_limits
from cognition_app.sources.admission.base import Held, Wait
from cognition_app.sources.admission.leases import redis_now_ms
from scenarios_app.services import response_source_put, scenario_assemble
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.support.worlds import fixture_body, workflow_of
from worlds_app.models import TurnAttempt
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

PROJECT_DIR = Path(__file__).resolve().parents[2]
API_KEY = "test-secret-key"
OK = json.dumps(
    {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {"narration": "The ant waits.", "effects": []},
    }
)


def _scenario(limits: dict[str, int] | None, **iface_extra: Any) -> str:
    body = fixture_body("ant_on_plate")
    iface = workflow_of(body, "ant")["nodes"][0]["llm_source_ref"]["inline"]["interface"]
    iface["model"] = "scripted-model"
    iface["timeout_ms"] = 30000
    iface["params"] = {"temperature": 0, "max_tokens": 200}
    iface.update(iface_extra)
    if limits is not None:
        iface["limits"] = limits
    return str(scenario_assemble(data=body)["scenario_hash"])


def _source(**interface: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "label": "limited",
        "interface": {
            "name": "llm_chat_completions",
            "model": "m",
            "base_url_env": "CHUKWA_LLM_BASE_URL",
            "schema_delivery": "response_format",
            "timeout_ms": 1000,
            **interface,
        },
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("interface", "field"),
    [
        ({"limits": {}}, "content.interface.limits"),
        ({"limits": {"concurrency": 0}}, "content.interface.limits.concurrency"),
        ({"limits": {"requests_per_minute": "5"}}, "content.interface.limits.requests_per_minute"),
        ({"limits": {"burst": 3}}, "content.interface.limits.burst"),
        ({"limits": {"tokens_per_minute": 1000}}, "content.interface.limits.tokens_per_minute"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(interface: dict[str, Any], field: str) -> None:
    with pytest.raises(ChukwaError) as caught:
        response_source_put(content=_source(**interface))
    assert caught.value.details["field"] == field, caught.value.message


# --- in one process -------------------------------------------------------------------------


def _turns(slug: str, scenario: str, count: int) -> list[TurnAttempt]:
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
    ids = turn_attempt_enqueue(slug=slug, count=count)["attempt_ids"]
    for attempt_id in ids:
        assert turn_attempt_run(attempt_id=attempt_id, owner="test") == "committed"
    return list(TurnAttempt.objects.filter(pk__in=ids).order_by("seq"))


def _generations(slug: str) -> list[SourceInvocation]:
    return list(
        SourceInvocation.objects.filter(world__slug=slug, kind="llm_generation").order_by(
            "started_at"
        )
    )


@pytest.mark.django_db
@override_settings(CHUKWA_LIMIT_WINDOW_SECONDS=2.0)
def test_a_requests_per_minute_limit_spaces_the_requests(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.route(lambda request: OK)
    # 2 requests per window (2 s here; a minute in a deployment)
    _turns("spaced", _scenario({"requests_per_minute": 2}), 4)
    calls = _generations("spaced")
    assert len(calls) == 4
    starts = [c.started_at.timestamp() for c in calls]
    # the third waits until the first leaves the window, the fourth until the second does
    # (rows open just after the window lets a call through: a little slack for that)
    assert starts[2] - starts[0] >= 1.7 and starts[3] - starts[1] >= 1.7, starts
    assert starts[1] - starts[0] < 1.0  # the first two did not wait
    assert (calls[0].limit_wait, calls[0].limit_wait_ms) == ("", None)
    assert calls[2].limit_wait == "requests_per_minute" and calls[2].limit_wait_ms >= 1000


@pytest.mark.django_db
def test_a_429_with_retry_after_is_waited_out_and_the_attempt_commits(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No retry policy: a 429 is the endpoint asking to slow down, not a fault; the source's
    limits make every worker pause for its Retry-After."""
    paused: list[tuple[str, float]] = []
    pause_for = cluster_limits.pause_for

    def spy(source_hash: str, seconds: float) -> None:
        paused.append((source_hash, seconds))
        pause_for(source_hash, seconds)

    monkeypatch.setattr(cluster_limits, "pause_for", spy)
    scripted_llm.script(Reply(status=429, headers=(("Retry-After", "1"),)), OK)
    started = time.monotonic()
    (attempt,) = _turns("throttled", _scenario({"concurrency": 4}), 1)
    assert time.monotonic() - started >= 1.0
    first, second = _generations("throttled")
    assert (first.status, first.failure_class, first.http_status) == ("failed", "transport", 429)
    assert (second.status, second.retry_of_id) == ("succeeded", first.pk)
    assert attempt.status == "committed"
    # the 429 paused the source cluster-wide for its Retry-After (and the 200 did not)
    assert paused == [(first.source_hash, 1.0)]


@pytest.mark.django_db
def test_the_endpoints_rate_headers_pause_the_source() -> None:
    source = "a" * 64
    assert cluster_limits.note_rate_headers(
        source, 200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}
    ) == pytest.approx(1.5)
    pause = cluster_limits.client().pttl(cluster_limits._keys(source)[3])
    assert 1000 < pause <= 1500
    assert cluster_limits.reset_seconds("6m0s") == 360
    assert cluster_limits.reset_seconds("20ms") == pytest.approx(0.02)
    assert (
        cluster_limits.note_rate_headers(source, 200, {"x-ratelimit-remaining-requests": "7"})
        is None
    )


HOLDER = """
import sys, time, django
django.setup()
from cognition_app.sources.admission.cluster import take_capacity
held = take_capacity(sys.argv[1], {"concurrency": 1}, 0)
print("held" if hasattr(held, "give_back") else "not held", flush=True)
time.sleep(600)
"""


@pytest.mark.django_db(transaction=True)
def test_the_slot_of_a_killed_worker_comes_back_within_its_lease() -> None:
    source = "b" * 64
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chukwa_site.settings",
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LIMIT_LEASE_SECONDS": "2",
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, source],
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        # held, and kept past its lease by the holder's renewals
        time.sleep(3)
        conc_key = cluster_limits._keys(source)[0]
        assert cluster_limits.client().zcard(conc_key) == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        started = time.monotonic()
        waited_on = set()
        while not isinstance(
            held := cluster_limits.take_capacity(source, {"concurrency": 1}, 0), Held
        ):
            waited_on.add(held.limit)
            assert time.monotonic() - started < 10
            time.sleep(0.05)
        came_back = time.monotonic() - started
        assert waited_on == {"concurrency"} and came_back <= 2.5, (waited_on, came_back)
        held.give_back()
        assert cluster_limits.client().zcard(conc_key) == 0  # given back after use
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_slot_given_back_leaves_neither_slot_nor_holder_and_the_script_is_made_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = "9" * 64
    conc_key, *_, holders_key = cluster_limits._keys(source)
    cluster_limits.client().delete(*cluster_limits._keys(source))
    redis_type = type(cluster_limits.client())
    register = redis_type.register_script
    made: list[str] = []

    def counting(self: Any, text: str) -> Any:
        made.append(text)
        return register(self, text)

    monkeypatch.setattr(redis_type, "register_script", counting)
    cluster_limits.script.cache_clear()
    for n in range(3):
        token = f"token-{n}"
        held = cluster_limits.take_capacity(source, {"concurrency": 1}, 0, token=token, who=token)
        assert isinstance(held, Held)
        assert cluster_limits.client().hget(holders_key, token) == token.encode()
        other = cluster_limits.take_capacity(source, {"concurrency": 1}, 0, token="other")
        assert isinstance(other, Wait) and other.limit == "concurrency"
        held.give_back()
        assert cluster_limits.client().zcard(conc_key) == 0
        assert cluster_limits.client().hlen(holders_key) == 0
    assert made.count(cluster_limits._ACQUIRE) == 1


# --- across two worker groups ----------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_concurrency_limit_holds_across_two_worker_groups(llm: ScriptedLLM) -> None:
    llm.reset()
    llm.route(lambda request: Reply(text=OK, delay_s=0.4))
    scenario = _scenario({"concurrency": 2})
    queue = f"limits-{os.getpid()}"
    env = {
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": API_KEY,
    }
    slugs = [f"limited-{i}" for i in range(4)]
    # two groups of two processes each: four attempts could run at once, the limit lets two
    with (
        worker_process(f"{queue}-a", env=env, queue=queue, pool="prefork", concurrency=2),
        worker_process(f"{queue}-b", env=env, queue=queue, pool="prefork", concurrency=2),
        routed_to(queue),
    ):
        for slug in slugs:
            world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})
            turn_attempt_enqueue(slug=slug, count=2)
        deadline = time.monotonic() + 90
        attempts = TurnAttempt.objects.filter(world__slug__in=slugs)
        while time.monotonic() < deadline:
            if attempts.filter(status="committed").count() == 8:
                break
            time.sleep(0.2)
    assert attempts.filter(status="committed").count() == 8
    assert llm.max_in_flight == 2  # the limit bound, and it was reached
    # a worker's hostname is "<group>@<host>": both groups ran turns
    owners = set(attempts.values_list("lease_owner", flat=True))
    assert {owner.split("@")[0] for owner in owners} == {f"{queue}-a", f"{queue}-b"}, owners
    waited = SourceInvocation.objects.filter(world__slug__in=slugs, limit_wait="concurrency")
    assert waited.exists() and all(w.limit_wait_ms > 0 for w in waited)


# --- Redis's clock, pauses that only grow -----------------------------------------------------

SKEWED_HOLDER = """
import sys, time, django
django.setup()
real = time.time
time.time = lambda: real() - 3600  # this worker's clock is an hour behind
from cognition_app.sources.admission.cluster import take_capacity
held = take_capacity(sys.argv[1], {"concurrency": 1, "requests_per_minute": 1}, 0)
print("held" if hasattr(held, "give_back") else "not held", flush=True)
time.sleep(600)
"""


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_clock_is_an_hour_off_neither_frees_nor_stretches_a_limit() -> None:
    """Leases and windows are scored on Redis's clock: a slot taken by a worker whose own clock
    is an hour behind still binds the others (scored on its clock, its lease would look an
    hour expired and be swept), and its request counts in the minute's window."""
    source = "c" * 64
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chukwa_site.settings",
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", SKEWED_HOLDER, source],
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        conc_key, requests_key = cluster_limits._keys(source)[:2]
        ((_, expires),) = cluster_limits.client().zrange(conc_key, 0, 0, withscores=True)
        ((_, sent),) = cluster_limits.client().zrange(requests_key, 0, 0, withscores=True)
        redis_now = redis_now_ms()
        assert redis_now - 5000 < sent <= redis_now  # on Redis's clock, not an hour ago
        assert expires > redis_now
        waiting = cluster_limits.take_capacity(source, {"concurrency": 1}, 0)
        assert not isinstance(waiting, Held) and waiting.limit == "concurrency"
        window = cluster_limits.take_capacity(source, {"requests_per_minute": 1}, 0)
        assert not isinstance(window, Held) and window.limit == "requests_per_minute"
    finally:
        holder.kill()
        holder.wait(timeout=10)


@pytest.mark.django_db
def test_a_shorter_pause_never_cuts_a_longer_one() -> None:
    source = "d" * 64
    pause_key = cluster_limits._keys(source)[3]
    cluster_limits.pause_for(source, 30.0)
    cluster_limits.pause_for(source, 0.5)
    assert cluster_limits.client().pttl(pause_key) > 25_000
    # many workers pausing at once: the longest wins, whatever the order they land in
    other = "e" * 64
    threads = [
        threading.Thread(target=cluster_limits.pause_for, args=(other, seconds))
        for seconds in [0.2, 40.0, 0.3, 1.0, 0.1, 2.0] * 5
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cluster_limits.client().pttl(cluster_limits._keys(other)[3]) > 35_000
    # and a longer pause does replace a shorter one
    cluster_limits.pause_for(source, 50.0)
    assert cluster_limits.client().pttl(pause_key) > 45_000
    cluster_limits.client().delete(pause_key, cluster_limits._keys(other)[3])


def test_the_deployments_redis_keys_keep_their_names() -> None:
    """Every Redis key is named by one function (``leases.redis_key``); the names are those a
    running deployment already holds, so an upgrade finds its slots and claims."""
    from cognition_app.sources import reuse
    from cognition_app.sources.admission.leases import redis_key

    db = connection.settings_dict["NAME"]
    assert cluster_limits._keys("a" * 64)[0] == f"chukwa:{db}:limits:{'a' * 64}:concurrency"
    assert cluster_limits._keys("a" * 64)[5] == f"chukwa:{db}:limits:{'a' * 64}:holders"
    assert reuse._claim_name("k" * 64) == f"chukwa:{db}:reuse:{'k' * 64}"
    assert redis_key("endpoint", "URL_ENV", "holders") == f"chukwa:{db}:endpoint:URL_ENV:holders"
