"""A task's quick commits send their measuring together (``dispatch.measures_deferred``): one
message for several turns, never none for a committed turn."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from worlds_app.services import dispatch
from worlds_app.services.dispatch import measure_on_commit, measures_deferred

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, list[str]]]:
    messages: list[tuple[Any, list[str]]] = []
    monkeypatch.setattr(dispatch, "experiment_metrics", lambda experiment_id: [f"m{experiment_id}"])
    monkeypatch.setattr(dispatch, "send_measure", lambda w, m: messages.append((w, m)))
    return messages


def test_outside_a_task_each_commit_sends_its_own(sent: list[Any]) -> None:
    measure_on_commit(1, 7, quick=True)
    measure_on_commit(1, 7, quick=True)
    assert sent == [(1, ["m7"]), (1, ["m7"])]


def test_quick_commits_wait_for_the_end_of_the_task(sent: list[Any]) -> None:
    with measures_deferred():
        measure_on_commit(1, 7, quick=True)
        measure_on_commit(1, 7, quick=True)
        measure_on_commit(2, 7, quick=True)
        measure_on_commit(5, 8, quick=True)
        assert sent == []
    assert sent == [([1, 2], ["m7"]), (5, ["m8"])]  # each world once, by experiment


def test_a_slower_commit_sends_what_waits_with_its_own(sent: list[Any]) -> None:
    with measures_deferred():
        measure_on_commit(1, 7, quick=True)
        measure_on_commit(3, 7, quick=False)
        assert sent == [([1, 3], ["m7"])]
        measure_on_commit(3, 7, quick=True)
        assert len(sent) == 1
    assert sent == [([1, 3], ["m7"]), (3, ["m7"])]


def test_what_waits_longer_than_the_bound_goes_at_the_next_commit(
    sent: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "MEASURE_DEFER_SECONDS", 0.0)
    with measures_deferred():
        measure_on_commit(1, 7, quick=True)
        assert sent == [(1, ["m7"])]


def test_a_task_that_fails_still_sends_what_its_commits_left(sent: list[Any]) -> None:
    with pytest.raises(RuntimeError), measures_deferred():
        measure_on_commit(1, 7, quick=True)
        raise RuntimeError("the task fails after a commit")
    assert sent == [(1, ["m7"])]


def test_a_rolled_back_transaction_leaves_nothing_to_send(sent: list[Any]) -> None:
    with measures_deferred():
        with pytest.raises(RuntimeError), transaction.atomic():
            measure_on_commit(1, 7, quick=False)
            raise RuntimeError("rolled back")
        measure_on_commit(2, 7, quick=True)
    assert sent == [(2, ["m7"])]
