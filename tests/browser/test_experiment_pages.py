"""An operator in headless Chromium: the experiment index (empty, a running one, fifty), a running
experiment whose progress changes without a reload as turns commit, a completed one with its
charts drawn and its table saying what ``experiment_results`` says (at 1400 and 390 px, light and
dark), and the launch form showing its estimate. Screenshots land in test-artifacts/
(experiments-*.png)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from chukwa_core.experiment_results_types import ExperimentResults
from tests.support.chromium import (
    ARTIFACTS,
    full_page_shot,
    low_contrast,
    prefer_colour_scheme,
    sideways_overflow,
    sign_in,
    wait_for,
)
from tests.surfaces.pages.test_experiment_pages import (
    TREATED,
    design,
    expression_metric,
    run_experiment,
    stored_scenario,
)
from worlds_app.experiment_results import experiment_results
from worlds_app.models import TurnAttempt
from worlds_app.services import turn_attempt_run
from worlds_app.services.experiments import experiment_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"
VARIED = "length(join(' ', patches[].narration))"


def _operator() -> None:
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])


def _text(browser: webdriver.Chrome, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def _look(browser: webdriver.Chrome, name: str, width: int) -> None:
    """The page fits the width, reads at AA contrast, and is saved for a person to look at."""
    assert sideways_overflow(browser) <= 0, name
    assert low_contrast(browser) == [], name
    full_page_shot(browser, name, width)


def test_experiment_pages_in_a_browser(live_server: Any, browser: webdriver.Chrome) -> None:
    base = live_server.url
    _operator()
    sign_in(browser, base, "olga", PASSWORD)

    browser.get(f"{base}/experiments/")
    assert "No experiments yet" in browser.find_element(By.TAG_NAME, "main").text
    assert browser.find_element(By.CSS_SELECTOR, "#site-nav a[href='/experiments/']")
    _look(browser, "experiments-1-index-empty-1400", 1400)

    # a running experiment: its progress changes as turns commit, without a reload
    scenario = stored_scenario()
    treated, varied = expression_metric("treated", TREATED), expression_metric("varied", VARIED)
    metrics = [treated, varied]
    experiment_create(
        data=design("breeze", scenario, metrics, replicates=6, turns=4), created_by="olga"
    )
    browser.get(f"{base}/experiments/")
    _look(browser, "experiments-2-index-one-1400", 1400)
    browser.get(f"{base}/experiments/breeze/")
    assert _text(browser, "experiment-status") == "RUNNING"
    assert _text(browser, "progress-turns") == "0"
    browser.execute_script("window.sameDocument = true")
    first = (
        TurnAttempt.objects.filter(world__slug="breeze--control--1", status="queued")
        .order_by("seq")
        .values_list("id", flat=True)
        .first()
    )
    assert turn_attempt_run(attempt_id=str(first), owner="test") == "committed"
    wait_for(lambda: _text(browser, "progress-turns") == "1", 30, "the progress to show turn 1")
    assert _text(browser, "progress-measured") == "0"
    assert len(browser.find_elements(By.CSS_SELECTOR, ".no-values")) == 2  # no empty charts
    assert browser.execute_script("return window.sameDocument") is True  # no reload
    _look(browser, "experiments-3-running-1400", 1400)

    # every turn run and measured: when the poll sees it finished, the page reloads once with
    # its results and charts
    run_experiment("breeze", metrics)
    wait_for(lambda: _text(browser, "experiment-status") == "COMPLETED", 30, "the completed status")
    wait_for(
        lambda: browser.execute_script("return window.sameDocument") is None,
        30,
        "the reload with the results",
    )
    results = experiment_results(slug="breeze")
    _check_results(browser, results)
    _look(browser, "experiments-4-completed-1400", 1400)
    prefer_colour_scheme(browser, "dark")
    _drawn(browser)
    _look(browser, "experiments-5-completed-1400-dark", 1400)
    _section_shots(browser, "experiments-5-completed-1400-dark")
    browser.set_window_size(390, 900)
    browser.get(f"{base}/experiments/breeze/")
    _drawn(browser)
    _look(browser, "experiments-6-completed-390-dark", 390)
    _section_shots(browser, "experiments-6-completed-390-dark")
    prefer_colour_scheme(browser, "light")
    browser.set_window_size(390, 900)
    browser.get(f"{base}/experiments/breeze/")
    _drawn(browser)
    _check_results(browser, results)
    _look(browser, "experiments-7-completed-390", 390)
    _section_shots(browser, "experiments-7-completed-390")

    # the launch form: arms, metrics, and the estimate before launching
    browser.set_window_size(1400, 1000)
    browser.get(f"{base}/experiments/new/")
    browser.find_element(By.ID, "ex-slug").send_keys("gale")
    for row in (0, 1):
        Select(browser.find_element(By.ID, f"arm-{row}-scenario")).select_by_value(scenario)
    browser.find_element(By.CSS_SELECTOR, f"input[name=metrics][value='{treated}']").click()
    browser.find_element(By.ID, "ex-cost").send_keys("2.5")
    browser.find_element(By.CSS_SELECTOR, "button[value=estimate]:not(.sr-only)").click()
    wait_for(lambda: browser.find_elements(By.ID, "estimate-calls"), 30, "the estimate")
    assert browser.current_url.endswith("/experiments/new/")  # swapped in place
    assert _text(browser, "estimate-budget") in ("fits", "exceeds it", "cannot tell")
    _look(browser, "experiments-8-form-estimate-1400", 1400)
    browser.set_window_size(390, 900)
    browser.save_screenshot(str(ARTIFACTS / "experiments-9-form-390-top.png"))
    _look(browser, "experiments-9-form-390", 390)
    browser.set_window_size(1400, 1000)
    browser.find_element(By.CSS_SELECTOR, "button[value=launch]").click()
    wait_for(lambda: browser.current_url.endswith("/experiments/gale/"), 30, "the launch")

    # fifty experiments on the index
    for n in range(48):
        experiment_create(
            data={**design(f"sweep-{n:02d}", scenario, [treated]), "replicates": 1, "turns": 1}
        )
    browser.get(f"{base}/experiments/")
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.experiments tbody tr")) == 50
    _look(browser, "experiments-10-index-fifty-1400", 1400)
    browser.set_window_size(390, 900)
    browser.get(f"{base}/experiments/")
    browser.save_screenshot(str(ARTIFACTS / "experiments-11-index-fifty-390-top.png"))
    _look(browser, "experiments-11-index-fifty-390", 390)


def _section_shots(browser: webdriver.Chrome, name: str) -> None:
    """The progress card and each metric's results on their own, legible at full size."""
    for n, section in enumerate(browser.find_elements(By.CSS_SELECTOR, "#progress, .result")):
        section.screenshot(str(ARTIFACTS / f"{name}-part{n}.png"))


def _drawn(browser: webdriver.Chrome) -> None:
    """Every chart drawn as an SVG with marks in it. A change of colour scheme draws the charts
    again (new SVG elements): an element found before that is stale, so the charts are looked
    at afresh until one look finds them all drawn."""
    areas = browser.find_elements(By.CSS_SELECTOR, ".plot-area[data-plot]")
    assert len(areas) == 4  # two metrics, two charts each

    def drawn() -> bool:
        try:
            for area in browser.find_elements(By.CSS_SELECTOR, ".plot-area[data-plot]"):
                svg = area.find_element(By.CSS_SELECTOR, "svg[class^=plot]")
                if area.get_attribute("data-drawn") != "true":
                    return False
                if not svg.find_elements(By.CSS_SELECTOR, "circle, path"):
                    return False
                if svg.size["width"] > area.size["width"] + 1:
                    raise AssertionError(f"a chart wider than its area: {svg.size['width']} px")
        except (StaleElementReferenceException, NoSuchElementException):
            return False  # drawn again meanwhile: look again
        return True

    wait_for(drawn, 30, "the charts drawn, with marks, within their areas")


def _check_results(browser: webdriver.Chrome, results: ExperimentResults) -> None:
    """The table's numbers are experiment_results' (exactly, in the cells' data attributes)."""
    for metric in results.results:
        section = browser.find_element(
            By.CSS_SELECTOR, f"section[data-metric='{metric.metric.hash}']"
        )
        for arm in metric.arms:
            row = section.find_element(
                By.CSS_SELECTOR, f"table.results-arms tr[data-arm='{arm.arm}']"
            )
            shown = arm.ci_status == "shown"
            for key in ("mean", "sd", *(("ci_low", "ci_high") if shown else ())):
                cell = row.find_element(By.CSS_SELECTOR, f"[data-key='{key}']")
                value = getattr(arm, key)
                expected = "" if value is None else repr(value)
                assert cell.get_attribute("data-value") == expected, (arm.arm, key)
            ci = row.find_element(By.CSS_SELECTOR, "[data-key='ci']")
            assert ci.get_attribute("data-status") == arm.ci_status
            assert row.find_element(By.CSS_SELECTOR, "[data-key='n']").text == str(arm.n)
        for effect in metric.effects:
            row = section.find_element(
                By.CSS_SELECTOR, f"table.results-effects tr[data-arm='{effect.arm}']"
            )
            shown = effect.ci_status == "shown"
            keys = ("difference", "p_value", "p_holm", *(("ci_low", "ci_high") if shown else ()))
            for key in keys:
                cell = row.find_element(By.CSS_SELECTOR, f"[data-key='{key}']")
                assert cell.get_attribute("data-value") == repr(getattr(effect, key)), key
