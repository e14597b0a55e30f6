"""Interactive first at the process's slots and at the cluster limits (docs/operations.md,
"Interactive first"; the endpoint's slots are shown on real workers in
tests/worlds_app/test_interactive_first.py): while an interactive call waits for a limit, a
call of another lane does not take the capacity it frees, and each wait says what it is for."""

from __future__ import annotations

import threading

import pytest

from cognition_app.sources.admission import cluster as cluster_limits
from cognition_app.sources.admission.base import Held, Wait
from cognition_app.sources.admission.priority import INTERACTIVE_FIRST, Slots


def test_a_process_slot_freed_goes_to_the_waiting_interactive_call() -> None:
    slots = Slots(1)
    assert slots.take("judge-1", "world w's judge plausible, turn 1", False, 0.01)
    got: list[bool] = []
    waiting = threading.Thread(
        target=lambda: got.append(slots.take("turn", "world v's turn 2", True, 10))
    )
    waiting.start()
    # the interactive call waits; a judge asking meanwhile does not get the slot
    assert not slots.take("judge-2", "world w's judge plausible, turn 2", False, 0.05)
    slots.give_back("judge-1")
    waiting.join(10)
    assert got == [True]  # served next
    assert slots.holders == {"turn": "world v's turn 2"}
    # the slot held by the turn: the judge still waits, naming it
    assert not slots.take("judge-2", "world w's judge plausible, turn 2", False, 0.05)
    assert slots.waiting_for(False) == "held by world v's turn 2"
    slots.give_back("turn")
    assert slots.take("judge-2", "world w's judge plausible, turn 2", False, 0.05)


def test_a_free_process_slot_is_not_taken_while_an_interactive_call_waits_for_it() -> None:
    slots = Slots(1)
    assert slots.take("judge-1", "a judge", False, 0.01)
    taken = threading.Event()

    def interactive() -> None:
        if slots.take("turn", "a turn", True, 10):
            taken.set()

    thread = threading.Thread(target=interactive)
    thread.start()
    judges = [
        threading.Thread(target=slots.take, args=(f"judge-{i}", "a judge", False, 0.5))
        for i in range(2, 5)
    ]
    for judge in judges:
        judge.start()
    slots.give_back("judge-1")
    thread.join(10)
    for judge in judges:
        judge.join(10)
    assert taken.is_set() and "turn" in slots.holders
    assert set(slots.holders) == {"turn"}  # no judge took it while the turn waited


@pytest.mark.django_db
def test_the_cluster_limits_serve_a_waiting_interactive_call_first() -> None:
    source = "f" * 64
    limits = {"concurrency": 1}
    judge = cluster_limits.take_capacity(
        source,
        limits,
        0,
        token="judge-1",
        who="experiment world e--a--1's judge p, turn 1",
        interactive=False,
    )
    assert isinstance(judge, Held)
    turn = cluster_limits.take_capacity(
        source, limits, 0, token="turn", who="world w's turn 3", interactive=True
    )
    assert isinstance(turn, Wait) and turn.limit == "concurrency"
    assert turn.reason == (
        "the source's concurrency slots: held by experiment world e--a--1's judge p, turn 1"
    )
    judge.give_back()
    # free, but an interactive call waits for it: another judge waits too, saying why
    second = cluster_limits.take_capacity(
        source, limits, 0, token="judge-2", who="a judge", interactive=False
    )
    assert isinstance(second, Wait) and second.reason.endswith(INTERACTIVE_FIRST)
    served = cluster_limits.take_capacity(
        source, limits, 0, token="turn", who="world w's turn 3", interactive=True
    )
    assert isinstance(served, Held)
    served.give_back()
    # nobody interactive waits any more: the judge takes it
    third = cluster_limits.take_capacity(
        source, limits, 0, token="judge-2", who="a judge", interactive=False
    )
    assert isinstance(third, Held)
    third.give_back()
