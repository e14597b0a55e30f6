"""A first run in headless Chromium: the toy-model banner on every page, the world form with
every option (an error shown on it, then a seeded world created), and the author page, at 1400
and 390 px, light and dark, none wider than the window. Screenshots in test-artifacts/
(first-run-*.png)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By

from scenarios_app.services import scenario_assemble
from tests.support.chromium import (
    chromium,
    full_page_shot,
    low_contrast,
    prefer_colour_scheme,
    sideways_overflow,
    sign_in,
    wait_for,
)
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO
from worlds_app.models import World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium(1400, 1000) as driver:
        yield driver


def test_the_banner_the_world_form_and_the_author_page(
    live_server: Any, browser: webdriver.Chrome, settings: Any
) -> None:
    settings.CHUKWA_EMBEDDED_MODEL = True
    user = User.objects.create_user("fred", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    scenario_assemble(data={**RULE_SCENARIO, "name": "coin_room"})
    sign_in(browser, live_server.url, "fred", PASSWORD)

    browser.get(f"{live_server.url}/")
    banner = browser.find_element(By.CSS_SELECTOR, ".toy-banner")
    assert "Embedded toy model" in banner.text and "CHUKWA_LLM_BASE_URL" in banner.text
    assert low_contrast(browser) == []
    full_page_shot(browser, "first-run-1-banner-1400", 1400)
    prefer_colour_scheme(browser, "dark")
    assert low_contrast(browser) == []
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "first-run-2-banner-390-dark", 390)
    prefer_colour_scheme(browser, "light")

    browser.set_window_size(1400, 1000)
    browser.get(f"{live_server.url}/worlds/")
    browser.find_element(By.LINK_TEXT, "New world").click()
    wait_for(lambda: "/create-world/" in browser.current_url, 10, "the world form")
    scenario = browser.find_element(By.ID, "wf-scenario")
    scenario.find_element(By.CSS_SELECTOR, "option:nth-child(2)").click()
    browser.find_element(By.ID, "wf-slug").send_keys("formed")
    browser.find_element(By.ID, "wf-seed").send_keys("-4")
    browser.find_element(By.ID, "wf-start").send_keys("2026-05-01T08:00:00+00:00")
    browser.find_element(By.CSS_SELECTOR, ".world-form button[type=submit]").click()
    error = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, ".author-error"), 10, "the form's error"
    )[0]
    assert "seed" in error.text
    assert browser.find_element(By.ID, "wf-slug").get_attribute("value") == "formed"
    assert low_contrast(browser) == []
    full_page_shot(browser, "first-run-3-world-form-error-1400", 1400)
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "first-run-4-world-form-390", 390)
    browser.set_window_size(1400, 1000)
    seed = browser.find_element(By.ID, "wf-seed")
    seed.clear()
    seed.send_keys("41")
    browser.find_element(By.CSS_SELECTOR, ".world-form button[type=submit]").click()
    wait_for(lambda: browser.current_url.endswith("/worlds/formed/"), 10, "the new world's page")
    assert World.objects.get(slug="formed").seed == 41
    assert "seed 41" in browser.find_element(By.CSS_SELECTOR, ".page-head").text

    browser.get(f"{live_server.url}/workflows/author/")
    browser.set_window_size(390, 900)
    too_wide = browser.execute_script(
        """return Array.from(document.querySelectorAll('main *'))
            .filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
            .map(el => el.tagName + '.' + el.className + '#' + el.id + ' '
                 + Math.round(el.getBoundingClientRect().right)).slice(0, 8);"""
    )
    assert sideways_overflow(browser) <= 0, too_wide
    full_page_shot(browser, "first-run-5-author-390", 390)
