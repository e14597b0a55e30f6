"""Pages of a turn of many subjects. The attempt timeline (surfaces/pages/attempts.py) shows 50
subjects at a time, or only those with a problem, with the turn's own rows on every page; the
turn page shows 50 patches at a time with their transitions; the figures count everything and
``?format=json`` gives all of it. Rendered whole at 500 agents, the attempt page was 4 MB and
the turn page 1 MB."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from surfaces.pages.attempts import SUBJECTS_PER_PAGE
from tests.support.crowds import crowded_world
from tests.surfaces.pages.test_world_pages import ANT_OK, BAD_REPLY, run_turn
from worlds_app.models import AttemptStatus, TurnAttempt

pytestmark = pytest.mark.django_db
MITES = 60


@pytest.fixture
def reader(client: Client, reader_user: User) -> Client:
    client.force_login(reader_user)
    return client


def _crowded(fixture: str, slug: str) -> TurnAttempt:
    """The fixture's plate with sixty rule-policy mites on it, after one turn."""
    crowded_world(fixture, slug, mites=MITES, environment="kitchen_plate")
    attempt = run_turn(slug)
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    return attempt


@pytest.fixture
def attempt() -> TurnAttempt:
    return _crowded("ant_on_plate_rules", "mites")


def _subjects(html: str) -> list[str]:
    return re.findall(r'<details class="wf-node t-group k-subject" id="s-([^"]+)"', html)


def test_the_page_shows_a_window_of_subjects(reader: Client, attempt: TurnAttempt) -> None:
    subjects = 1 + MITES  # the ant and the mites
    url = f"/attempts/{attempt.pk}/"
    first = reader.get(url).content.decode()
    shown = _subjects(first)
    assert len(shown) == SUBJECTS_PER_PAGE
    assert f"<strong>{subjects}</strong> subjects · showing 1–{SUBJECTS_PER_PAGE}" in first
    assert "turn committed" in first.lower()  # the turn's own rows are on every page
    assert f'href="{url}?subject_offset={SUBJECTS_PER_PAGE}"' in first
    # the figures at the top count the whole attempt; the raw events are the window's
    events = attempt.events.count()
    assert f"of {events}: the turn" in first

    rest = reader.get(f"{url}?subject_offset={SUBJECTS_PER_PAGE}").content.decode()
    more = _subjects(rest)
    assert len(more) == subjects - SUBJECTS_PER_PAGE
    assert not set(shown) & set(more)
    assert "turn committed" in rest.lower()
    assert f"showing {SUBJECTS_PER_PAGE + 1}–{subjects}" in rest

    # the JSON answer is the whole attempt
    rows: list[dict[str, Any]] = reader.get(f"{url}?format=json").json()["timeline"]
    assert sum(1 for r in rows if r["type"] == "group" and r["kind"] == "subject") == subjects


def test_only_the_subjects_with_problems(reader: Client, attempt: TurnAttempt) -> None:
    url = f"/attempts/{attempt.pk}/"
    page = reader.get(f"{url}?only=problems").content.decode()
    assert _subjects(page) == []
    assert f"<strong>0</strong> of {1 + MITES} subjects had a problem" in page
    assert f'href="{url}"' in page  # back to all of them


def test_only_the_subject_whose_reply_was_rejected(
    reader: Client,
    scripted_llm: Any,
    toy_sources: str,
) -> None:
    scripted_llm.script(BAD_REPLY, ANT_OK)
    attempt = _crowded("ant_on_plate", "llm_mites")
    url = f"/attempts/{attempt.pk}/"
    first = reader.get(url).content.decode()
    assert f'href="{url}?only=problems">Only those with problems (1)</a>' in first
    page = reader.get(f"{url}?only=problems").content.decode()
    assert _subjects(page) == ["ant"]
    assert f"<strong>1</strong> of {1 + MITES} subjects had a problem" in page
    assert "rejected" in page


@pytest.mark.parametrize(
    ("query", "field"), [("only=everything", "only"), ("subject_offset=-1", "subject_offset")]
)
def test_a_bad_window_is_a_400_naming_the_field(
    reader: Client, attempt: TurnAttempt, query: str, field: str
) -> None:
    response = reader.get(f"/attempts/{attempt.pk}/?{query}&format=json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_query"
    assert error["details"]["field"] == field
    assert reader.get(f"/attempts/{attempt.pk}/?{query}").status_code == 400


def test_a_small_attempt_is_not_windowed(reader: Client) -> None:
    from tests.surfaces.pages.test_world_pages import make_world

    make_world("ant_on_plate_rules", "small")
    attempt = run_turn("small")
    page = reader.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "wf-window" not in page
    assert len(_subjects(page)) == 1


def test_the_turn_page_shows_a_window_of_patches(reader: Client, attempt: TurnAttempt) -> None:
    patches = 1 + MITES
    url = f"/worlds/mites/turns/{attempt.produced_turn}/"
    first = reader.get(url).content.decode()
    assert first.count('<div class="patch">') == 50
    assert f"1–50 of {patches}, with their transitions" in first
    assert f'href="{url}?patch_offset=50"' in first
    total = attempt.transitions.count()
    shown = first.count('<td class="change">')
    assert 0 < shown < total
    assert f"{shown} of {total}: those of the patches shown" in first
    rest = reader.get(f"{url}?patch_offset=50").content.decode()
    assert rest.count('<div class="patch">') == patches - 50
    assert shown + rest.count('<td class="change">') == total
    data = reader.get(f"{url}?format=json").json()
    assert (len(data["patches"]), len(data["transitions"])) == (patches, total)
    bad = reader.get(f"{url}?patch_offset=many&format=json")
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["field"] == "patch_offset"


def test_the_api_gives_an_attempts_events_in_windows(reader: Client, attempt: TurnAttempt) -> None:
    """``GET /api/attempts/<id>/`` gives every event by default (at 500 agents, 781 kB);
    ``events_limit`` and ``events_after`` give a window, and ``events_next_after`` where the
    next one starts, so that windows put together are the whole list."""
    url = f"/api/attempts/{attempt.pk}/"
    whole = reader.get(url).json()
    every = [e["seq"] for e in whole["events"]]
    assert len(every) == attempt.events.count() > 100
    assert whole["events_next_after"] is None

    seen: list[int] = []
    after = 0
    while True:
        window = reader.get(url, {"events_after": after, "events_limit": 40}).json()
        seen += [e["seq"] for e in window["events"]]
        assert len(window["events"]) <= 40
        assert window["source_invocations"] == whole["source_invocations"]
        if window["events_next_after"] is None:
            break
        after = window["events_next_after"]
        assert after == seen[-1]
    assert seen == every

    tail = reader.get(url, {"events_after": every[-3]}).json()  # a client following along
    assert [e["seq"] for e in tail["events"]] == every[-2:]
    assert tail["events_next_after"] is None
    exact = reader.get(url, {"events_limit": len(every)}).json()
    assert len(exact["events"]) == len(every) and exact["events_next_after"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"events_limit": 0}, "events_limit"),
        ({"events_limit": 5001}, "events_limit"),
        ({"events_after": -1}, "events_after"),
        ({"events_after": "x"}, "events_after"),
    ],
)
def test_a_bad_event_window_is_a_400_naming_the_field(
    reader: Client, attempt: TurnAttempt, query: dict[str, Any], field: str
) -> None:
    response = reader.get(f"/api/attempts/{attempt.pk}/", query)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("invalid_query", field)


def test_other_query_keys_of_an_attempt_are_still_ignored(
    reader: Client, attempt: TurnAttempt
) -> None:
    response = reader.get(f"/api/attempts/{attempt.pk}/", {"anything": "1"})
    assert response.status_code == 200
    assert response.json()["events_next_after"] is None
