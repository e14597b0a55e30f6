"""A source call opens its rows only while its attempt still runs under the worker's lease:
once the reaper has interrupted the attempt — the worker stalled past its lease,
say — the next call of the turn is neither opened nor sent, so no row of an interrupted attempt
can be left ``running`` and nothing more is spent on it. A call that opened its rows before it
waited for a slot (a generation without a budget) and got the slot after the reap is not sent
either: its lease had run out, so it asked again (``EventLog.still_leased``).

The stall is real: the lease is 2 s, the worker's heartbeat renews nothing (a stalled worker's
could not), and the model answers the first call only once the lease has run out, when the
reaper, on the real clock, interrupts the attempt."""

from __future__ import annotations

import copy
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from tests.cognition_app.test_park import subject_of
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, fixture_body
from worlds_app.models import AttemptEvent, AttemptStatus, TurnAttempt
from worlds_app.services import claims, turn_attempt_enqueue, turn_attempt_reap, turn_attempt_run
from worlds_app.services.events import EventLog

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 2


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


@override_settings(CHUKWA_ATTEMPT_LEASE_SECONDS=LEASE_SECONDS)
@pytest.mark.parametrize("execution", ["per_subject_ordered", "concurrent"])
def test_after_the_reaper_interrupts_a_stalled_attempt_no_further_call_is_opened_or_sent(
    scripted_llm: ScriptedLLM, execution: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_world(_two_ants(execution), "stalled")
    (attempt_id,) = turn_attempt_enqueue(slug="stalled")["attempt_ids"]
    reaped: list[list[str]] = []
    monkeypatch.setattr(claims, "renew_lease", lambda attempt: None)  # the heartbeat stalls

    def stall_past_the_lease(body: dict[str, Any]) -> dict[str, Any]:
        # While the first ant's generation is out, the lease runs out and the reaper runs.
        try:
            expires = TurnAttempt.objects.get(pk=attempt_id).lease_expires_at
            assert expires is not None
            time.sleep(max(0.0, (expires - timezone.now()).total_seconds()) + 0.2)
            reaped.append(turn_attempt_reap())
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
    others = [(subject, kind, status) for subject, kind, status in rows if subject != first]
    if execution == "concurrent":
        # The other ant's generation opened its rows before it waited for the slot, before
        # the reap: the reaper finished them with the attempt, and it was never sent.
        (other,) = {subject for subject, _, _ in others}
        assert others == [(other, "llm_generation", InvocationStatus.INTERRUPTED)]
        unsent = LlmCall.objects.get(
            invocation__attempt=attempt,
            invocation__subject_id=other,
            invocation__kind="llm_generation",
        )
        assert unsent.status == InvocationStatus.INTERRUPTED and unsent.raw_text == ""
    else:
        assert others == []  # nothing opened for the other ant
    assert not [status for _, _, status in rows if status == InvocationStatus.RUNNING]
    # The first ant's generation was out when the reaper interrupted the attempt: its reply
    # came afterwards, and finishing it did not rewrite the row the reaper had interrupted.
    generation = [s for subject, kind, s in rows if kind == "llm_generation" and subject == first]
    assert generation == [InvocationStatus.INTERRUPTED]
    call = LlmCall.objects.get(
        invocation__attempt=attempt, invocation__subject_id=first, invocation__kind="llm_generation"
    )
    assert call.status == InvocationStatus.INTERRUPTED
    kinds = list(
        AttemptEvent.objects.filter(attempt=attempt).order_by("seq").values_list("kind", flat=True)
    )
    assert kinds[-1] == "attempt_interrupted"
    assert "turn_committed" not in kinds


def test_a_call_opened_before_it_waited_asks_again_only_once_its_lease_could_have_run_out() -> None:
    """``EventLog.still_leased``: no round trip while the lease this worker set has more than a
    third of its length left (the reaper interrupts only an attempt whose lease ran out); in its
    last third, the guard is asked: passing while the attempt is ours, ``LeaseLost`` once the
    reaper has interrupted it. A renewal moves the lease the check goes by."""
    create_world(fixture_body("ant_on_plate"), "leased")
    (attempt_id,) = turn_attempt_enqueue(slug="leased")["attempt_ids"]
    claim = claims.claim_attempt(attempt_id=attempt_id, owner="leased-worker")
    assert claim is not None
    attempt = claim.attempt
    log = EventLog(attempt)
    with CaptureQueriesContext(connection) as fresh:
        log.still_leased()
    assert len(fresh) == 0
    attempt.lease_expires_at = timezone.now() + timedelta(seconds=1)  # in its last third
    with CaptureQueriesContext(connection) as near:
        log.still_leased()  # asked, and still ours
    assert len(near) == 1 and "worlds_app_refuse_unless" in near[0]["sql"]
    claims.renew_lease(attempt)
    assert attempt.lease_expires_at is not None
    assert attempt.lease_expires_at > timezone.now() + timedelta(seconds=30)
    with CaptureQueriesContext(connection) as renewed:
        log.still_leased()
    assert len(renewed) == 0
    attempt.lease_expires_at = timezone.now()
    assert turn_attempt_reap(now=timezone.now() + timedelta(hours=1)) == [attempt_id]
    with pytest.raises(claims.LeaseLost):
        log.still_leased()
    assert log.lease_lost
