"""World, turn, provenance, attempt-timeline and trace pages, end to end through the client."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.sources import conformance
from devservices.toys import serve, toy_env
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.scripted_llm import ScriptedLLM
from worlds_app.models import AttemptStatus, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

pytestmark = pytest.mark.django_db

ANT_OK: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "The ant walks east to the crumb.",
        "effects": [
            {"op": "set_entity_state", "entity_id": "ant", "state": "beside the crumb, hungry"},
            {"op": "append_entity_memory", "entity_id": "ant", "content": "I walked to the crumb."},
        ],
    },
}
BAD_REPLY = "The ant walks to the crumb and eats it."


def _body(name: str) -> dict[str, Any]:
    return {k: v for k, v in copy.deepcopy(load_fixture(name)).items() if k not in ("name", "note")}


def make_world(fixture: str, slug: str) -> World:
    scenario_hash = scenario_assemble(data=_body(fixture))["scenario_hash"]
    return world_create(data={"slug": slug, "scenario_ref": {"hash": scenario_hash}})


def run_turn(slug: str) -> TurnAttempt:
    (attempt_id,) = turn_attempt_enqueue(slug=slug)["attempt_ids"]
    turn_attempt_run(attempt_id=attempt_id, owner="test")
    return TurnAttempt.objects.get(pk=attempt_id)


@pytest.fixture
def reader(client: Client, reader_user: User) -> Client:
    client.force_login(reader_user)
    return client


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


@pytest.fixture
def toy_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = serve("127.0.0.1", 0, tmp_path / "toys")
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    for name, value in toy_env(base_url).items():
        monkeypatch.setenv(name, value)
    # The conformance-probe cache is keyed by base URL and a new scripted server may reuse a port.
    monkeypatch.setattr(conformance, "_probe_cache", {})
    try:
        yield base_url
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def rules_world(db: Any) -> tuple[World, TurnAttempt]:
    """A rule-policy world with two committed turns; returns the world and the last attempt."""
    world = make_world("ant_on_plate_rules", "rules")
    run_turn("rules")
    attempt = run_turn("rules")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    return World.objects.get(pk=world.pk), attempt


@pytest.fixture
def llm_world(scripted_llm: ScriptedLLM, toy_sources: str) -> TurnAttempt:
    """An LLM world whose one turn needed a retry: a non-JSON reply, then a valid patch."""
    make_world("ant_on_plate", "llm")
    scripted_llm.script(BAD_REPLY, ANT_OK)
    attempt = run_turn("llm")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    return attempt


def page_json(client: Client, url: str) -> Any:
    response = client.get(url + ("&" if "?" in url else "?") + "format=json")
    assert response.status_code == 200, response.content[:500]
    return response.json()


def html(client: Client, url: str, **params: Any) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    assert "HX-Request" in response["Vary"]
    return response.content.decode()


# --- sign-in ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/worlds/",
        "/worlds/rules/",
        "/worlds/rules/turns/1/",
        "/worlds/rules/diff/?from=0&to=1",
        "/worlds/rules/entities/ant/",
        f"/attempts/{uuid.uuid4()}/",
        f"/invocations/{uuid.uuid4()}/",
        f"/llm-calls/{uuid.uuid4()}/",
    ],
)
@pytest.mark.parametrize("suffix", ["", "json"])
def test_anonymous_is_sent_to_sign_in(client: Client, url: str, suffix: str) -> None:
    if suffix:
        url += ("&" if "?" in url else "?") + "format=json"
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


# --- world pages -------------------------------------------------------------------------------


def test_world_list_and_scenario_filter(reader: Client, rules_world: tuple[World, Any]) -> None:
    world, _ = rules_world
    body = html(reader, "/worlds/")
    assert world.name in body
    assert "/worlds/rules/" in body
    data = page_json(reader, "/worlds/")
    assert data["count"] == 1
    assert data["results"][0]["current_turn"] == 2
    assert page_json(reader, f"/worlds/?scenario={world.scenario_id}")["count"] == 1
    assert page_json(reader, "/worlds/?scenario=" + "0" * 64)["count"] == 0


def test_world_list_query_count_is_flat(
    reader: Client, django_assert_num_queries: Callable[..., Any]
) -> None:
    scenario_hash = scenario_assemble(data=_body("ant_on_plate_rules"))["scenario_hash"]

    def create(n: int, start: int) -> None:
        for i in range(start, start + n):
            world_create(data={"slug": f"w{i}", "scenario_ref": {"hash": scenario_hash}})

    create(5, 0)
    reader.get("/worlds/?limit=200")  # warm the session
    with CaptureQueriesContext(connection) as five:
        assert reader.get("/worlds/?limit=200").status_code == 200
    create(195, 5)
    with django_assert_num_queries(len(five)):
        response = reader.get("/worlds/?limit=200")
    assert response.content.decode().count('href="/worlds/w') == 200


def test_world_page_shows_state_history_and_queue(
    reader: Client, rules_world: tuple[World, TurnAttempt]
) -> None:
    _, attempt = rules_world
    body = html(reader, "/worlds/rules/")
    data = page_json(reader, "/worlds/rules/")
    assert data["current_turn"] == 2
    narrations = [n["narration"] for t in data["turns"] for n in t["narrations"]]
    assert narrations
    for narration in narrations:
        assert narration in body.replace("&#x27;", "'")
    assert [t["number"] for t in data["turns"]] == [2, 1, 0]
    for label in data["state"]["environments"]:
        assert f"/worlds/rules/environments/{label}/" in body
    assert "/worlds/rules/entities/ant/" in body
    assert f"/attempts/{attempt.pk}/" in body
    assert "committed" in body
    assert "/worlds/rules/diff/?from=1&amp;to=2" in body
    # Readers don't see the run-turns form.
    assert 'name="count"' not in body


def test_turn_page(reader: Client, rules_world: tuple[World, TurnAttempt]) -> None:
    _, attempt = rules_world
    data = page_json(reader, "/worlds/rules/turns/2/")
    assert data["patches"] and data["transitions"]
    body = html(reader, "/worlds/rules/turns/2/")
    assert data["patches"][0]["narration"].replace("'", "&#x27;") in body
    assert "rule policy" in body  # no LLM call decided these transitions
    assert f"/attempts/{attempt.pk}/" in body
    first = data["transitions"][0]
    assert first["after"].replace("'", "&#x27;") in body
    assert reader.get("/worlds/rules/turns/9/").status_code == 404


def test_diff_page(reader: Client, rules_world: tuple[World, TurnAttempt]) -> None:
    data = page_json(reader, "/worlds/rules/diff/?from=0&to=2")
    assert data["changes"]
    body = html(reader, "/worlds/rules/diff/", **{"from": 0, "to": 2})
    assert "Turn 0 → turn 2" in body
    assert reader.get("/worlds/rules/diff/?from=0&to=7").status_code == 404


def test_entity_provenance_names_the_rule(
    reader: Client, rules_world: tuple[World, TurnAttempt]
) -> None:
    data = page_json(reader, "/worlds/rules/entities/ant/")
    # newest first: the oldest change, at turn 1, is the last
    assert [h["turn_number"] for h in data["history"]][-1:] == [1]
    change = data["history"][-1]
    assert change["llm_call_id"] is None
    assert change["decided_by"]["rule_policy"] is True
    assert change["decided_by"]["matched_rule"]
    body = html(reader, "/worlds/rules/entities/ant/")
    assert change["decided_by"]["matched_rule"] in body
    assert f"/attempts/{change['attempt_id']}/" in body
    assert "/worlds/rules/turns/1/" in body
    assert reader.get("/worlds/rules/entities/nobody/").status_code == 404


def test_environment_page(reader: Client, rules_world: tuple[World, TurnAttempt]) -> None:
    world, _ = rules_world
    label = next(iter(world.turns.get(number=2).state["environments"]))
    data = page_json(reader, f"/worlds/rules/environments/{label}/")
    assert data["label"] == label
    body = html(reader, f"/worlds/rules/environments/{label}/")
    assert "Environment" in body
    assert reader.get("/worlds/rules/environments/nowhere/").status_code == 404


# --- run turns ---------------------------------------------------------------------------------


def test_operator_runs_turns(operator: Client, rules_world: tuple[World, TurnAttempt]) -> None:
    body = html(operator, "/worlds/rules/")
    assert 'name="count"' in body
    response = operator.post("/worlds/rules/run-turns/", {"count": "3"})
    assert response.status_code == 302
    assert response["Location"] == "/worlds/rules/"
    assert TurnAttempt.objects.filter(world__slug="rules", status="queued").count() == 3
    # HTMX gets the queue partial, which polls while attempts are queued.
    response = operator.post("/worlds/rules/run-turns/", {"count": "1"}, HTTP_HX_REQUEST="true")
    partial = response.content.decode()
    assert response.status_code == 200
    assert partial.startswith('<section id="queue"')
    assert 'hx-trigger="every 2s"' in partial
    assert TurnAttempt.objects.filter(world__slug="rules", status="queued").count() == 4
    # A bad count is shown inline, with and without HTMX, and queues nothing.
    response = operator.post("/worlds/rules/run-turns/", {"count": "101"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "inline-error" in response.content.decode()
    response = operator.post("/worlds/rules/run-turns/", {"count": "abc"})
    assert response.status_code == 400
    assert "must be an integer" in response.content.decode()
    assert TurnAttempt.objects.filter(world__slug="rules", status="queued").count() == 4


def test_the_attempts_card_polls_the_world_page_until_nothing_runs(
    operator: Client, rules_world: tuple[World, TurnAttempt]
) -> None:
    # The run-turns answer (a POST-only URL) polls the world page, which answers GET with the
    # card and, out of band, the figures, state and turns the attempts change.
    response = operator.post("/worlds/rules/run-turns/", {"count": "1"}, HTTP_HX_REQUEST="true")
    partial = response.content.decode()
    assert 'hx-get="/worlds/rules/"' in partial
    assert "run-turns/?" not in partial and 'hx-get="/worlds/rules/run-turns/"' not in partial
    poll = operator.get("/worlds/rules/", HTTP_HX_REQUEST="true")
    assert poll.status_code == 200
    body = poll.content.decode()
    assert body.startswith('<section id="queue"') and 'hx-get="/worlds/rules/"' in body
    for oob in ('id="world-stats"', 'id="world-state"', 'id="turns"'):
        assert oob in body, oob
    assert body.count('hx-swap-oob="morph"') == 3
    assert '<div class="n" id="world-current-turn">2</div>' in body
    # Once the attempt has run, the answer is the last one (HTTP 286: HTMX stops polling) and
    # shows the new turn.
    (queued,) = TurnAttempt.objects.filter(world__slug="rules", status="queued")
    turn_attempt_run(attempt_id=str(queued.pk), owner="test")
    poll = operator.get("/worlds/rules/", HTTP_HX_REQUEST="true")
    assert poll.status_code == 286
    body = poll.content.decode()
    assert '<div class="n" id="world-current-turn">3</div>' in body
    assert "hx-trigger" not in body.split("</section>")[0]
    # The full page never carries out-of-band copies.
    assert "hx-swap-oob" not in html(operator, "/worlds/rules/")


def test_reader_cannot_run_turns(reader: Client, rules_world: tuple[World, TurnAttempt]) -> None:
    response = reader.post("/worlds/rules/run-turns/", {"count": "1"})
    assert response.status_code == 403
    assert not TurnAttempt.objects.filter(world__slug="rules", status="queued").exists()


# --- the attempt timeline ----------------------------------------------------------------------


def test_rule_attempt_timeline(reader: Client, rules_world: tuple[World, TurnAttempt]) -> None:
    _, attempt = rules_world
    url = f"/attempts/{attempt.pk}/"
    data = page_json(reader, url)
    assert data["status"] == "committed"
    kinds = {row["kind"] for row in data["timeline"]}
    assert {"world_patch_applied", "turn_committed", "inner_monologue"} <= kinds
    body = html(reader, url)
    assert "turn committed" in body
    assert "patch #1 applied" in body
    partial = reader.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert partial.startswith('<div id="timeline"')
    assert "hx-trigger" not in partial  # finished: polling stops


def test_running_attempt_timeline_polls(reader: Client, rules_world: tuple[World, Any]) -> None:
    world, _ = rules_world
    attempt = TurnAttempt.objects.create(
        world=world,
        seq=99,
        batch_id=uuid.uuid4(),
        batch_index=0,
        batch_size=1,
        status="running",
        attempted_turn=3,
        started_at=timezone.now(),
    )
    url = f"/attempts/{attempt.pk}/"
    partial = reader.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert partial.startswith('<div id="timeline"')
    assert f'hx-get="{url}"' in partial
    assert 'hx-trigger="every 1s"' in partial
    assert f'href="{url}"' in partial
    full = html(reader, url)
    assert "<html" in full and 'hx-trigger="every 1s"' in full


def test_timeline_query_count_is_flat(
    reader: Client,
    rules_world: tuple[World, TurnAttempt],
    django_assert_num_queries: Callable[..., Any],
) -> None:
    world, _ = rules_world
    attempt = TurnAttempt.objects.create(
        world=world,
        seq=99,
        batch_id=uuid.uuid4(),
        batch_index=0,
        batch_size=1,
        status="running",
        attempted_turn=3,
        started_at=timezone.now(),
    )
    url = f"/attempts/{attempt.pk}/"

    def add(start: int, n: int) -> None:
        now = timezone.now()
        SourceInvocation.objects.bulk_create(
            SourceInvocation(
                attempt=attempt,
                world=world,
                attempted_turn=3,
                seq=i,
                source_hash="a" * 64,
                kind="ambient_context",
                ambient_source_id=f"src{i}",
                status="succeeded",
                started_at=now,
                ended_at=now,
                duration_ms=5,
            )
            for i in range(start, start + n)
        )

    add(1, 10)
    reader.get(url)
    with CaptureQueriesContext(connection) as ten:
        assert reader.get(url).status_code == 200
    add(11, 90)
    with django_assert_num_queries(len(ten)):
        response = reader.get(url)
    # one row in the tree and one section in the side panel per call
    assert response.content.decode().count('data-row="i-') == 100
    assert response.content.decode().count('class="wf-detail" id="detail-i-') == 100


# --- LLM traces --------------------------------------------------------------------------------


def test_llm_attempt_timeline_shows_the_retry(reader: Client, llm_world: TurnAttempt) -> None:
    url = f"/attempts/{llm_world.pk}/"
    data = page_json(reader, url)
    generations = [r for r in data["timeline"] if r.get("kind") == "llm_generation"]
    # the verdict, not the transport status: the rejected output never reads "succeeded"
    assert [g["verdict"]["code"] for g in generations] == ["rejected", "accepted"]
    assert [g["status"] for g in generations] == ["succeeded", "succeeded"]
    assert "not valid JSON" in generations[0]["rejection"]
    # the retry sits in one round with the rejected try, carrying the corrective message
    (round_row,) = [r for r in data["timeline"] if r["kind"] == "round"]
    assert [g["parent"] for g in generations] == [round_row["id"], round_row["id"]]
    assert generations[1]["corrective"].startswith("Your previous response was rejected.")
    body = html(reader, url)
    assert "generation 1" in body and "generation 2" in body
    assert "rejected: " in body and "not valid JSON" in body
    assert "1 rejected" in body
    for g in generations:
        assert f"/llm-calls/{g['llm_call_id']}/" in body


def test_llm_call_page(reader: Client, llm_world: TurnAttempt) -> None:
    rejected, accepted = (
        LlmCall.objects.filter(invocation__attempt=llm_world, invocation__kind="llm_generation")
        .order_by("invocation__seq")
        .select_related("invocation")
    )
    data = page_json(reader, f"/llm-calls/{rejected.pk}/")
    assert data["raw_text"] == BAD_REPLY
    corrective = data["corrective_message"]
    assert corrective["llm_call_id"] == str(accepted.pk)
    assert corrective["content"].startswith("Your previous response was rejected.")
    body = html(reader, f"/llm-calls/{rejected.pk}/")
    assert BAD_REPLY in body
    assert "Your previous response was rejected." in body
    assert "Time to first token" in body
    assert rejected.parse_error.split("\n")[0][:40].replace("'", "&#x27;") in body

    data = page_json(reader, f"/llm-calls/{accepted.pk}/")
    assert json.loads(data["raw_text"]) == ANT_OK
    assert data["corrective_message"] is None
    assert data["usage"]["completion_tokens"]
    body = html(reader, f"/llm-calls/{accepted.pk}/")
    assert "accepted patch" in body
    assert "The ant walks east to the crumb." in body
    assert reader.get(f"/llm-calls/{uuid.uuid4()}/").status_code == 404
    assert reader.get("/llm-calls/not-a-uuid/").status_code == 400


def test_invocation_page(reader: Client, llm_world: TurnAttempt) -> None:
    inv = SourceInvocation.objects.filter(attempt=llm_world, kind="llm_generation").order_by("seq")[
        0
    ]
    data = page_json(reader, f"/invocations/{inv.pk}/")
    assert data["status"] == "succeeded"
    assert data["validation_status"] == "invalid"
    assert data["llm_call_id"]
    body = html(reader, f"/invocations/{inv.pk}/")
    assert f"/llm-calls/{data['llm_call_id']}/" in body
    assert f"/attempts/{llm_world.pk}/" in body
    assert "Request" in body and "invalid" in body


def test_llm_transition_links_to_its_call(reader: Client, llm_world: TurnAttempt) -> None:
    data = page_json(reader, "/worlds/llm/entities/ant/")
    (state_change,) = [h for h in data["history"] if h["target_kind"] == "entity_state"]
    assert state_change["after"] == "beside the crumb, hungry"
    accepted = LlmCall.objects.filter(
        invocation__attempt=llm_world, invocation__kind="llm_generation"
    ).order_by("-invocation__seq")[0]
    assert state_change["llm_call_id"] == str(accepted.pk)
    body = html(reader, "/worlds/llm/entities/ant/")
    assert f"/llm-calls/{accepted.pk}/" in body
    turn = html(reader, "/worlds/llm/turns/1/")
    assert f"/llm-calls/{accepted.pk}/" in turn
