"""Without a budget, a generation's rows are opened before its limits are passed
(``cognition_app.sources.llm``, ``_Send._opened_then_admitted``): the opening's round trip is
not spent holding one of the model's slots. Over the real Redis and PostgreSQL and the scripted
model: while a call waits for the source's one slot its rows stand open and nothing has been
sent; finished, they read as rows opened after the wait (started when sent, the wait on
``limit_wait_ms``, not in ``duration_ms``), and its ``timeout_ms`` is counted from then, so a
wait longer than the deadline does not time it out; a call stopped while it waits is finished
``cancelled``, unsent, spending a known zero."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from cognition_app.budgets import BudgetLedger
from cognition_app.failures import SourceFailure
from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.sources.admission import cluster as cluster_limits
from cognition_app.sources.cancel import CancelScope
from cognition_app.sources.context import EXPERIMENT, CallContext
from cognition_app.sources.llm import invoke_llm
from scenarios_app.services import response_source_put
from tests.cognition_app.test_batches import SOURCE as BATCHED
from tests.support.fixtures import scripted_llm  # noqa: F401  (fixture import)
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.worlds_app.test_experiment_budget import _design, _scenario
from worlds_app.models import BudgetReservation, ExperimentLedger
from worlds_app.services import budget_settler
from worlds_app.services.experiment_budget import budget_ledger
from worlds_app.services.experiments import experiment_create

pytestmark = pytest.mark.django_db(transaction=True)

ONE = {"concurrency": 1}


def _one_slot_source(timeout_ms: int | None = None) -> Iterator[str]:
    """A source with one slot over the cluster and a ``max_tokens`` (and ``timeout_ms`` if
    given), its Redis keys the test's own."""
    content = copy.deepcopy(BATCHED)
    content["label"] = f"one-slot-{time.time_ns()}"
    del content["interface"]["batch"]
    content["interface"]["limits"] = ONE
    content["interface"]["params"] = {"max_tokens": 50}
    if timeout_ms is not None:
        content["interface"]["timeout_ms"] = timeout_ms
    source_hash = str(response_source_put(content=content)["hash"])
    keys = [*cluster_limits._keys(source_hash), *cluster_limits._wake_keys(source_hash)]
    cluster_limits.client().delete(*keys)
    yield source_hash
    cluster_limits.client().delete(*keys)


@pytest.fixture
def source() -> Iterator[str]:
    yield from _one_slot_source()


@pytest.fixture
def short_deadline_source() -> Iterator[str]:
    """Its ``timeout_ms`` 1.5 s."""
    yield from _one_slot_source(1500)


def _call_on_a_thread(
    source: str, cancel: CancelScope | None = None, budget: BudgetLedger | None = None
) -> tuple[threading.Thread, list[Any]]:
    """``invoke_llm`` on a thread of its own (a subject's); its generation or its failure."""
    ended: list[Any] = []
    seq = itertools.count()
    ctx = CallContext(
        attempt_id=None,
        world_id=None,
        world_slug="w",
        attempted_turn=1,
        next_seq=lambda: next(seq),
        lane=EXPERIMENT,
        cancel=cancel,
        budget=budget,
    )

    def call() -> None:
        try:
            ended.append(
                invoke_llm(
                    source_hash=source,
                    messages=[{"role": "user", "content": "rate it"}],
                    ctx=ctx,
                    response_schema=None,
                )
            )
        except SourceFailure as exc:
            ended.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=call)
    thread.start()
    return thread, ended


def _hold(source: str, holder: str = "holder") -> Any:
    """The source's one slot, taken by another caller."""
    held = cluster_limits.take_capacity(source, ONE, 0, token=holder, who=holder)
    assert isinstance(held, cluster_limits.Held)
    return held


def _open_row(source: str) -> SourceInvocation:
    """The call's invocation row, once it stands open (``running``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = SourceInvocation.objects.filter(source_hash=source, status="running").first()
        if row is not None:
            return row
        time.sleep(0.02)
    raise AssertionError("the call's rows were never opened while it waited")


def test_a_call_waiting_for_a_slot_has_its_rows_open_and_nothing_sent(
    scripted_llm: ScriptedLLM,  # noqa: F811
    source: str,
) -> None:
    scripted_llm.script(Reply(text="fine"))
    holder = _hold(source)
    thread, ended = _call_on_a_thread(source)
    opened = _open_row(source)
    assert LlmCall.objects.get(invocation=opened).status == "running"
    time.sleep(1.0)  # it waits for the slot, its rows open
    assert thread.is_alive() and len(scripted_llm.requests) == 0
    holder.give_back()
    thread.join(30)
    assert not thread.is_alive() and ended and ended[0].text == "fine"
    assert len(scripted_llm.requests) == 1

    finished = SourceInvocation.objects.get(pk=opened.pk)
    call = LlmCall.objects.get(invocation=finished)
    assert (finished.status, call.status) == ("succeeded", "succeeded")
    assert finished.limit_wait == "concurrency"
    assert finished.limit_wait_ms is not None and finished.limit_wait_ms >= 900
    # started when sent, after the wait; the wait is not in its duration
    assert finished.started_at - opened.started_at >= timedelta(
        milliseconds=finished.limit_wait_ms - 1
    )
    assert call.started_at == finished.started_at
    assert finished.duration_ms is not None and finished.duration_ms < finished.limit_wait_ms
    assert finished.ended_at is not None and finished.ended_at >= finished.started_at


def test_a_call_stopped_while_it_waits_is_finished_cancelled_and_unsent(
    scripted_llm: ScriptedLLM,  # noqa: F811
    source: str,
) -> None:
    scripted_llm.script(Reply(text="never asked"))
    holder = _hold(source)
    cancel = CancelScope()
    thread, ended = _call_on_a_thread(source, cancel)
    opened = _open_row(source)
    cancel.cancel("another subject failed")
    thread.join(30)
    assert not thread.is_alive()
    holder.give_back()
    (failure,) = ended
    assert isinstance(failure, SourceFailure) and failure.failure_class == "cancelled"
    assert failure.invocation_id == opened.pk
    assert len(scripted_llm.requests) == 0

    finished = SourceInvocation.objects.get(pk=opened.pk)
    call = LlmCall.objects.get(invocation=finished)
    assert (finished.status, finished.failure_class) == ("cancelled", "cancelled")
    assert "not started: another subject failed" in finished.failure_message
    assert (call.status, call.usage_source) == ("cancelled", "not_sent")
    assert (call.prompt_tokens, call.completion_tokens, call.cost) == (0, 0, Decimal(0))
    assert call.ended_at is not None
    # its slot is free: nothing was left held
    _hold(source, "after").give_back()


def test_a_call_s_deadline_starts_when_it_is_sent_not_while_it_waits(
    scripted_llm: ScriptedLLM,  # noqa: F811
    short_deadline_source: str,
) -> None:
    """Its wait (3 s) is twice its ``timeout_ms`` (1.5 s) and its reply takes 0.3 s: it
    succeeds only if the deadline starts after the wait, whatever the machine's load (the
    margin is five times the reply)."""
    scripted_llm.script(Reply(text="in time", delay_s=0.3))
    holder = _hold(short_deadline_source)
    thread, ended = _call_on_a_thread(short_deadline_source)
    opened = _open_row(short_deadline_source)
    time.sleep(3.0)
    holder.give_back()
    thread.join(30)
    assert not thread.is_alive()
    (generation,) = ended
    assert not isinstance(generation, SourceFailure), generation
    assert generation.text == "in time"
    finished = SourceInvocation.objects.get(pk=opened.pk)
    assert finished.status == "succeeded"
    assert finished.limit_wait_ms is not None and finished.limit_wait_ms > 1500
    assert finished.duration_ms is not None and finished.duration_ms < 1500


def test_a_budgeted_call_reserves_after_its_wait_under_its_rows_id(
    scripted_llm: ScriptedLLM,  # noqa: F811
    source: str,
) -> None:
    """Under an experiment's budget the rows are opened first too; the reservation, taken
    once the slot is held (none sits idle while the call waits), takes the call row's id, by
    which the settle and the reaper find it; settled, the ledger counts what the row says."""
    experiment = experiment_create(
        data=_design("budgeted", _scenario(), budget={"max_tokens_total": 100_000})
    )
    ledger = ExperimentLedger.objects.get(experiment_id=experiment.pk)
    usage = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
    scripted_llm.script(Reply(text="fine", usage=usage, delay_s=1.0))
    holder = _hold(source)
    thread, ended = _call_on_a_thread(source, budget=budget_ledger(None, experiment.pk))
    opened = _open_row(source)
    call = LlmCall.objects.get(invocation=opened)
    time.sleep(0.5)
    assert not BudgetReservation.objects.exists()  # nothing reserved while it waits
    holder.give_back()
    deadline = time.monotonic() + 30
    while not BudgetReservation.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    (reservation,) = BudgetReservation.objects.all()  # while the reply is streamed
    assert reservation.pk == call.pk
    assert reservation.experiment_id == experiment.pk
    thread.join(30)
    assert not thread.is_alive() and ended and ended[0].text == "fine"
    budget_settler.flush()
    assert not BudgetReservation.objects.exists()
    ledger.refresh_from_db()
    assert (ledger.reserved_tokens, ledger.spent_tokens) == (0, 19)
    finished = LlmCall.objects.get(pk=call.pk)
    assert (finished.status, finished.prompt_tokens, finished.completion_tokens) == (
        "succeeded",
        12,
        7,
    )
