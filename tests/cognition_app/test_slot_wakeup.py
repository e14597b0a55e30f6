"""A concurrency slot given back is announced (``cognition_app.sources.admission.cluster``): the
call waiting for it is woken at once through the real Redis, not at its next step; an
interactive call waiting is woken before the others; with nobody waiting nothing is announced,
and never more wake-ups wait than calls. A call gives its slot back as soon as its reply is
read, before the reply is judged and its rows written."""

from __future__ import annotations

import copy
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cognition_app.sources.admission import base
from cognition_app.sources.admission import cluster as cluster_limits
from cognition_app.sources.admission.base import CallRequest, Held, LimitWaits, Wait, take_waiting
from cognition_app.sources.context import EXPERIMENT, CallContext
from cognition_app.sources.generation import Judgement
from cognition_app.sources.llm import invoke_llm
from scenarios_app.services import response_source_put
from tests.cognition_app.test_batches import SOURCE as BATCHED
from tests.support.fixtures import scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import Reply, ScriptedLLM

SOURCE = "7" * 64
ONE = {"concurrency": 1}


@pytest.fixture(autouse=True)
def clean_keys() -> Iterator[None]:
    keys = [*cluster_limits._keys(SOURCE), *cluster_limits._wake_keys(SOURCE)]
    cluster_limits.client().delete(*keys)
    yield
    cluster_limits.client().delete(*keys)


def _lengths() -> tuple[int, int]:
    """Wake-ups queued: (interactive calls', the others')."""
    _, interactive, others = cluster_limits._wake_keys(SOURCE)
    redis = cluster_limits.client()
    return int(redis.llen(interactive)), int(redis.llen(others))


def _take(token: str, *, interactive: bool = False, limits: Any = ONE) -> Held | Wait:
    outcome = cluster_limits.take_capacity(
        SOURCE, limits, 0, token=token, who=token, interactive=interactive
    )
    assert not isinstance(outcome, cluster_limits.Refused)
    return outcome


def test_a_slot_given_back_wakes_the_call_waiting_for_it() -> None:
    held = _take("holder")
    waiting = _take("waiter")
    assert isinstance(held, Held) and isinstance(waiting, Wait)
    assert waiting.limit == "concurrency" and waiting.wake is not None
    woken: list[float] = []

    def wait() -> None:
        started = time.monotonic()
        waiting.wake(60.0)  # type: ignore[misc]  # checked above
        woken.append(time.monotonic() - started)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)  # the waiter is blocked on its announcement
    held.give_back()
    thread.join(30)
    # woken by the give-back, not by its 60 s running out
    assert not thread.is_alive() and woken and woken[0] < 30
    assert _lengths() == (0, 0)  # the one wake-up was taken
    again = _take("waiter")
    assert isinstance(again, Held)
    # holding its slot, it no longer counts as waiting: its give-back announces nothing
    waiting_set = cluster_limits._wake_keys(SOURCE)[0]
    assert cluster_limits.client().zcard(waiting_set) == 0
    again.give_back()
    assert _lengths() == (0, 0)


def test_with_nobody_waiting_a_slot_given_back_announces_nothing() -> None:
    for n in range(3):
        held = _take(f"t{n}")
        assert isinstance(held, Held)
        held.give_back()
    assert _lengths() == (0, 0)


def test_wake_ups_never_outnumber_the_calls_waiting() -> None:
    two = {"concurrency": 2}
    first, second = _take("a", limits=two), _take("b", limits=two)
    assert isinstance(first, Held) and isinstance(second, Held)
    assert isinstance(_take("waiter", limits=two), Wait)
    first.give_back()
    second.give_back()
    assert _lengths() == (0, 1)


def test_an_interactive_call_waiting_is_woken_before_the_others() -> None:
    held = _take("judge-1")
    assert isinstance(held, Held)
    judge = _take("judge-2")
    turn = _take("turn", interactive=True)
    assert isinstance(judge, Wait) and isinstance(turn, Wait)
    assert turn.wake is not None and judge.wake is not None
    held.give_back()
    assert _lengths() == (1, 0)  # the interactive call's list: the judge sleeps on
    turn.wake(1.0)  # returns at once: its wake-up is there
    assert _lengths() == (0, 0)
    served = _take("turn", interactive=True)
    assert isinstance(served, Held)
    served.give_back()  # nobody interactive waits now: the judge is woken
    assert _lengths() == (0, 1)


def _request(told: list[str]) -> CallRequest:
    return CallRequest(
        source_hash=SOURCE,
        interface={"limits": ONE},
        ctx=CallContext(
            attempt_id=None,
            world_id=None,
            world_slug="w",
            attempted_turn=1,
            next_seq=lambda: 1,
            lane=EXPERIMENT,
            on_wait=told.append,
        ),
        what="call",
        prompt_tokens=10,
        max_completion=None,
        price=None,
        call_id=uuid.uuid4(),
    )


def _waiting(told: list[str], waits: LimitWaits) -> tuple[threading.Thread, list[object]]:
    """A call waiting in the wait loop, on its own thread, for the source's one slot."""
    outcome: list[object] = []
    thread = threading.Thread(
        target=lambda: outcome.append(take_waiting(cluster_limits.LIMIT, _request(told), waits))
    )
    thread.start()
    return thread, outcome


@pytest.mark.django_db
def test_the_wait_loop_asks_again_when_woken_not_at_its_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base, "WAKE_STEP_SECONDS", 60.0)  # polled, the wait would last a minute
    held = _take("holder")
    assert isinstance(held, Held)
    told: list[str] = []
    waits = LimitWaits()
    thread, outcome = _waiting(told, waits)
    deadline = time.monotonic() + 20
    while not told and time.monotonic() < deadline:  # told once it has lasted 0.2 s
        time.sleep(0.02)
    held.give_back()
    thread.join(30)
    assert not thread.is_alive()
    assert isinstance(outcome[0], Held)
    assert 0 < waits.seconds["concurrency"] < 30
    assert told == ["the source's concurrency slots: held by holder", ""]
    outcome[0].give_back()


@pytest.mark.django_db
def test_a_wait_shorter_than_the_telling_threshold_is_never_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base, "TELL_AFTER_SECONDS", 60.0)
    held = _take("holder")
    assert isinstance(held, Held)
    told: list[str] = []
    waits = LimitWaits()
    thread, outcome = _waiting(told, waits)
    time.sleep(0.5)  # it waits, untold
    assert thread.is_alive() and told == []
    held.give_back()
    thread.join(30)
    assert isinstance(outcome[0], Held) and waits.seconds["concurrency"] > 0.4
    assert told == []  # the attempt's row was never written for it
    outcome[0].give_back()


@pytest.mark.django_db
def test_a_call_gives_its_slot_back_once_its_reply_is_read_before_judging_it(
    scripted_llm: ScriptedLLM,  # noqa: F811
) -> None:
    content = copy.deepcopy(BATCHED)
    content["label"] = "limited-judge"
    del content["interface"]["batch"]
    content["interface"]["limits"] = ONE
    source = response_source_put(content=content)["hash"]
    keys = [*cluster_limits._keys(source), *cluster_limits._wake_keys(source)]
    cluster_limits.client().delete(*keys)
    scripted_llm.script(Reply(text="fine"))
    during: list[object] = []

    def judge(text: str) -> Judgement:
        # another call asks for the source's only slot while this reply is judged
        during.append(cluster_limits.take_capacity(source, ONE, 0, token="next", who="next"))
        return Judgement(output_kind="text", output=text)

    seq = itertools.count()
    ctx = CallContext(
        attempt_id=None, world_id=None, world_slug="", attempted_turn=0, next_seq=lambda: next(seq)
    )
    generation = invoke_llm(
        source_hash=source,
        messages=[{"role": "user", "content": "rate it"}],
        ctx=ctx,
        response_schema=None,
        judge=judge,
    )
    assert generation.text == "fine"
    assert len(during) == 1 and isinstance(during[0], Held)
    during[0].give_back()
    assert cluster_limits.client().zcard(keys[0]) == 0
    cluster_limits.client().delete(*keys)


def test_a_wake_up_redis_refuses_falls_back_to_asking_again_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from redis.exceptions import ResponseError

    def refused(*args: Any, **kwargs: Any) -> None:
        raise ResponseError("timeout is not an integer or out of range")

    monkeypatch.setattr(cluster_limits, "_wake_warned_at", None)
    monkeypatch.setattr(cluster_limits.client(), "blpop", refused)
    with caplog.at_level("WARNING", logger=cluster_limits.__name__):
        for _ in range(3):
            started = time.monotonic()
            cluster_limits._await_slot("any", 0.2)
            assert time.monotonic() - started >= base.WAIT_STEP_SECONDS  # a step, no spin
    warned = [r.getMessage() for r in caplog.records if "wake-up" in r.getMessage()]
    assert len(warned) == 1  # once, not at every ask
    assert "ResponseError: timeout is not an integer" in warned[0]
