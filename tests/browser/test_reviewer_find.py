"""A reviewer in headless Chromium finds things on a real run: the failed attempt from the home
page in one click, the same pages at 390 px and in the dark; a comparison of two worlds reached
from the world page; an annotation added and edited in place, without a page reload.
Screenshots land in test-artifacts/ (reviewer-*.png)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from selenium import webdriver
from selenium.webdriver.common.by import By

from cognition_app.models import LlmCall
from scenarios_app.services import scenario_assemble, scenario_fork
from tests.browser.test_reviewer_flow import ARTIFACTS, _wait
from tests.support.chromium import low_contrast, prefer_colour_scheme
from tests.support.worlds import backend_checked, entity_of, fixture_body
from tests.surfaces.pages.test_world_pages import BAD_REPLY, make_world, run_turn
from worlds_app.models import Annotation, AttemptStatus
from worlds_app.services import world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


def sign_in(browser: webdriver.Chrome, base: str, username: str, target: str = "/") -> None:
    User.objects.create_user(username, password=PASSWORD)
    browser.get(f"{base}/accounts/login/?next={target}")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    _wait(lambda: "/accounts/login/" not in browser.current_url, 10, "the sign-in")


def shot(browser: webdriver.Chrome, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"reviewer-{name}.png"))


def full_height_shot(browser: webdriver.Chrome, name: str, width: int) -> None:
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(max(height + 140, 600), 4000))
    shot(browser, name)


@pytest.fixture
def failed_world(scripted_llm: Any, toy_sources: str) -> Iterator[str]:
    """A rule world that runs fine and an LLM world whose model never answers usefully, so its
    attempt fails after every retry was rejected."""
    make_world("ant_on_plate_rules", "calm")
    for _ in range(3):
        assert run_turn("calm").status == AttemptStatus.COMMITTED
    # every LLM call of the broken world is a rejected generation (the backend's conformance
    # check, an accepted LLM call of its own, is already done)
    backend_checked(scripted_llm.base_url, "gpt-4o-mini")
    make_world("ant_on_plate", "broken")
    scripted_llm.script(*[BAD_REPLY] * 6)
    attempt = run_turn("broken")
    assert attempt.status == AttemptStatus.FAILED
    yield str(attempt.pk)


def test_the_failed_attempt_is_one_click_from_home(
    live_server: Any, browser: webdriver.Chrome, failed_world: str
) -> None:
    sign_in(browser, live_server.url, "reviewer")
    browser.get(f"{live_server.url}/")
    assert low_contrast(browser) == []
    full_height_shot(browser, "home", 1400)
    browser.set_window_size(1400, 1000)
    failed = browser.find_element(By.CSS_SELECTOR, "#failed-recently li a[href*='/attempts/']")
    failed.click()  # the one click
    _wait(lambda: f"/attempts/{failed_world}/" in browser.current_url, 10, "the attempt page")
    assert "failed" in browser.find_element(By.CSS_SELECTOR, "h1").text.lower()
    # the failure's title is words, not the stored step code
    title = browser.find_element(By.CSS_SELECTOR, ".card.alert strong").text
    assert title == "Failed at model output (ant):", title
    assert low_contrast(browser) == []
    shot(browser, "failed-attempt")
    call = LlmCall.objects.filter(invocation__attempt_id=failed_world).order_by("started_at").last()
    assert call is not None
    last_call = f"/llm-calls/{call.pk}/"
    browser.get(f"{live_server.url}{last_call}")
    assert browser.find_element(By.ID, "call-verdict").text.lower() == "rejected"
    assert low_contrast(browser) == []

    # The world list says the world's last attempt failed, not "idle".
    browser.get(f"{live_server.url}/worlds/")
    row = browser.find_element(By.XPATH, "//tr[.//a[contains(@href, '/worlds/broken/')]]")
    assert "failed" in row.text.lower()
    assert low_contrast(browser) == []
    shot(browser, "world-list")
    # The indexes find it too, filtered; the LLM calls of the failure read "rejected".
    browser.get(f"{live_server.url}/attempts/?status=failed")
    links = browser.find_elements(By.CSS_SELECTOR, "table a[href*='/attempts/']")
    assert links and (links[0].get_attribute("href") or "").endswith(f"/attempts/{failed_world}/")
    assert low_contrast(browser) == []
    shot(browser, "attempt-index")
    browser.get(f"{live_server.url}/llm-calls/?world=broken")
    badges = [b.text.lower() for b in browser.find_elements(By.CSS_SELECTOR, "td .badge")]
    assert badges and set(badges) == {"rejected"}
    assert low_contrast(browser) == []
    shot(browser, "llm-call-index")

    # At 390 px the navigation folds behind a Menu button and nothing scrolls sideways.
    browser.set_window_size(390, 844)
    browser.get(f"{live_server.url}/")
    nav = browser.find_element(By.ID, "site-nav")
    toggle = browser.find_element(By.CSS_SELECTOR, ".nav-toggle")
    assert toggle.is_displayed() and not nav.is_displayed()
    assert browser.execute_script(
        "var d = document.documentElement; return d.scrollWidth <= d.clientWidth"
    )
    shot(browser, "home-390")
    toggle.click()
    _wait(nav.is_displayed, 5, "the menu to open")
    shot(browser, "home-390-menu")
    pages = ("/worlds/", "/worlds/calm/", "/worlds/calm/turns/2/", "/attempts/", "/llm-calls/")
    for path in (*pages, "/annotations/", "/worlds/calm/entities/ant/", "/worlds/calm/diff/"):
        browser.get(f"{live_server.url}{path}")
        # nothing wider than the viewport (its scrollbar left out): no sideways scrolling
        width, room = browser.execute_script(
            "var d = document.documentElement; return [d.scrollWidth, d.clientWidth]"
        )
        assert width <= room, (path, width, room)
    browser.get(f"{live_server.url}/worlds/calm/")
    full_height_shot(browser, "world-390", 390)

    # Dark mode follows the system's preference.
    browser.set_window_size(1400, 1000)
    prefer_colour_scheme(browser, "dark")
    browser.get(f"{live_server.url}/")
    background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 19, 27)"
    assert low_contrast(browser) == []
    shot(browser, "home-dark")
    for path in (
        "/worlds/",
        "/worlds/calm/",
        "/attempts/",
        "/llm-calls/",
        "/worlds/calm/turns/1/",
        f"/attempts/{failed_world}/",
        last_call,
    ):
        browser.get(f"{live_server.url}{path}")
        assert low_contrast(browser) == [], path
    shot(browser, "failed-llm-call-dark")
    browser.get(f"{live_server.url}/attempts/{failed_world}/")
    full_height_shot(browser, "failed-attempt-dark", 1280)
    browser.set_window_size(1400, 1000)
    browser.get(f"{live_server.url}/worlds/calm/")
    shot(browser, "world-dark")


def _fork_with_far_crumb() -> str:
    base = fixture_body("ant_on_plate_rules")
    parent = scenario_assemble(data=base)["scenario_hash"]
    entity_of(base, "crumb")["state"] = "a bread crumb that rolled off the plate, out of reach."
    return scenario_fork(
        data={"primary_parent": {"hash": parent}, "changes": {"entities": base["entities"]}}
    )["scenario_hash"]


def test_compare_two_worlds_and_annotate_in_place(
    live_server: Any, browser: webdriver.Chrome
) -> None:
    make_world("ant_on_plate_rules", "base")
    world_create(data={"slug": "fork", "scenario_ref": {"hash": _fork_with_far_crumb()}})
    for slug in ("base", "fork"):
        for _ in range(3):
            assert run_turn(slug).status == AttemptStatus.COMMITTED

    sign_in(browser, live_server.url, "reviewer", "/worlds/base/")
    _wait(lambda: browser.current_url.split("?")[0].endswith("/worlds/base/"), 10, "world")
    other = browser.find_element(By.ID, "compare-other")
    other.send_keys("fork")
    other.submit()
    _wait(lambda: "/worlds/base/compare/fork/" in browser.current_url, 10, "the comparison")
    head = browser.find_element(By.CSS_SELECTOR, ".divergence").text
    assert "First divergence at turn 0" in head
    turn_one = browser.find_element(By.ID, "turn-1")
    sides = turn_one.find_elements(By.CSS_SELECTOR, ".side-by-side > div")
    assert len(sides) == 2 and all(s.text for s in sides)
    assert sides[0].text != sides[1].text  # the worlds did different things
    assert browser.find_element(By.CSS_SELECTOR, "nav.pager").text == "turns 0–3 (4 of 4)"
    assert low_contrast(browser) == []
    full_height_shot(browser, "compare", 1400)
    browser.set_window_size(1400, 1000)

    # An annotation on turn 1, added and edited where it stands (no page reload).
    browser.get(f"{live_server.url}/worlds/base/turns/1/")
    panel = _wait(lambda: browser.find_elements(By.ID, "annotations-turn-base-1"), 10, "the panel")[
        0
    ]
    browser.execute_script("window.__sameDocument = true")
    panel.find_element(By.CSS_SELECTOR, "details.note-new summary").click()
    panel.find_element(By.NAME, "name").send_keys("plausibility")
    panel.find_element(By.NAME, "value").send_keys("4")
    panel.find_element(By.NAME, "comment").send_keys("The ant goes straight for the crumb.")
    panel.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _wait(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#annotations-turn-base-1 .note-value"),
        10,
        "the new annotation",
    )
    note = Annotation.objects.get()
    row = browser.find_element(By.ID, f"note-{note.pk}")
    assert row.find_element(By.CSS_SELECTOR, ".note-value").text == "4"
    shot(browser, "annotation-added")
    row.find_element(By.CSS_SELECTOR, "a.note-edit").click()
    form = _wait(
        lambda: browser.find_elements(By.CSS_SELECTOR, f"#note-{note.pk} form"), 10, "the form"
    )[0]
    value = form.find_element(By.NAME, "value")
    assert value.get_attribute("value") == "4"
    value.clear()
    value.send_keys("2")
    comment = form.find_element(By.NAME, "comment")
    comment.clear()
    comment.send_keys("On a second look, too direct.")
    shot(browser, "annotation-editing")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]:not(.danger)").click()
    _wait(
        lambda: not browser.find_elements(By.CSS_SELECTOR, f"#note-{note.pk} form"),
        10,
        "the saved row",
    )
    row = browser.find_element(By.ID, f"note-{note.pk}")
    assert row.find_element(By.CSS_SELECTOR, ".note-value").text == "2"
    assert "too direct" in row.text
    assert browser.execute_script("return window.__sameDocument === true")
    note.refresh_from_db()
    assert (note.value_number, note.comment) == (2.0, "On a second look, too direct.")
    assert low_contrast(browser) == []
    shot(browser, "annotation-edited")

    browser.get(f"{live_server.url}/annotations/?world=base")
    assert "plausibility" in browser.page_source and "too direct" in browser.page_source
    shot(browser, "annotation-index")


@pytest.fixture(autouse=True)
def _artifacts() -> None:
    Path(ARTIFACTS).mkdir(exist_ok=True)
