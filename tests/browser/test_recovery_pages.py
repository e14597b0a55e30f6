"""A day of real work in headless Chromium: the side panel shows what a generation was sent and
what came back; a failed batch is retried with the button on the world page and its turns
commit; the turn page lists the tool calls. At 1400 and 390 px, light and dark. Screenshots in
test-artifacts/ (recovery-*.png)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.cognition_app.test_llm_retry import ANT_OK
from tests.cognition_app.test_park import BUY_CANDY, final, remember, set_state
from tests.support.chromium import (
    chromium,
    full_page_shot,
    low_contrast,
    prefer_colour_scheme,
    sideways_overflow,
    sign_in,
    wait_for,
)
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world
from tests.surfaces.pages.test_world_pages import run_turn
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO
from worlds_app.models import Intervention, TurnAttempt
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create
from worlds_app.services.interventions import intervention_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium(1400, 1000) as driver:
        yield driver


def _operator() -> None:
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])


def test_the_side_panel_shows_what_a_generation_was_sent_and_what_came_back(
    live_server: Any, browser: webdriver.Chrome, scripted_llm: ScriptedLLM
) -> None:
    _operator()
    create_world("ant_on_plate", "plate")
    scripted_llm.script(ANT_OK)
    attempt = run_turn("plate")
    sign_in(browser, live_server.url, "olga", PASSWORD)
    browser.get(f"{live_server.url}/attempts/{attempt.pk}/")
    rows = browser.find_elements(By.CSS_SELECTOR, '.wf-tree .wf-row[data-row^="i-"]')
    generation = next(r for r in rows if "generation" in r.text)
    generation.find_element(By.CSS_SELECTOR, ".wf-track").click()
    panel = browser.find_element(By.ID, f"detail-{generation.get_attribute('data-row')}")
    wait_for(panel.is_displayed, 10, "the generation's details")
    text = panel.text
    assert "INPUT" in text.upper() and "OUTPUT" in text.upper()
    assert "Acting subject" in text  # the user message that was sent
    assert "The ant walks east to the crumb." in text  # the reply, pretty-printed
    assert low_contrast(browser) == []
    full_page_shot(browser, "recovery-1-side-panel-1400", 1400)
    prefer_colour_scheme(browser, "dark")
    assert low_contrast(browser) == []
    full_page_shot(browser, "recovery-2-side-panel-dark", 1400)


def test_a_failed_batch_is_retried_from_the_world_page(
    live_server: Any, browser: webdriver.Chrome
) -> None:
    _operator()
    world_create(data={"slug": "coin", "scenario_ref": {"data": RULE_SCENARIO}})
    bad = intervention_create(
        slug="coin",
        data={
            "patch": {
                "narration": "The umbrella opens.",
                "effects": [{"op": "set_entity_state", "entity_id": "umbrella", "state": "open"}],
            },
            "turn": 2,
        },
        created_by="olga",
    )
    for attempt_id in turn_attempt_enqueue(slug="coin", count=3)["attempt_ids"]:
        turn_attempt_run(attempt_id=attempt_id, owner="test")
    assert list(TurnAttempt.objects.order_by("seq").values_list("status", flat=True)) == [
        "committed",
        "failed",
        "cancelled",
    ]
    Intervention.objects.filter(pk=bad.pk).delete()  # the cause, fixed
    sign_in(browser, live_server.url, "olga", PASSWORD)
    browser.get(f"{live_server.url}/worlds/")
    listed = browser.find_element(By.CSS_SELECTOR, "main").text
    assert "FAILED" in listed.upper() and "CANCELLED" not in listed.upper()
    browser.get(f"{live_server.url}/worlds/coin/")
    card = browser.find_element(By.CSS_SELECTOR, ".retry-card")
    assert "The last batch ended with a failure" in card.text
    # the attempts table fits its card at 1400 px (no sideways scrolling inside it)
    widths = browser.execute_script(
        "const w = document.querySelector('#queue .table-wrap');"
        "return [w.scrollWidth, w.clientWidth];"
    )
    assert widths[0] <= widths[1], widths
    assert low_contrast(browser) == []
    full_page_shot(browser, "recovery-3-world-failed-1400", 1400)
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "recovery-4-world-failed-390", 390)
    browser.set_window_size(1400, 1000)
    browser.find_element(By.CSS_SELECTOR, ".retry-card button[type=submit]").click()
    wait_for(lambda: "/attempts/" in browser.current_url, 10, "the new attempt's timeline")
    new = TurnAttempt.objects.filter(batch_size=2).order_by("seq")
    assert new.count() == 2
    for attempt in new:  # no worker in this test: run them here, as a worker would
        turn_attempt_run(attempt_id=str(attempt.pk), owner="test")
    browser.get(f"{live_server.url}/worlds/coin/")
    assert not browser.find_elements(By.CSS_SELECTOR, ".retry-card")
    assert "Current turn\n3" in browser.find_element(By.CSS_SELECTOR, ".stats").text
    full_page_shot(browser, "recovery-5-world-retried-1400", 1400)


def test_the_turn_page_lists_the_tool_calls(
    live_server: Any,
    browser: webdriver.Chrome,
    scripted_llm: ScriptedLLM,
    toy_sources: str,
) -> None:
    _operator()
    create_world("park", "candy")
    scripted_llm.script(
        BUY_CANDY,
        final(
            "Bob buys the last candy bar.",
            set_state("bob", "holding a candy bar"),
            remember("bob", "Turn 1: I bought a candy bar."),
        ),
    )
    assert run_turn("candy").status == "committed"
    sign_in(browser, live_server.url, "olga", PASSWORD)
    browser.get(f"{live_server.url}/worlds/candy/turns/1/")
    section = browser.find_element(By.ID, "tool-calls").text
    assert "buy_candy" in section and "candy_bar" in section
    assert low_contrast(browser) == []
    full_page_shot(browser, "recovery-6-turn-tool-calls-1400", 1400)
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "recovery-7-turn-tool-calls-390", 390)
