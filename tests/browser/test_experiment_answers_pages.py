"""The results a methods reviewer reads, in headless Chromium (docs/experiments.md, "Results,
honestly"): the effects table with its new rows (pairs, both arms' means, an interval named by
its status when it is not shown, p and Holm's p, effect sizes, the row's note), the methods box
with its Copy button, and the per-turn plot of a count metric whose band stays at or above 0 —
at 1400 and 390 px. Screenshots land in test-artifacts/ (answers-*.png)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By

from scenarios_app.services import metric_put
from tests.support.chromium import (
    full_page_shot,
    low_contrast,
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
from worlds_app.services.experiments import experiment_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"
# how many of the turn's patches narrate a crumb: a small count, often 0
CRUMBS = "length(patches[?contains(narration, 'crumb')])"


def test_results_rows_methods_and_a_count_band_in_a_browser(
    live_server: Any, browser: webdriver.Chrome
) -> None:
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    scenario = stored_scenario()
    treated = expression_metric("treated", TREATED)
    crumbs = metric_put(
        content={
            "version": 1,
            "label": "crumb_lines",
            "kind": "expression",
            "aggregate": "sum",
            "expression": CRUMBS,
            "type": "count",
        }
    )["hash"]
    metrics = [treated, crumbs]
    experiment_create(
        data=design("answers", scenario, metrics, replicates=6, turns=3, primary={"hash": crumbs}),
        created_by="olga",
    )
    run_experiment("answers", metrics)
    results = experiment_results(slug="answers")
    count = next(r for r in results.results if r.metric.label == "crumb_lines")
    assert count.metric.type == "count" and count.metric.primary
    for arm in count.arms:  # the pointwise band of a count never dips below 0
        for point in arm.per_turn:
            assert point.ci_low is None or point.ci_low >= 0

    sign_in(browser, live_server.url, "olga", PASSWORD)
    for width in (1400, 390):
        browser.set_window_size(width, 1000)
        browser.get(f"{live_server.url}/experiments/answers/")
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".plot-area svg"), 30, "the plots")
        assert sideways_overflow(browser) <= 0, width
        assert low_contrast(browser) == [], width
        table = browser.find_elements(By.CSS_SELECTOR, ".results-effects")[0]
        effects = table.find_elements(By.CSS_SELECTOR, "thead th")
        assert [e.get_attribute("textContent") for e in effects] == [
            "Arm",
            "Pairs",
            "Control · arm",
            "Difference",
            "95% CI",
            "p",
            "p (Holm)",
            "Effect size",
        ]
        methods = browser.find_element(By.ID, "methods-text").text
        assert methods == results.methods
        # the plot's own data: the count metric's band, read back from the page
        data = json.loads(
            browser.find_element(By.ID, "experiment-plot-data").get_attribute("textContent")
        )
        plotted = next(m for m in data["metrics"] if m["metric"]["label"] == "crumb_lines")
        lows = [
            p["ci_low"] for a in plotted["arms"] for p in a["per_turn"] if p["ci_low"] is not None
        ]
        assert lows and min(lows) >= 0
        full_page_shot(browser, f"answers-results-{width}", width)
    browser.find_element(By.ID, "copy-methods").click()
    wait_for(lambda: browser.find_element(By.ID, "copy-methods").text != "Copy", 10, "the copy")
