"""The concurrent phase's threads outlive a turn and keep their database connections (no new
connection per subject per turn); closing the pool closes them."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from cognition_app.sources import CancelScope
from worlds_app.services.subject_threads import close_pool, think_concurrently

pytestmark = pytest.mark.django_db(transaction=True)


def _backend(subject: dict[str, Any]) -> tuple[str, int, str]:
    time.sleep(0.05)  # every subject in flight at once: each on its own thread
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    return subject["id"], pid, threading.current_thread().name


def _alive(pids: set[int]) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)])
        (count,) = cursor.fetchone()
    return int(count)


def test_a_second_turn_reuses_the_threads_and_their_connections() -> None:
    subjects = [{"id": f"s{i}"} for i in range(3)]
    first = think_concurrently(subjects, _backend, cancel=CancelScope(), bound=3)
    second = think_concurrently(subjects, _backend, cancel=CancelScope(), bound=3)
    assert [r[0] for r in first] == ["s0", "s1", "s2"]  # results in subject order
    assert len({r[1] for r in first}) == 3  # three connections, one per thread
    assert {r[1] for r in second} == {r[1] for r in first}
    assert {r[2] for r in second} == {r[2] for r in first}
    close_pool()
    pids = {r[1] for r in first}
    deadline = time.monotonic() + 10
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(pids) == 0


def test_a_failing_subject_still_stops_the_turn_and_leaves_the_threads_usable() -> None:
    def think(subject: dict[str, Any]) -> str:
        if subject["id"] == "bad":
            raise RuntimeError("boom")
        return subject["id"]

    with pytest.raises(RuntimeError, match="boom"):
        think_concurrently([{"id": "bad"}, {"id": "ok"}], think, cancel=CancelScope(), bound=2)
    assert think_concurrently([{"id": "a"}, {"id": "b"}], think, cancel=CancelScope()) == ["a", "b"]
