"""Reuse's record lookup (``cognition_app.sources.reuse.recorded``): its precompiled statement
finds the same call as the queryset that states the rule (docs/costs.md, "Reuse"), whatever the
states of the calls recorded under a key."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.forms.models import model_to_dict
from django.utils import timezone

from cognition_app.models import InvocationStatus, LlmCall, SourceInvocation
from cognition_app.sources.reuse import recorded

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
