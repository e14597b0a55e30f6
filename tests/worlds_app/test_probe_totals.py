"""Every call that spends tokens counts in the totals and budgets — the conformance check
included (docs/budgets-and-costs.md): a trace viewer summing an attempt's exported spans reads
the same tokens as the attempt's, turn's, world's and experiment's totals over the REST API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from rest_framework.authtoken.models import Token

from cognition_app.budgets import prompt_estimate, spent
from cognition_app.models import LlmCall, SourceInvocation, SourceProbe
from cognition_app.sources import conformance
from cognition_app.sources.conformance import PROBE_MAX_TOKENS
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import run_turn
from tests.worlds_app.test_experiment_budget import USAGE, _design, _scenario
from tests.worlds_app.test_telemetry import _Receiver, otlp_receiver  # noqa: F401
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_run, world_create
from worlds_app.services.budgets import world_budget_set
from worlds_app.services.experiments import experiment_create
from worlds_app.telemetry import attempt_trace_export

pytestmark = pytest.mark.django_db(transaction=True)

PROBE_USAGE = {"prompt_tokens": 41, "completion_tokens": 20}
PROBE_TEXT = json.dumps({"probe": "chukwa-conformance-ok"})


def _exported_tokens(receiver: _Receiver) -> tuple[int, dict[str, int]]:
    """The tokens a trace viewer sums over the exported spans, and those per invocation kind."""
    total, by_kind = 0, {}
    for _path, _headers, body in receiver.posts:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {a.key: a.value for a in span.attributes}
                    tokens = sum(
                        attrs[key].int_value
                        for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
                        if key in attrs
                    )
                    kind = attrs["chukwa.invocation.kind"].string_value if tokens else ""
                    total += tokens
                    if tokens:
                        by_kind[kind] = by_kind.get(kind, 0) + tokens
    return total, by_kind


def test_a_traces_token_sum_equals_the_totals_with_the_probe_in_them(
    scripted_llm: ScriptedLLM,
    otlp_receiver: _Receiver,  # noqa: F811
    live_server: Any,
) -> None:
    scripted_llm.probe_reply = Reply(text=PROBE_TEXT, usage=PROBE_USAGE)
    experiment_create(
        data=_design(
            "probed",
            _scenario(),
            replicates=1,
            turns=1,
            budget={"max_tokens_total": 100_000},
        )
    )
    attempt = TurnAttempt.objects.get(world__slug="probed--control--1")
    scripted_llm.script(Reply(text=json.dumps(ANT_OK), usage=USAGE))
    assert turn_attempt_run(attempt_id=str(attempt.pk), owner="test") == "committed"
    attempt.refresh_from_db()
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason

    # the check spent tokens and has its LLM call, as a generation has
    check = SourceInvocation.objects.get(attempt=attempt, kind="conformance_check")
    probe_call = LlmCall.objects.get(invocation=check)
    assert (probe_call.prompt_tokens, probe_call.completion_tokens) == (41, 20)
    assert probe_call.usage_source == "provider"
    generation_tokens = USAGE["prompt_tokens"] + USAGE["completion_tokens"]

    endpoint = f"http://127.0.0.1:{otlp_receiver.server_address[1]}"
    with override_settings(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint):
        assert attempt_trace_export(attempt_id=str(attempt.pk))["exported"] > 0
    traced, by_kind = _exported_tokens(otlp_receiver)
    assert by_kind == {"conformance_check": 61, "llm_generation": generation_tokens}
    assert traced == 61 + generation_tokens

    key = Token.objects.create(user=User.objects.create_user("tally", password="x")).key
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        read = http.get(f"/api/attempts/{attempt.pk}/")
        assert read.status_code == 200, read.text
        assert read.json()["cost"]["tokens"]["total"] == traced
        assert read.json()["cost"]["calls"] == 2
        world = http.get("/api/worlds/probed--control--1/")
        assert world.status_code == 200, world.text
        assert world.json()["cost"]["tokens"]["total"] == traced
        turn = http.get("/api/worlds/probed--control--1/turns/1/")
        assert turn.status_code == 200, turn.text
        assert turn.json()["cost"]["tokens"]["total"] == traced
        experiment = http.get("/api/experiments/probed/")
        assert experiment.status_code == 200, experiment.text
        body = experiment.json()
        assert body["tokens"] == traced
        # the experiment's shared budget settled what the probe spent too, nothing left reserved
        assert body["budget"]["spent_tokens"] == traced
        assert body["budget"]["reserved_tokens"] == 0
    # what the world's budget checks read
    used = spent(world_id=attempt.world_id, attempt_id=attempt.pk)
    assert (used.turn_tokens, used.total_tokens) == (traced, traced)


def test_a_probe_that_does_not_fit_the_budget_is_refused_and_not_sent(
    scripted_llm: ScriptedLLM,
) -> None:
    scenario = _scenario()
    world_create(data={"slug": "roomy", "scenario_ref": {"hash": scenario}})
    scripted_llm.script(ANT_OK)
    assert run_turn("roomy").status == AttemptStatus.COMMITTED
    generation = LlmCall.objects.get(
        invocation__world__slug="roomy", invocation__kind="llm_generation"
    )
    probe = LlmCall.objects.get(
        invocation__world__slug="roomy", invocation__kind="conformance_check"
    )
    # what each call reserves: its prompt estimate and its cap
    could_generate = prompt_estimate(generation.messages, generation.response_format) + 100
    could_probe = prompt_estimate(probe.messages, probe.response_format) + PROBE_MAX_TOKENS

    # the backend's verdict forgotten: the next world's first generation checks again
    SourceProbe.objects.all().delete()
    conformance._probe_cache.clear()
    world_create(data={"slug": "tight", "scenario_ref": {"hash": scenario}})
    # The check runs before the generation's rows are opened and its budget reserved (the rows
    # come before the limits), so it is the first call of the turn: no room for it alone.
    assert could_generate > could_probe
    world_budget_set(slug="tight", budget={"max_tokens_per_turn": could_probe - 1})
    probes_before = len(scripted_llm.probes)
    requests_before = len(scripted_llm.requests)
    attempt = run_turn("tight")
    assert attempt.status == AttemptStatus.FAILED
    assert len(scripted_llm.probes) == probes_before  # the check was not sent
    assert len(scripted_llm.requests) == requests_before  # nor the generation
    check = SourceInvocation.objects.get(attempt=attempt, kind="conformance_check")
    assert check.failure_class == "budget_exhausted"
    assert f"budget max_tokens_per_turn = {could_probe - 1}" in check.failure_message
    assert LlmCall.objects.get(invocation=check).usage_source == "not_sent"
    assert not SourceInvocation.objects.filter(attempt=attempt, kind="llm_generation").exists()
