"""An operator in headless Chromium reads a branch's page (its seed, its origin linked to the
parent's turn, the interventions) and adds an intervention with the form, whose patch is
checked as it is typed; the parent's turn shows the operator's patch. At 1400 and 390 px, light
and dark. Screenshots land in test-artifacts/ (counterfactual-*.png)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.support.chromium import (
    full_page_shot,
    low_contrast,
    prefer_colour_scheme,
    sideways_overflow,
    wait_for,
)
from tests.surfaces.pages.test_world_pages import run_turn
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO
from worlds_app.models import Intervention
from worlds_app.services import world_create
from worlds_app.services.interventions import intervention_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


def test_a_branch_page_and_an_intervention_added_in_the_browser(
    live_server: object, browser: webdriver.Chrome
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    operator = User.objects.create_user("alice", password=PASSWORD)
    operator.groups.add(Group.objects.get_or_create(name="operators")[0])
    world_create(
        data={
            "slug": "coin-parent",
            "scenario_ref": {"data": RULE_SCENARIO},
            "seed": 2026,
            "start_time": "2026-05-01T08:00:00+00:00",
        }
    )
    run_turn("coin-parent")
    intervention_create(
        slug="coin-parent",
        data={
            "patch": {
                "narration": "Rain starts to drum on the window.",
                "effects": [
                    {
                        "op": "set_environment_content",
                        "environment_label": "room",
                        "content": "A bare room with a table; rain drums on the window.",
                    }
                ],
            },
            "note": "rain starts",
        },
        created_by="alice",
    )
    run_turn("coin-parent")
    run_turn("coin-parent")
    world_create(
        data={"slug": "coin-branch", "branch_from": {"world": "coin-parent", "turn": 2}, "seed": 9}
    )
    run_turn("coin-branch")

    browser.get(f"{base}/accounts/login/?next=/worlds/coin-branch/")
    browser.find_element(By.NAME, "username").send_keys("alice")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(lambda: "/worlds/coin-branch/" in browser.current_url, 10, "the world page")
    head = browser.find_element(By.CSS_SELECTOR, ".page-head").text
    assert "seed 9" in head and "branch of coin-parent at turn 2" in head
    origin = browser.find_element(By.LINK_TEXT, "coin-parent at turn 2")
    assert origin.get_attribute("href").endswith("/worlds/coin-parent/turns/2/")
    assert "Branch point: a copy of coin-parent's turn 2." in browser.page_source

    # The patch is checked as it is typed: a wrong entity id, then a right one.
    editor = browser.find_element(By.ID, "intervention-patch")
    wrong = {
        "narration": "The coin is knocked over.",
        "effects": [{"op": "set_entity_state", "entity_id": "coins", "state": "on its edge"}],
    }
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    editor.send_keys(json.dumps(wrong))
    check = wait_for(
        lambda: (
            "does not match any entity" in browser.find_element(By.ID, "intervention-check").text
            and browser.find_element(By.ID, "intervention-check")
        ),
        10,
        "the live check's complaint",
    )
    assert "did you mean" in check.text or "coin" in check.text
    full_page_shot(browser, "counterfactual-1-form-invalid-1400", 1400)
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    editor.send_keys(
        json.dumps({**wrong, "effects": [{**wrong["effects"][0], "entity_id": "coin"}]})
    )
    wait_for(
        lambda: "A valid WorldPatch" in browser.find_element(By.ID, "intervention-check").text,
        10,
        "the live check's approval",
    )
    browser.find_element(By.ID, "intervention-note").send_keys("a gust of wind")
    browser.find_element(By.CSS_SELECTOR, "#interventions button[type=submit]").click()
    wait_for(lambda: "#interventions" in browser.current_url, 10, "the redirect to the card")
    (added,) = Intervention.objects.filter(world__slug="coin-branch")
    assert (added.turn, added.created_by, added.note) == (4, "alice", "a gust of wind")
    card = browser.find_element(By.ID, "interventions").text
    assert "operator alice" in card and "a gust of wind" in card and "PENDING" in card.upper()
    assert low_contrast(browser) == []
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "counterfactual-2-branch-1400", 1400)
    prefer_colour_scheme(browser, "dark")
    assert low_contrast(browser) == []
    full_page_shot(browser, "counterfactual-3-branch-1400-dark", 1400)
    prefer_colour_scheme(browser, "light")
    browser.set_window_size(390, 900)
    browser.get(f"{base}/worlds/coin-branch/")
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "counterfactual-4-branch-390", 390)

    # The parent's turn 2 shows the operator's patch first, with the note.
    browser.set_window_size(1400, 1000)
    browser.get(f"{base}/worlds/coin-parent/turns/2/")
    patches = browser.find_element(By.CSS_SELECTOR, ".patch").text
    assert "operator alice" in patches and "rain starts" in patches
    full_page_shot(browser, "counterfactual-5-parent-turn-with-intervention", 1400)
