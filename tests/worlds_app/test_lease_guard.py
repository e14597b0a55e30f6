"""A source call opens its rows only while its attempt still runs under the worker's lease:
once the reaper has interrupted the attempt — the worker stalled past its lease,
say — the next call of the turn is neither opened nor sent, so no row of an interrupted attempt
can be left ``running`` and nothing more is spent on it."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from tests.cognition_app.test_park import subject_of
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, fixture_body
from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_enqueue, turn_attempt_reap, turn_attempt_run

pytestmark = pytest.mark.django_db(transaction=True)


def _two_ants(execution: str) -> dict[str, Any]:
    body = fixture_body("ant_on_plate")
    workflow = body["cognition_profiles"]["ant"]["inline"]["workflow"]["inline"]
    workflow["execution"] = execution
    # One generation at a time: the second ant's waits for the first one's slot.
    workflow["nodes"][0]["llm_source_ref"]["inline"]["interface"]["limits"] = {"concurrency": 1}
    ant = next(e for e in body["entities"] if e["inline"]["id"] == "ant")
    second = copy.deepcopy(ant)
    second["inline"]["id"] = "ant_b"
    second["inline"]["name"] = "Second ant"
    body["entities"].insert(1, second)
    return body


def _waits(subject: str) -> dict[str, Any]:
    return {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {
            "narration": f"The {subject} waits.",
            "effects": [{"op": "set_entity_state", "entity_id": subject, "state": "waiting"}],
        },
    }


@pytest.mark.parametrize("execution", ["per_subject_ordered", "concurrent"])
def test_after_the_reaper_interrupts_a_stalled_attempt_no_further_call_is_opened_or_sent(
    scripted_llm: ScriptedLLM, execution: str
) -> None:
    create_world(_two_ants(execution), "stalled")
    (attempt_id,) = turn_attempt_enqueue(slug="stalled")["attempt_ids"]
    reaped: list[list[str]] = []

    def stall_past_the_lease(body: dict[str, Any]) -> dict[str, Any]:
        # While the first ant's generation is out, the lease runs out and the reaper runs.
        try:
            reaped.append(turn_attempt_reap(now=timezone.now() + timedelta(hours=1)))
        finally:
            connection.close()  # the scripted server thread's own
        return _waits(subject_of(body))

    # the second reply answers only a call the guard failed to stop (then the count below fails)
    scripted_llm.script(stall_past_the_lease, _waits("ant"))
    assert turn_attempt_run(attempt_id=attempt_id, owner="stalled-worker") == "interrupted"

    assert reaped == [[attempt_id]]
    assert len(scripted_llm.requests) == 1  # the second ant's generation was never sent
    attempt = TurnAttempt.objects.get(pk=attempt_id)
    assert attempt.status == AttemptStatus.INTERRUPTED
    rows = list(
        SourceInvocation.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("subject_id", "kind", "status")
    )
    (first,) = {subject_of(r) for r in scripted_llm.requests}
    assert {subject for subject, _, _ in rows} == {first}  # nothing opened for the other ant
    assert not [status for _, _, status in rows if status == InvocationStatus.RUNNING]
    # The first ant's generation was out when the reaper interrupted the attempt: its reply
    # came afterwards, and finishing it did not rewrite the row the reaper had interrupted.
    generation = [status for _, kind, status in rows if kind == "llm_generation"]
    assert generation == [InvocationStatus.INTERRUPTED]
    call = LlmCall.objects.get(invocation__attempt=attempt, invocation__kind="llm_generation")
    assert call.status == InvocationStatus.INTERRUPTED
    kinds = list(
        AttemptEvent.objects.filter(attempt=attempt).order_by("seq").values_list("kind", flat=True)
    )
    assert kinds[-1] == "attempt_interrupted"
    assert "turn_committed" not in kinds
