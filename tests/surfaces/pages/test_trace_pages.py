"""The live trace pages tell the truth while an attempt runs: a generation's badge is its verdict
(accepted / rejected / transport failed / running), tool results read as tool results, a running
LLM call shows what has streamed so far, finished pages tell HTMX to stop polling."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from cognition_app.models import LlmCall, LlmChunk, SourceInvocation
from cognition_app.sources import conformance
from cognition_app.verdicts import verdict
from devservices.toys import serve, toy_env
from surfaces.pages.cognition import SCHEMA_INSTRUCTION, labelled_messages
from surfaces.pages.live import STOP_POLLING
from tests.support.scripted_llm import ScriptedLLM
from tests.surfaces.pages.test_world_pages import html, make_world, page_json, run_turn
from worlds_app.models import AttemptStatus, TurnAttempt, World

pytestmark = pytest.mark.django_db


@pytest.fixture
def reader(client: Client, reader_user: User) -> Client:
    client.force_login(reader_user)
    return client


@pytest.fixture
def toy_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = serve("127.0.0.1", 0, tmp_path / "toys")
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    for name, value in toy_env(base_url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(conformance, "_probe_cache", {})
    try:
        yield base_url
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def rules_world(db: Any) -> tuple[World, TurnAttempt]:
    """A rule-policy world with one committed turn and that turn's attempt."""
    make_world("ant_on_plate_rules", "rules")
    attempt = run_turn("rules")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    return World.objects.get(slug="rules"), attempt


# --- verdicts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"status": "running"}, "running"),
        ({"status": "succeeded", "validation_status": "invalid"}, "rejected"),
        ({"status": "succeeded", "validation_status": "valid"}, "accepted"),
        ({"status": "failed", "failure_class": "transport"}, "transport_failed"),
        ({"status": "failed", "failure_class": "budget_exhausted"}, "failed"),
        ({"status": "failed", "failure_class": "attempt_ended"}, "cancelled"),
        ({"status": "interrupted"}, "interrupted"),
    ],
)
def test_generation_verdicts(fields: dict[str, Any], code: str) -> None:
    assert verdict(kind="llm_generation", **fields)["code"] == code


def test_rejection_says_why_before_any_event() -> None:
    parse = verdict(
        kind="llm_generation",
        status="succeeded",
        validation_status="invalid",
        parse_error="Expecting value: line 1 column 1 (char 0)",
    )
    assert parse["label"] == "rejected"
    assert parse["why"] == "not valid JSON: Expecting value: line 1 column 1 (char 0)"
    schema = verdict(
        kind="llm_generation",
        status="succeeded",
        validation_status="invalid",
        validation_errors=["patch.effects[0].entity_id: unknown"],
        rejection="",
    )
    assert schema["why"] == "patch.effects[0].entity_id: unknown"
    # a tool call's or an ambient call's success is just that
    assert verdict(kind="model_elected_tool", status="succeeded")["code"] == "succeeded"


# --- a running attempt, written row by row as the worker would ----------------------------------


def _running_attempt(world: World) -> TurnAttempt:
    return TurnAttempt.objects.create(
        world=world,
        seq=99,
        batch_id=uuid.uuid4(),
        batch_index=0,
        batch_size=1,
        status="running",
        attempted_turn=world.current_turn + 1,
        started_at=timezone.now() - timedelta(seconds=3),
    )


def _generation(
    attempt: TurnAttempt, seq: int, *, generation: int, **fields: Any
) -> tuple[SourceInvocation, LlmCall]:
    started = timezone.now() - timedelta(seconds=3 - seq * 0.5)
    inv = SourceInvocation.objects.create(
        attempt=attempt,
        world=attempt.world,
        attempted_turn=attempt.attempted_turn,
        seq=seq,
        source_hash="a" * 64,
        kind="llm_generation",
        subject_id="ant",
        node_id="act",
        generation_attempt=generation,
        tool_loop_round=0,
        started_at=started,
        **fields,
    )
    call = LlmCall.objects.create(
        invocation=inv,
        base_url="http://127.0.0.1:1",
        requested_model="scripted-model",
        status=fields.get("status", "running"),
        started_at=started,
        messages=[{"role": "system", "content": "You are an ant."}],
    )
    return inv, call


def test_a_rejected_generation_reads_rejected_while_the_attempt_runs(
    reader: Client, rules_world: tuple[World, TurnAttempt]
) -> None:
    world, _ = rules_world
    attempt = _running_attempt(world)
    rejected, rejected_call = _generation(
        attempt,
        1,
        generation=1,
        status="succeeded",
        validation_status="invalid",
        model_output_kind="invalid",
        duration_ms=400,
    )
    LlmCall.objects.filter(pk=rejected_call.pk).update(
        status="succeeded", raw_text="I eat it.", parse_error="Expecting value"
    )
    retry, retry_call = _generation(attempt, 2, generation=2, status="running")
    LlmCall.objects.filter(pk=retry_call.pk).update(
        messages=[
            {"role": "system", "content": "You are an ant."},
            {"role": "assistant", "content": "I eat it."},
            {"role": "user", "content": "Your previous response was rejected. Not JSON."},
        ]
    )
    LlmChunk.objects.create(call=retry_call, seq=0, offset_ms=180, text='{"kind": ')
    url = f"/attempts/{attempt.pk}/"

    data = page_json(reader, url)
    rows = {r["id"]: r for r in data["timeline"]}
    first, second = rows[f"i-{rejected.pk}"], rows[f"i-{retry.pk}"]
    assert first["verdict"]["code"] == "rejected"
    assert first["rejection"] == "not valid JSON: Expecting value"
    assert second["verdict"]["code"] == "running"
    assert second["ttft_ms"] == 180  # the first chunk's arrival, before the call finishes
    assert second["corrective"] == "Your previous response was rejected. Not JSON."
    assert first["parent"] == second["parent"] == "g-ant-act-0"
    assert rows["g-ant-act-0"]["parent"] == "n-ant-act"
    assert rows["n-ant-act"]["parent"] == "s-ant"

    body = html(reader, url)
    assert 'class="badge v-rejected">rejected<' in body
    assert 'class="badge v-running">running<' in body
    assert "v-succeeded" not in body and "v-accepted" not in body
    assert "1 rejected" in body

    # the rejected output's own pages say so too
    call_page = html(reader, f"/llm-calls/{rejected_call.pk}/")
    assert 'id="call-verdict">rejected<' in call_page
    assert "succeeded" not in call_page.split('id="call-verdict"')[1][:40]
    assert page_json(reader, f"/llm-calls/{rejected_call.pk}/")["verdict"]["code"] == "rejected"
    invocation_page = html(reader, f"/invocations/{rejected.pk}/")
    assert 'class="badge v-rejected">rejected<' in invocation_page


def test_a_streaming_call_page_shows_its_text_and_polls_until_finished(
    reader: Client, rules_world: tuple[World, TurnAttempt]
) -> None:
    world, _ = rules_world
    attempt = _running_attempt(world)
    _, call = _generation(attempt, 1, generation=1, status="running")
    LlmChunk.objects.create(call=call, seq=0, offset_ms=240, text='{"kind": "fin')
    LlmChunk.objects.create(call=call, seq=1, offset_ms=300, text='al_patch"')
    url = f"/llm-calls/{call.pk}/"

    partial = reader.get(url, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    text = partial.content.decode()
    assert text.startswith('<div id="llm-call"')
    assert 'hx-trigger="every 500ms"' in text and 'hx-swap="morph"' in text
    assert "{&quot;kind&quot;: &quot;final_patch&quot;" in text
    assert '<div class="n" id="call-ttft">240 ms</div>' in text
    assert 'id="call-verdict">running<' in text
    data = page_json(reader, url)
    assert data["live_ttft_ms"] == 240 and data["ttft_ms"] is None

    LlmCall.objects.filter(pk=call.pk).update(status="succeeded", ttft_ms=240)
    SourceInvocation.objects.filter(pk=call.invocation_id).update(
        status="succeeded", validation_status="valid", model_output_kind="final_patch"
    )
    done = reader.get(url, HTTP_HX_REQUEST="true")
    assert done.status_code == STOP_POLLING  # HTMX swaps this last answer and stops polling
    assert 'id="call-verdict">accepted<' in done.content.decode()
    assert "hx-trigger" not in done.content.decode()
    assert reader.get(url).status_code == 200  # a browser's full page is a plain 200


def test_a_finished_timeline_stops_its_poll(
    reader: Client, rules_world: tuple[World, TurnAttempt]
) -> None:
    _, attempt = rules_world
    response = reader.get(f"/attempts/{attempt.pk}/", HTTP_HX_REQUEST="true")
    assert response.status_code == STOP_POLLING
    assert response.content.decode().startswith('<div id="timeline"')


# --- tool results are tool results ----------------------------------------------------------


def test_tool_results_are_labelled_as_tool_results(
    reader: Client, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    make_world("park", "park-tools")
    scripted_llm.script(
        {
            "kind": "tool_call",
            "tool_call": {"name": "buy_candy", "arguments": {"item": "candy_bar"}},
            "patch": None,
        },
        {
            "kind": "final_patch",
            "tool_call": None,
            "patch": {
                "narration": "Bob buys a candy bar.",
                "effects": [
                    {"op": "set_entity_state", "entity_id": "bob", "state": "holding candy"}
                ],
            },
        },
    )
    attempt = run_turn("park-tools")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    first, second = LlmCall.objects.filter(
        invocation__attempt=attempt, invocation__kind="llm_generation"
    ).order_by("invocation__seq")

    data = page_json(reader, f"/llm-calls/{first.pk}/")
    assert data["verdict"]["code"] == "accepted"
    assert data["corrective_message"] is None
    assert data["next_message"]["kind"] == "tool_result"
    assert data["next_message"]["content"].startswith("Result of buy_candy")

    data = page_json(reader, f"/llm-calls/{second.pk}/")
    kinds = [m["kind"] for m in data["message_labels"]]
    assert kinds[-2:] == ["earlier_output", "tool_result"]
    assert data["message_labels"][-1]["label"] == "tool result · buy_candy"
    body = html(reader, f"/llm-calls/{second.pk}/")
    assert "tool result · buy_candy" in body
    assert "corrective" not in body

    timeline = page_json(reader, f"/attempts/{attempt.pk}/")["timeline"]
    (tool,) = [r for r in timeline if r["kind"] == "model_elected_tool"]
    assert tool["parent"] == f"i-{first.invocation_id}"
    assert json.loads(tool["request"])  # what was sent, shown in the side panel


def test_labels_fall_back_to_the_text_when_generations_do_not_line_up() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "prompt"},
        {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "Result of buy_candy:\n{}"},
        {"role": "system", "content": SCHEMA_INSTRUCTION + ":\n{}"},
    ]
    labels = labelled_messages(messages, [])
    assert [m["kind"] for m in labels] == [
        "prompt",
        "prompt",
        "prompt",
        "tool_result",
        "schema_instruction",
    ]
