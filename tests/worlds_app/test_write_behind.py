"""Finishing a call's rows on the writer thread (cognition_app/recording/write_behind.py): the
subject does not wait for the round trip, the commit and the failure do, and a finishing write
the database refuses fails the attempt with every row it opened finished.

Transactional: the writer thread writes on its own connection, which sees only committed rows
(inside a test's transaction the rows are written in it, at once)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import DatabaseError

from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.recording import write_behind
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, run_turn
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run
from worlds_app.services import turn_commit as commit_module

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_CALL = {
    "kind": "tool_call",
    "tool_call": {"name": "buy_candy", "arguments": {"item": "candy_bar"}},
    "patch": None,
}
FINAL = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "Bob buys a candy bar.",
        "effects": [{"op": "set_entity_state", "entity_id": "bob", "state": "eating"}],
    },
}


class _Spy:
    """Counts the jobs handed to the writer and its writes, by thread; can slow or refuse
    them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[str] = []
        self.jobs = 0
        self.delay = 0.0
        self.refuse = False
        original = write_behind.trace_batch
        submit = write_behind.TraceWriter.submit

        def counted(writer: Any, *args: Any) -> None:
            self.jobs += 1
            submit(writer, *args)

        monkeypatch.setattr(write_behind.TraceWriter, "submit", counted)

        def trace_batch(statements: Any) -> Any:
            self.threads.append(threading.current_thread().name)
            if self.delay:
                time.sleep(self.delay)
            if self.refuse:
                raise DatabaseError("refused by the test")
            return original(statements)

        monkeypatch.setattr(write_behind, "trace_batch", trace_batch)


def _rows(attempt: TurnAttempt) -> list[tuple[str, str, str]]:
    return list(
        SourceInvocation.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("kind", "status", "failure_class")
    )


def test_a_turns_calls_are_finished_by_the_writer_thread_before_the_commit(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    spy.delay = 0.3  # the commit must wait for these, not find them running
    create_world("park", "behind")
    scripted_llm.script(TOOL_CALL, FINAL)
    attempt = run_turn("behind")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    rows = _rows(attempt)
    assert [status for _kind, status, _failure in rows] == ["succeeded"] * len(rows)
    generations = [r for r in rows if r[0] == "llm_generation"]
    assert len(generations) == 2 and ("model_elected_tool", "succeeded", "") in rows
    # every call (ambient sources, the two generations, the tool; the backend's conformance
    # check aside) was handed over, not written by the subject as it happened; what queued up
    # while a write was slow went in one round trip (by the thread, or by the commit waiting)
    assert spy.jobs == len([r for r in rows if r[0] != "conformance_check"]) == 6
    assert "chukwa-trace-writer" in spy.threads
    assert len(spy.threads) < spy.jobs
    calls = LlmCall.objects.filter(invocation__attempt=attempt)
    assert {c.status for c in calls} == {"succeeded"}
    assert all(c.raw_text and c.finish_reason for c in calls)


def test_a_finishing_write_the_database_refuses_fails_the_attempt_with_every_row_finished(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    spy.refuse = True
    create_world("park", "refused")
    scripted_llm.script(TOOL_CALL, FINAL)
    attempt = run_turn("refused")

    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "traces"
    assert "could not be written" in attempt.failure_reason
    # the rows the writer could not finish were closed by the failure, none left running
    rows = [r for r in _rows(attempt) if r[0] != "conformance_check"]
    assert len(rows) == spy.jobs == 6
    assert set(rows) == {(kind, "failed", "attempt_ended") for kind, _s, _f in rows}
    assert not LlmCall.objects.filter(invocation__attempt=attempt, status="running").exists()
    # each refused job was tried again alone (after a reconnect), then given up
    assert len(spy.threads) >= spy.jobs * 2


def _untaken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread never has its turn (the subject holds the interpreter until it
    waits): whatever is submitted stays for the commit, or the failure, to write."""
    monkeypatch.setattr(write_behind._Writer, "put", lambda _writer, _job: None)


def test_what_the_thread_has_not_taken_goes_in_the_commits_own_transaction(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    _untaken(monkeypatch)
    sent: list[list[str]] = []
    send_batch = commit_module.send_batch

    def commit_batch(statements: Any) -> Any:
        sent.append([sql for sql, _params in statements])
        return send_batch(statements)

    monkeypatch.setattr(commit_module, "send_batch", commit_batch)
    create_world("park", "held")
    scripted_llm.script(TOOL_CALL, FINAL)
    attempt = run_turn("held")

    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    rows = [r for r in _rows(attempt) if r[0] != "conformance_check"]
    assert len(rows) == spy.jobs == 6
    assert {status for _kind, status, _failure in rows} == {"succeeded"}
    assert spy.threads == []  # no round trip of their own: all went with the commit
    (commit,) = sent
    finishing = [sql for sql in commit if "cognition_app_sourceinvocation" in sql]
    assert len(finishing) >= 6 and commit[0].startswith("WITH w AS")  # the checks lock first
    assert all(c.raw_text for c in LlmCall.objects.filter(invocation__attempt=attempt))


def test_a_commit_that_fails_still_leaves_the_calls_it_held_succeeded(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit is refused: the finishing rows it held are written on their own before the
    failure closes what still runs, so the calls that succeeded are not made failures."""
    spy = _Spy(monkeypatch)
    _untaken(monkeypatch)

    def refused(_statements: Any) -> Any:
        raise DatabaseError("commit refused by the test")

    monkeypatch.setattr(commit_module, "send_batch", refused)
    create_world("park", "held_refused")
    scripted_llm.script(FINAL)
    (attempt_id,) = turn_attempt_enqueue(slug="held_refused")["attempt_ids"]
    with pytest.raises(DatabaseError):
        turn_attempt_run(attempt_id=attempt_id, owner="test")
    attempt = TurnAttempt.objects.get(pk=attempt_id)

    assert (attempt.status, attempt.failure_step) == (AttemptStatus.FAILED, "internal_error")
    rows = [r for r in _rows(attempt) if r[0] != "conformance_check"]
    assert len(rows) == spy.jobs > 1
    assert {status for _kind, status, _failure in rows} == {"succeeded"}
    assert spy.threads == [threading.current_thread().name]  # in one batch, after the refusal


def test_a_failed_commit_whose_held_rows_cannot_be_written_either_is_a_traces_failure(
    scripted_llm: ScriptedLLM, toy_sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    _untaken(monkeypatch)
    spy.refuse = True
    monkeypatch.setattr(
        commit_module, "send_batch", lambda _s: (_ for _ in ()).throw(DatabaseError("no"))
    )
    create_world("park", "held_lost")
    scripted_llm.script(FINAL)
    attempt = run_turn("held_lost")

    assert (attempt.status, attempt.failure_step) == (AttemptStatus.FAILED, "traces")
    assert "could not be written" in attempt.failure_reason
    rows = [r for r in _rows(attempt) if r[0] != "conformance_check"]
    assert set(rows) == {(kind, "failed", "attempt_ended") for kind, _s, _f in rows}


def test_what_a_commit_held_is_written_if_its_wait_is_interrupted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A soft time limit (an exception raised inside the wait for the thread) must not leave
    the jobs the commit took unwritten and counted pending: the failure's drain would wait
    for them for ever."""
    _untaken(monkeypatch)
    writer = write_behind.TraceWriter()
    done: list[str] = []
    writer.submit([("SELECT 1", [])], lambda: done.append("after"))

    def interrupted(_writer: Any, _mine: int) -> str:
        raise TimeoutError("the soft time limit, say")

    with monkeypatch.context() as patch:
        patch.setattr(write_behind.TraceWriter, "_wait", interrupted)
        with pytest.raises(TimeoutError), writer.held():
            pytest.fail("the block does not run when the wait is interrupted")
    assert done == ["after"]
    assert writer.drain() == ""  # nothing left pending: returns at once


def test_the_writer_thread_survives_a_refused_job_and_a_fork_gets_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer = write_behind.TraceWriter()
    done: list[str] = []
    monkeypatch.setattr(
        write_behind, "trace_batch", lambda _s: (_ for _ in ()).throw(DatabaseError("no"))
    )
    writer.submit([("SELECT 1", [])], lambda: done.append("after"))
    assert "could not be written" in writer.drain()
    assert done == ["after"]  # called even when the write failed (a budget's reservation)
    monkeypatch.undo()
    second = write_behind.TraceWriter()
    second.submit([("SELECT 1", [])], None)
    assert second.drain() == ""
    # a forked child has no thread of its parent's: it starts its own
    current = write_behind._writer()
    write_behind._forget_writer_in_child()
    assert write_behind._writer() is not current
    current.stop()


def test_jobs_the_busy_thread_has_not_taken_are_written_by_whoever_waits_for_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread is busy with another attempt's write: ``drain`` does not wait for it to come
    round, it writes this attempt's jobs on its own connection."""
    release = threading.Event()
    threads: list[str] = []
    original = write_behind.trace_batch

    def trace_batch(statements: Any) -> Any:
        threads.append(threading.current_thread().name)
        if threading.current_thread().name == "chukwa-trace-writer":
            assert release.wait(timeout=10)
        return original(statements)

    monkeypatch.setattr(write_behind, "trace_batch", trace_batch)
    busy, mine = write_behind.TraceWriter(), write_behind.TraceWriter()
    busy.submit([("SELECT 1", [])], None)
    deadline = time.monotonic() + 5
    while not threads and time.monotonic() < deadline:
        time.sleep(0.01)  # the thread has taken the busy job and is stuck in it
    after: list[str] = []
    mine.submit([("SELECT 2", [])], lambda: after.append(threading.current_thread().name))
    mine.submit([("SELECT 3", [])], None)
    assert mine.drain() == ""
    assert after == [threading.current_thread().name]
    assert threads == ["chukwa-trace-writer", threading.current_thread().name]  # one batch
    release.set()
    assert busy.drain() == ""
