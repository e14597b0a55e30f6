"""An operator in headless Chromium launches a 2x2 factorial from the form: choosing "Factors"
shows the factorial half instead of the arms; a level whose fork the store refuses is shown
next to that level with nothing written; the estimate counts the four arms; the launch makes
them. Saved as test-artifacts/experiment-form-factors-{1400,390}.png."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.support.chromium import full_page_shot, sideways_overflow, sign_in, wait_for
from tests.surfaces.pages.test_experiment_pages import expression_metric, stored_scenario
from worlds_app.models import Experiment, World

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


def _type(browser: webdriver.Chrome, element_id: str, text: str) -> None:
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def test_launching_a_two_by_two_from_the_form(live_server: Any, browser: webdriver.Chrome) -> None:
    base = live_server.url
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    scenario = stored_scenario()
    metric = expression_metric("any", "`true`")

    sign_in(browser, base, "olga", PASSWORD)
    browser.get(f"{base}/experiments/new/")
    assert browser.find_element(By.ID, "arms").is_displayed()
    assert not browser.find_element(By.ID, "factors").is_displayed()
    browser.find_element(By.ID, "kind-factors").click()
    assert not browser.find_element(By.ID, "arms").is_displayed()
    assert browser.find_element(By.ID, "factors").is_displayed()
    _type(browser, "ex-slug", "grid")
    Select(browser.find_element(By.ID, "ex-base")).select_by_value(scenario)
    for i, (name, fork) in enumerate(
        [
            ("thirst", {"changes": {"description": "A thirsty ant."}}),
            ("fountain", {"changes": {"environment_removals": ["no_such_environment"]}}),
        ]
    ):
        _type(browser, f"factor-{i}-name", name)
        _type(browser, f"factor-{i}-level-0-label", "no")
        _type(browser, f"factor-{i}-level-1-label", "yes")
        _type(browser, f"factor-{i}-level-1-fork", json.dumps(fork))
    _type(browser, "ex-replicates", "3")
    _type(browser, "ex-turns", "1")
    browser.find_element(By.CSS_SELECTOR, f"input[name=metrics][value='{metric}']").click()
    browser.find_element(By.CSS_SELECTOR, "button[value=launch]").click()
    error = wait_for(
        lambda: browser.find_elements(By.ID, "factor-1-level-1-fork-error"), 30, "the error"
    )
    assert "no_such_environment" in error[0].text
    field = "factors[1].levels[1].fork.changes.environment_removals[0]"
    assert field in browser.find_element(By.ID, "form-error").text
    assert browser.find_element(By.ID, "factors").is_displayed()  # still the factorial half
    assert not Experiment.objects.exists()

    _type(browser, "factor-1-level-1-fork", json.dumps({"changes": {"chronon_seconds": 120}}))
    browser.find_element(By.CSS_SELECTOR, "button[value=estimate]:not(.sr-only)").click()
    wait_for(lambda: browser.find_elements(By.ID, "estimate-time"), 30, "the estimate")
    estimate = browser.find_element(By.ID, "estimate").text
    assert "12 worlds" in estimate, estimate
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "experiment-form-factors-1400", 1400)
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "experiment-form-factors-390", 390)
    browser.set_window_size(1400, 1000)

    browser.find_element(By.CSS_SELECTOR, "button[value=launch]").click()
    wait_for(lambda: browser.current_url.endswith("/experiments/grid/"), 60, "the launch")
    design = Experiment.objects.get(slug="grid").typed_design
    assert [a.label for a in design.arms] == [
        "thirst-no--fountain-no",
        "thirst-no--fountain-yes",
        "thirst-yes--fountain-no",
        "thirst-yes--fountain-yes",
    ]
    assert World.objects.filter(experiment__slug="grid").count() == 12
