"""Reuse's record lookup (``cognition_app.sources.reuse.recorded``): its precompiled statement
finds the same call as the queryset that states the rule (docs/costs.md, "Reuse"), whatever the
states of the calls recorded under a key; a call to send is claimed and looked up once, and a
recorded call is still reused while Redis is unavailable."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.forms.models import model_to_dict
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from cognition_app.sources import reuse
from cognition_app.sources.admission.leases import client
from cognition_app.sources.context import CallContext
from cognition_app.sources.reuse import _RECORDED, recorded

# Every combination of the states the rule looks at, and two start times (the oldest first).
STATES = list(
    itertools.product(
        [InvocationStatus.SUCCEEDED, InvocationStatus.FAILED],  # the invocation's status
        ["", "http_error"],  # its failure class
        [InvocationStatus.SUCCEEDED, InvocationStatus.RUNNING],  # its LLM call's status
        ["", "valid", "invalid"],  # its validation status
        ["", "patch", "invalid"],  # its model output kind
    )
)


def _rule(key: str) -> SourceInvocation | None:
    """The rule as a queryset: the oldest succeeded, not rejected, live call with the key."""
    return (
        SourceInvocation.objects.filter(
            reuse_key=key,
            status=InvocationStatus.SUCCEEDED,
            failure_class="",
            llm_call__status=InvocationStatus.SUCCEEDED,
        )
        .exclude(validation_status="invalid")
        .exclude(model_output_kind="invalid")
        .order_by("started_at", "id")
        .first()
    )


def _call(key: str, at: int, state: tuple[str, ...], text: str) -> None:
    status, failure_class, call_status, validation, output_kind = state
    started = timezone.now() - timedelta(minutes=at)
    invocation = SourceInvocation.objects.create(
        attempted_turn=1,
        seq=1,
        source_hash="a" * 64,
        kind="llm_generation",
        status=status,
        failure_class=failure_class,
        started_at=started,
        validation_status=validation,
        model_output_kind=output_kind,
        reuse_key=key,
    )
    LlmCall.objects.create(
        invocation=invocation,
        base_url="http://model.test/v1",
        requested_model="m",
        status=call_status,
        started_at=started,
        raw_text=text,
    )


@pytest.mark.django_db
def test_the_lookup_finds_what_the_rule_finds_for_every_state() -> None:
    keys = []
    # one key per pair of states: the older call in one state, the newer in the other
    for index, (older, newer) in enumerate(itertools.product(STATES[::5], STATES[::7])):
        key = f"{index:064x}"
        _call(key, 2, older, f"older {index}")
        _call(key, 1, newer, f"newer {index}")
        keys.append(key)
    keys.append("f" * 64)  # nothing recorded
    found = 0
    for key in keys:
        expected = _rule(key)
        got = recorded(key)
        assert (got.pk if got else None) == (expected.pk if expected else None), key
        if got is not None:
            found += 1
            # both rows whole, as the ORM loads them
            assert model_to_dict(got) == model_to_dict(expected)
            assert model_to_dict(got.llm_call) == model_to_dict(
                LlmCall.objects.get(invocation=expected)
            )
    assert 0 < found < len(keys)  # both outcomes were exercised


@pytest.mark.django_db
def test_the_lookup_reads_one_key_whatever_the_statistics_say() -> None:
    """The lookup's plan does not depend on the tables' statistics. Taken while every call was
    still running (as a young deployment's first analyze may be), they say that no call has
    succeeded; the lookup must still read one key's calls through the reuse index and each
    call by its invocation, not every succeeded call through a status index (what it did,
    ~1 ms a lookup at a few hundred calls and growing with the table)."""
    started = timezone.now() - timedelta(hours=1)
    invocations, calls = [], []
    for n in range(600):
        invocation = SourceInvocation(
            attempted_turn=1,
            seq=1,
            source_hash="a" * 64,
            kind="llm_generation",
            status=InvocationStatus.RUNNING,
            started_at=started + timedelta(seconds=n),
            reuse_key=f"{n % 60:064x}",
        )
        invocations.append(invocation)
        calls.append(
            LlmCall(
                invocation=invocation,
                base_url="http://model.test/v1",
                requested_model="m",
                status=InvocationStatus.RUNNING,
                started_at=invocation.started_at,
            )
        )
    SourceInvocation.objects.bulk_create(invocations)
    LlmCall.objects.bulk_create(calls)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {SourceInvocation._meta.db_table}, {LlmCall._meta.db_table}")
    SourceInvocation.objects.update(status=InvocationStatus.SUCCEEDED)
    LlmCall.objects.update(status=InvocationStatus.SUCCEEDED)
    key = f"{7:064x}"
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + _RECORDED, [key])
        custom = "\n".join(row[0] for row in cursor.fetchall())
        # as a prepared statement's generic plan (the key a parameter), once PostgreSQL
        # stops planning it for each value
        cursor.execute("PREPARE recorded_lookup(text) AS " + _RECORDED.replace("%s", "$1"))
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("EXPLAIN EXECUTE recorded_lookup(%s)", [key])
        generic = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE recorded_lookup")
    assert "$1" in generic
    for plan in (custom, generic):
        assert "using invocation_reuse_key_idx" in plan, plan
        assert f"using {LlmCall._meta.db_table}_invocation_id_key" in plan, plan
        assert "status_idx" not in plan and "status_started_idx" not in plan, plan
    got = recorded(key)
    assert got is not None and got.pk == invocations[7].pk  # the oldest of the key's ten


def _context() -> CallContext:
    return CallContext(
        attempt_id=None, world_id=None, world_slug="", attempted_turn=1, next_seq=lambda: 1
    )


@pytest.mark.django_db
def test_a_call_to_send_is_looked_up_once_and_claimed_and_a_recorded_one_leaves_no_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lookups: list[str] = []

    def counting(key: str) -> SourceInvocation | None:
        lookups.append(key)
        return recorded(key)

    monkeypatch.setattr(reuse, "recorded", counting)
    new_key, old_key = "1" * 64, "2" * 64
    client().delete(reuse._claim_name(new_key), reuse._claim_name(old_key))
    _call(old_key, 1, STATES[0], "recorded")
    found, flight = reuse.reused_or_claimed(new_key, ctx=_context(), what="call")
    assert found is None and flight is not None and lookups == [new_key]
    assert client().get(reuse._claim_name(new_key)) == flight.token.encode()
    flight.done()
    assert client().get(reuse._claim_name(new_key)) is None
    found, flight = reuse.reused_or_claimed(old_key, ctx=_context(), what="call")
    assert found is not None and found.llm_call.raw_text == "recorded" and flight is None
    assert lookups == [new_key, old_key]
    assert client().get(reuse._claim_name(old_key)) is None  # claimed, found, given back


@pytest.mark.django_db
def test_a_claim_whose_lookup_fails_is_given_back_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(key: str) -> SourceInvocation | None:
        raise DatabaseError("server closed the connection unexpectedly")

    monkeypatch.setattr(reuse, "recorded", failing)
    key = "6" * 64
    client().delete(reuse._claim_name(key))
    with pytest.raises(DatabaseError):
        reuse.reused_or_claimed(key, ctx=_context(), what="call")
    # not held for a lease (15 s) while identical calls wait on it
    assert client().get(reuse._claim_name(key)) is None


@pytest.mark.django_db
def test_with_redis_unavailable_a_recorded_call_is_reused_and_one_to_send_fails(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.CHUKWA_REDIS_WAIT_SECONDS = 0  # waiting for Redis: tests/.../test_redis_outage.py

    def down(*args: object, **kwargs: object) -> None:
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(reuse, "command", down)  # the claim's SET
    _call("3" * 64, 1, STATES[0], "recorded")
    found, flight = reuse.reused_or_claimed("3" * 64, ctx=_context(), what="call")
    assert found is not None and found.llm_call.raw_text == "recorded" and flight is None
    with pytest.raises(SourceFailure) as failure:
        reuse.reused_or_claimed("4" * 64, ctx=_context(), what="call")
    assert failure.value.failure_class == "reuse_unavailable"
    assert "could not be taken in Redis (unavailable for 0 s: ConnectionError" in str(failure.value)
