"""A factorial experiment's and a stopping rule's results in headless Chromium
(docs/designs.md): the interaction plot is drawn per metric with a line per level of the second
factor, the stopping path shows every look against its boundary, both fit 390 px and read at AA
contrast; element screenshots go to docs/img/ (design-interaction-plot.png,
design-stopping-path.png) for a person to look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.support.chromium import full_page_shot, low_contrast, sideways_overflow, sign_in
from tests.surfaces.pages.test_experiment_pages import (
    expression_metric,
    run_experiment,
    stored_scenario,
)
from worlds_app.experiment_results import experiment_results
from worlds_app.services.experiment_stopping import stopping_step
from worlds_app.services.experiments import experiment_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"
IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
VALUE = (
    "(contains(world, 'thirst-yes') && contains(world, 'fountain-yes') && "
    "!ends_with(world, '--3')) || ends_with(world, '--1')"
)


def _factor(name: str, changes: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "levels": [{"label": "no"}, {"label": "yes", "fork": {"changes": changes}}],
    }


def test_the_interaction_plot_and_the_stopping_path(
    live_server: Any, browser: webdriver.Chrome
) -> None:
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    scenario = stored_scenario()
    drank = expression_metric("drank", VALUE)
    experiment_create(
        data={
            "slug": "grid",
            "base": {"hash": scenario},
            "factors": [
                _factor("thirst", {"description": "A thirsty ant."}),
                _factor("fountain", {"chronon_seconds": 120}),
            ],
            "replicates": 3,
            "turns": 1,
            "metrics": [{"hash": drank}],
        }
    )
    run_experiment("grid", [drank])
    treated = expression_metric("treated", "contains(world, '--treated--')")
    experiment_create(
        data={
            "slug": "early",
            "arms": [
                {"label": "control", "scenario_ref": {"hash": scenario}},
                {"label": "treated", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 2,
            "turns": 1,
            "metrics": [{"hash": treated}],
            "stopping": {
                "metric": {"hash": treated},
                "alpha": 0.05,
                "every": 2,
                "max_replicates": 14,
            },
        }
    )
    run_experiment("early", [treated])
    from worlds_app.models import Experiment

    early = Experiment.objects.get(slug="early")
    while stopping_step(experiment_id=early.pk):
        run_experiment("early", [treated])
    stopping = experiment_results(slug="early").stopping
    assert stopping is not None and stopping.reason == "stopped_early"

    base = live_server.url
    sign_in(browser, base, "olga", PASSWORD)
    IMG.mkdir(exist_ok=True)
    for width in (1400, 390):
        browser.set_window_size(width, 1000)
        browser.get(f"{base}/experiments/grid/")
        plot = browser.find_element(By.CSS_SELECTOR, "#factorial .interaction-plot svg")
        assert len(plot.find_elements(By.TAG_NAME, "polyline")) == 2  # a line per fountain level
        assert len(plot.find_elements(By.TAG_NAME, "circle")) == 4
        rows = browser.find_elements(By.CSS_SELECTOR, "#factorial table.results-factorial tbody tr")
        assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == [
            "thirst",
            "fountain",
            "thirst:fountain",
        ]
        assert sideways_overflow(browser) <= 0 and low_contrast(browser) == []
        if width == 1400:
            plot.screenshot(str(IMG / "design-interaction-plot.png"))
        full_page_shot(browser, f"design-grid-{width}", width)
        browser.get(f"{base}/experiments/early/")
        path = browser.find_element(By.CSS_SELECTOR, "#stopping .stopping-plot svg")
        assert len(path.find_elements(By.TAG_NAME, "circle")) == len(stopping.looks)
        looks = browser.find_elements(By.CSS_SELECTOR, "#stopping table.results-stopping tbody tr")
        assert len(looks) == len(stopping.looks) and "rejected" in looks[-1].text
        assert "stopped_early" in browser.find_element(By.ID, "stopping").text
        assert sideways_overflow(browser) <= 0 and low_contrast(browser) == []
        if width == 1400:
            path.screenshot(str(IMG / "design-stopping-path.png"))
        full_page_shot(browser, f"design-stopping-{width}", width)
