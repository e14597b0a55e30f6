"""The reviewer's pages end to end through the client: home, the attempt / LLM-call / annotation
indexes, annotations in place (create, edit, delete; who may), memory appends read as lines,
the comparison reached from the world page, error titles and the store labels."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from cognition_app.models import LlmCall
from scenarios_app.services import scenario_assemble
from tests.surfaces.api.test_indexes_api import failed_attempt
from tests.surfaces.pages.test_world_pages import ANT_OK, BAD_REPLY, _body, make_world, run_turn
from worlds_app.models import Annotation, AttemptStatus, TurnAttempt, World
from worlds_app.services import world_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def reader(client: Client, reader_user: User) -> Client:
    client.force_login(reader_user)
    return client


@pytest.fixture
def worlds(db: Any) -> dict[str, Any]:
    make_world("ant_on_plate_rules", "calm")
    for _ in range(2):
        run_turn("calm")
    make_world("ant_on_plate_rules", "stuck")
    stuck = World.objects.get(slug="stuck")
    failed = failed_attempt(stuck, seq=1)
    running = TurnAttempt.objects.create(
        world=World.objects.get(slug="calm"),
        seq=90,
        batch_id=uuid.uuid4(),
        batch_index=0,
        batch_size=1,
        status=AttemptStatus.RUNNING,
        attempted_turn=3,
    )
    return {"failed": failed, "running": running}


def body(client: Client, url: str, code: int = 200, **kwargs: Any) -> str:
    response = client.get(url, kwargs)
    assert response.status_code == code, response.content[:400]
    return response.content.decode()


def test_home_links_what_runs_and_what_failed(reader: Client, worlds: dict[str, Any]) -> None:
    page = body(reader, "/")
    running, failed = worlds["running"], worlds["failed"]
    # each is one click away, in its own card
    running_card = page.split('id="running-now"')[1].split("</section>")[0]
    failed_card = page.split('id="failed-recently"')[1].split("</section>")[0]
    assert f'href="/attempts/{running.pk}/"' in running_card
    assert f'href="/attempts/{failed.pk}/"' in failed_card
    assert "the model never produced a valid patch" in failed_card
    # the cards are links, with readable labels
    assert 'class="stat link bad-stat" href="/attempts/?status=failed"' in page
    assert 'href="/attempts/?status=running"' in page
    assert "JSON schemas" in page and "Jsonschemas" not in page
    data = reader.get("/?format=json").json()
    assert data["failed"]["count"] == 1 and data["running"]["count"] == 1


def test_world_list_says_the_last_attempt_failed(reader: Client, worlds: dict[str, Any]) -> None:
    page = body(reader, "/worlds/")
    row = page.split('href="/worlds/stuck/"')[1].split("</tr>")[0]
    assert "s-failed" in row and "idle" in row  # failed last time, nothing queued now
    assert f'href="/attempts/{worlds["failed"].pk}/"' in row
    calm = page.split('href="/worlds/calm/"')[1].split("</tr>")[0]
    assert "s-committed" in calm


def test_attempt_index_page(reader: Client, worlds: dict[str, Any]) -> None:
    page = body(reader, "/attempts/", status="failed")
    assert f'href="/attempts/{worlds["failed"].pk}/"' in page
    assert f'href="/attempts/{worlds["running"].pk}/"' not in page
    assert '<option value="failed" selected>' in page
    assert 'class="badge s-failed"' in page
    data = reader.get("/attempts/?status=failed&format=json").json()
    assert [r["id"] for r in data["results"]] == [str(worlds["failed"].pk)]
    # a bad filter is shown on the form, the values kept; JSON gets the error envelope
    page = body(reader, "/attempts/", 400, status="exploded", world="calm")
    assert "status: " in page and 'value="calm"' in page
    error = reader.get("/attempts/?since=soon&format=json").json()["error"]
    assert error["details"]["field"] == "since"
    # paged, with the filters kept
    for seq in range(2, 60):
        failed_attempt(World.objects.get(slug="stuck"), seq=seq)
    page = body(reader, "/attempts/", status="failed")
    assert "/attempts/?status=failed&amp;offset=50" in page


def test_llm_call_index_page(reader: Client, scripted_llm: Any, toy_sources: str) -> None:
    make_world("ant_on_plate", "llm")
    scripted_llm.script(BAD_REPLY, ANT_OK)
    assert run_turn("llm").status == AttemptStatus.COMMITTED
    page = body(reader, "/llm-calls/")
    rejected, accepted = LlmCall.objects.filter(invocation__kind="llm_generation").order_by(
        "started_at"
    )
    assert f'href="/llm-calls/{rejected.pk}/"' in page
    assert 'class="badge s-rejected"' in page and 'class="badge s-accepted"' in page
    assert "succeeded" not in page.split("<tbody>")[1]  # a refused reply never reads as success
    assert "cost unknown" in page  # tokens are shown with their cost, unknown without a price
    only = body(reader, "/llm-calls/", status="rejected")
    assert f'href="/llm-calls/{rejected.pk}/"' in only
    assert f'href="/llm-calls/{accepted.pk}/"' not in only


def test_annotations_in_place(
    reader: Client, client: Client, worlds: dict[str, Any], operator_user: User
) -> None:
    url = "/annotations/on/turn/calm/1/"
    panel = reader.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert panel.startswith('<section class="card annotations" id="annotations-turn-calm-1"')
    assert "None yet." in panel
    # any signed-in reviewer annotates; HTMX gets the panel back with the row
    response = reader.post(
        url, {"name": "plausibility", "value": "4", "comment": "fine"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    note = Annotation.objects.get()
    assert (note.name, note.value_number, note.author.username) == ("plausibility", 4.0, "reader")
    assert f'id="note-{note.pk}"' in response.content.decode()
    # a bad value is said in the form, nothing written
    response = reader.post(
        url, {"name": "plausibility", "value": "Bad Label"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200 and "inline-error" in response.content.decode()
    assert Annotation.objects.count() == 1
    # without JavaScript: a redirect back to the page it came from, or a 400 page
    response = reader.post(url, {"name": "verdict", "value": "ok", "next": "/worlds/calm/turns/1/"})
    assert response.status_code == 302 and response["Location"] == "/worlds/calm/turns/1/"
    assert (
        reader.post(url, {"name": "x", "value": "", "next": "https://evil.example/"}).status_code
        == 400
    )
    verdict = Annotation.objects.get(name="verdict")
    # edit in place: the form replaces the row, saving gives the row back
    edit = reader.get(f"/annotations/{note.pk}/edit/", HTTP_HX_REQUEST="true").content.decode()
    assert edit.startswith(f'<li class="note editing" id="note-{note.pk}"') and 'value="4"' in edit
    saved = reader.post(
        f"/annotations/{note.pk}/edit/",
        {"name": "plausibility", "value": "2", "comment": "too direct"},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert saved.startswith(f'<li class="note" id="note-{note.pk}"') and "too direct" in saved
    note.refresh_from_db()
    assert (note.value_number, note.comment) == (2.0, "too direct")
    # someone else may read but not change it; an operator may
    other = User.objects.create_user("someone", password="x-long-password-1")
    client.force_login(other)
    assert f"/annotations/{note.pk}/edit/" not in client.get(url).content.decode()
    assert (
        client.post(f"/annotations/{note.pk}/edit/", {"name": "a", "value": "1"}).status_code == 403
    )
    assert client.post(f"/annotations/{note.pk}/delete/").status_code == 403
    client.force_login(operator_user)
    response = client.post(f"/annotations/{verdict.pk}/delete/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and response.content == b""
    assert not Annotation.objects.filter(pk=verdict.pk).exists()
    # the panels of attempts and LLM calls, and the index, filterable
    attempt = worlds["failed"]
    reader.post(f"/annotations/on/attempt/{attempt.pk}/", {"name": "blame", "value": "model"})
    index = body(reader, "/annotations/", target_kind="attempt")
    assert f'href="/attempts/{attempt.pk}/"' in index and "plausibility" not in index
    index = body(reader, "/annotations/", world="calm", name="plausibility")
    assert 'href="/worlds/calm/turns/1/"' in index and "too direct" in index
    assert body(reader, "/annotations/", 400, target_kind="planet").count("target_kind: ") == 1
    assert reader.get(f"/annotations/on/llm-call/{uuid.uuid4()}/?format=json").json()["count"] == 0
    # the pages that hold a panel load it after themselves
    assert 'hx-get="/annotations/on/turn/calm/1/"' in body(reader, "/worlds/calm/turns/1/")
    assert f'hx-get="/annotations/on/attempt/{attempt.pk}/"' in body(
        reader, f"/attempts/{attempt.pk}/"
    )


def test_memory_appends_read_as_lines(reader: Client, worlds: dict[str, Any]) -> None:
    turn = body(reader, "/worlds/calm/turns/2/")
    # the appended line, not the whole memory before and after
    assert "memory +" in turn and "Turn 2: I ate the crumb." in turn
    assert turn.count("Turn 1: I walked east to the crumb.") == 1  # in the state's memory list
    diff = body(reader, "/worlds/calm/diff/", **{"from": 0, "to": 2})
    memory = diff.split("entity_memory")[1].split("</section>")[0]
    assert memory.count('<li class="add">') == 2  # two lines, not one per character
    diff = body(reader, "/worlds/calm/diff/", **{"from": 1, "to": 2})
    assert "1 line unchanged" in diff


def test_long_text_is_clamped(reader: Client) -> None:
    data = _body("ant_on_plate_rules")
    data["environments"]["kitchen_plate"]["inline"] = "word " * 400
    scenario = scenario_assemble(data=data)["scenario_hash"]
    world_create(data={"slug": "wordy", "scenario_ref": {"hash": scenario}})
    page = body(reader, "/worlds/wordy/")
    assert '<details class="clamp">' in page and "show more" in page
    assert page.count("word word") < 400  # the text is sent once, the rest folded


def test_comparison_is_reachable_from_the_world_page(
    reader: Client, worlds: dict[str, Any]
) -> None:
    page = body(reader, "/worlds/calm/")
    assert 'action="/worlds/calm/compare/"' in page
    assert '<option value="stuck">' in page  # the same scenario's worlds are offered
    response = reader.get("/worlds/calm/compare/", {"other": "stuck"})
    assert response.status_code == 302 and response["Location"] == "/worlds/calm/compare/stuck/"
    assert reader.get("/worlds/calm/compare/", {"other": "Not A Slug"}).status_code == 400
    compare = body(reader, "/worlds/calm/compare/stuck/")
    assert "Identical" in compare and 'href="/worlds/stuck/compare/calm/"' in compare


def test_error_pages_have_human_titles(reader: Client) -> None:
    page = body(reader, "/worlds/nowhere/", 404)
    assert "<title>World not found · Chukwa</title>" in page
    assert "<h1>World not found</h1>" in page and "world_not_found" in page


def test_response_sources_show_their_interface(reader: Client, worlds: Any) -> None:
    page = body(reader, "/store/response-sources/")
    assert "<code>rule_policy</code>" not in page  # not a source
    scenario_assemble(data=_body("ant_on_plate"))
    page = body(reader, "/store/response-sources/")
    assert "<code>llm_chat_completions</code>" in page


def test_world_page_queries_do_not_grow_with_attempts(
    reader: Client, worlds: dict[str, Any], django_assert_num_queries: Callable[..., Any]
) -> None:
    body(reader, "/worlds/stuck/")
    with CaptureQueriesContext(connection) as few:
        body(reader, "/worlds/stuck/")
    stuck = World.objects.get(slug="stuck")
    for seq in range(2, 40):
        failed_attempt(stuck, seq=seq)
    with django_assert_num_queries(len(few)):
        page = body(reader, "/worlds/stuck/")
    assert page.count('href="/attempts/') >= 15 and "?attempt_offset=15" in page
