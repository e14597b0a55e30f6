"""An operator in headless Chromium launches an experiment from the form with an intervention on
one arm: a bad turn is refused next to its field with nothing written; the estimate shows the
expected time from the model's observed latency (turns run on the scripted model over real
HTTP, one call at a time) and warns that it is past ten minutes; the launch plans the
intervention on that arm's worlds only. The estimate is saved as
test-artifacts/experiment-form-time.png (docs/img/ holds a copy a person looked at)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.support.chromium import ARTIFACTS, full_page_shot, sideways_overflow, sign_in, wait_for
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import run_turn
from tests.surfaces.pages.test_experiment_pages import expression_metric
from tests.worlds_app.test_experiment_budget import API_KEY, USAGE, _final, _scenario
from worlds_app.models import Experiment, Intervention, World
from worlds_app.services.worlds import world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"
DELAY = 1.0  # each scripted answer's latency
PATCH = {
    "narration": "A breeze crosses the plate.",
    "effects": [
        {
            "op": "set_environment_content",
            "environment_label": "kitchen_plate",
            "content": "A plate in a breeze.",
        }
    ],
}


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("CHUKWA_LLM_API_KEY", API_KEY)
        monkeypatch.setenv("CHUKWA_LLM_MAX_CONCURRENCY", "1")
        server.route(
            lambda request: Reply(text=_final("The ant waits."), usage=USAGE, delay_s=DELAY)
        )
        yield server


def _type(browser: webdriver.Chrome, element_id: str, text: str) -> None:
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def test_launching_with_an_arm_intervention_and_a_time_warning(
    live_server: Any, browser: webdriver.Chrome, llm: ScriptedLLM
) -> None:
    base = live_server.url
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    scenario = _scenario()
    metric = expression_metric("turn_number", "turn")
    # the model's latency, observed: three turns of a world on the same source
    world_create(data={"slug": "stopwatch", "scenario_ref": {"hash": scenario}})
    for _ in range(3):
        assert run_turn("stopwatch").status == "committed"

    sign_in(browser, base, "olga", PASSWORD)
    browser.get(f"{base}/experiments/new/")
    _type(browser, "ex-slug", "thirsty")
    _type(browser, "ex-name", "Does a breeze move the ant?")
    for row in (0, 1):
        Select(browser.find_element(By.ID, f"arm-{row}-scenario")).select_by_value(scenario)
    _type(browser, "ex-replicates", "25")
    _type(browser, "ex-turns", "16")
    browser.find_element(By.CSS_SELECTOR, f"input[name=metrics][value='{metric}']").click()
    # the treatment arm's intervention, first at a turn the design does not have
    browser.find_element(By.CSS_SELECTOR, "#arm-1-iv summary").click()
    _type(browser, "arm-1-iv-turn", "17")
    _type(browser, "arm-1-iv-note", "a breeze")
    _type(browser, "arm-1-iv-patch", json.dumps(PATCH))
    browser.find_element(By.CSS_SELECTOR, "button[value=launch]").click()
    error = wait_for(lambda: browser.find_elements(By.ID, "arm-1-iv-turn-error"), 30, "the error")
    assert "16" in error[0].text  # the last turn it may name
    assert "arms[1].interventions[0].turn" in browser.find_element(By.ID, "form-error").text
    assert not Experiment.objects.exists() and not Intervention.objects.exists()
    # corrected, estimated: the time, its basis and the warning
    assert browser.find_element(By.ID, "arm-1-iv-patch").get_attribute("value") == json.dumps(PATCH)
    _type(browser, "arm-1-iv-turn", "1")
    browser.find_element(By.CSS_SELECTOR, "button[value=estimate]:not(.sr-only)").click()
    wait_for(lambda: browser.find_elements(By.ID, "estimate-time"), 30, "the estimate")
    # the launch's errors, which no longer hold, are gone with the estimate
    wait_for(lambda: not browser.find_elements(By.ID, "form-error"), 10, "the error cleared")
    assert not browser.find_elements(By.ID, "arm-1-iv-turn-error")
    warning = browser.find_element(By.ID, "estimate-time-warning").text
    assert "more than ten minutes" in warning
    assert browser.find_element(By.ID, "estimate-time").text.startswith("about ")
    basis = browser.find_element(By.ID, "estimate-time-basis").text
    assert "observed median" in basis and "calls of scripted-model" in basis
    assert "1 at a time (CHUKWA_LLM_MAX_CONCURRENCY=1)" in basis
    assert "800 calls over 50 worlds" in basis
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "experiment-form-time-1400", 1400)
    browser.find_element(By.ID, "estimate").screenshot(str(ARTIFACTS / "experiment-form-time.png"))
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "experiment-form-time-390", 390)
    browser.set_window_size(1400, 1000)

    # launched anyway: the intervention is planned on the treatment arm's worlds only
    browser.find_element(By.CSS_SELECTOR, "button[value=launch]").click()
    wait_for(lambda: browser.current_url.endswith("/experiments/thirsty/"), 60, "the launch")
    planned = Intervention.objects.filter(world__experiment__slug="thirsty")
    assert planned.count() == 25
    assert set(planned.values_list("world__arm", "turn", "note")) == {("treatment", 1, "a breeze")}
    assert World.objects.filter(experiment__slug="thirsty").count() == 50
