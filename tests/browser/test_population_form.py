"""An operator makes a population through the author page in headless Chromium: fills in two
axes (one added with the button), sees the live check name a bad weight beside its axis, then the
preview (hash, coverage, marginals, agents), stores it and lands on its page; then has the
scripted model write its biographies through the biographies page (one request per agent, by a
real worker, the run's page counting them as they come, then linking the new version).
At 1400 and 390 px; screenshots in test-artifacts/ (population-*.png)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from selenium import webdriver
from selenium.webdriver.common.by import By

from scenarios_app.models import Population
from scenarios_app.services import response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.chromium import full_page_shot, sideways_overflow, sign_in, wait_for
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


def _type(browser: webdriver.Chrome, element_id: str, text: str) -> None:
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def test_an_operator_makes_a_population_through_the_form(
    live_server: Any, browser: webdriver.Chrome, scripted_llm: ScriptedLLM
) -> None:
    base = live_server.url
    source = response_source_put(content=LLM_SOURCE)["hash"]
    user = User.objects.create_user("olga", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    sign_in(browser, base, "olga", PASSWORD)
    browser.get(f"{base}/store/populations/")
    browser.find_element(By.ID, "new-population").click()
    wait_for(lambda: "/populations/new/" in browser.current_url, 5, "the author page")

    _type(browser, "pf-label", "queue_walkers")
    _type(browser, "pf-size", "64")
    _type(browser, "pf-axis-0-name", "thirst")
    _type(browser, "pf-axis-0-categories", "barely thirsty: 2\nthirsty: 2\nvery thirsty: x")
    browser.find_element(By.ID, "add-axis").click()
    wait_for(lambda: browser.find_elements(By.ID, "pf-axis-1-name"), 5, "the second axis row")
    error = wait_for(
        lambda: (
            browser.find_element(By.ID, "pf-axis-0-error").is_displayed()
            and browser.find_element(By.ID, "pf-axis-0-error")
        ),
        5,
        "the bad weight named beside its axis",
    )
    assert "content.axes[0].categories[2].weight" in error.text
    full_page_shot(browser, "population-form-error-1400", 1400)

    _type(browser, "pf-axis-0-categories", "barely thirsty: 2\nthirsty: 2\nvery thirsty: 1")
    _type(browser, "pf-axis-1-name", "patience")
    browser.find_element(By.CSS_SELECTOR, "#pf-axis-1-kind option[value=numeric]").click()
    _type(browser, "pf-axis-1-low", "0")
    _type(browser, "pf-axis-1-high", "1")
    _type(browser, "pf-axis-1-marginal", "0, 0.5, 0.7\n0.5, 1, 0.3")
    _type(browser, "pf-tpl-state", "{{axes.thirst}}, patience {{axes.patience}}")
    valid = wait_for(
        lambda: (
            browser.find_elements(By.ID, "check-valid")
            and not browser.find_element(By.ID, "pf-axis-0-error").is_displayed()
            and "patience 0." in browser.find_element(By.ID, "preview-agents").text
        ),
        8,
        "the preview of a valid population",
    )
    assert valid
    rows = browser.find_elements(By.CSS_SELECTOR, "#preview-agents tbody tr")
    assert len(rows) == 10 and "agent_1" in rows[0].text
    marginal_axes = {
        r.get_attribute("data-axis")
        for r in browser.find_elements(By.CSS_SELECTOR, "#preview-marginals tbody tr")
    }
    assert marginal_axes == {"thirst", "patience"}
    full_page_shot(browser, "population-form-1400", 1400)
    browser.set_window_size(390, 844)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "population-form-390", 390)
    browser.set_window_size(1400, 1000)

    shown_hash = browser.find_element(By.CSS_SELECTOR, "#check-valid code").get_attribute(
        "data-hash"
    )
    browser.find_element(By.ID, "store-population").click()
    wait_for(lambda: "/store/populations/" in browser.current_url, 8, "the population's page")
    population = Population.objects.get()
    assert population.pk == shown_hash
    assert browser.current_url.endswith(f"/store/populations/{population.pk}/")
    assert population.content["axes"][1]["marginal"][0] == {"low": 0, "high": 0.5, "share": 0.7}
    assert browser.find_element(By.ID, "coverage").is_displayed()

    # biographies written by the scripted model, through the page: one call per agent, by a
    # real worker while the run's page follows it
    scripted_llm.route(
        lambda body: Reply(text="A life of " + body["messages"][-1]["content"][-40:], delay_s=0.05)
    )
    browser.find_element(By.ID, "write-biographies").click()
    wait_for(lambda: "/biographies/" in browser.current_url, 5, "the biographies page")
    browser.find_element(By.CSS_SELECTOR, f"#bf-source option[value='{source}']").click()
    _type(browser, "pf-tpl-memory", "{{biography}}")
    full_page_shot(browser, "population-biographies-1400", 1400)
    browser.set_window_size(1400, 1000)
    queue = f"population-form-{os.getpid()}"
    env = {"CHUKWA_DB_NAME": str(connection.settings_dict["NAME"])}
    with worker_process(queue, env=env, queue=queue), routed_to(queue):
        browser.find_element(By.ID, "write-biographies").click()
        wait_for(lambda: "/biography-runs/" in browser.current_url, 5, "the run's page")
        wait_for(
            lambda: 0 < int(browser.find_element(By.ID, "run-done").text) < 64,
            30,
            "the run's page counting the agents written",
        )
        full_page_shot(browser, "population-biographies-run-1400", 1400)
        wait_for(lambda: browser.find_elements(By.ID, "run-result"), 60, "the run's new version")
    assert browser.find_element(By.ID, "run").get_attribute("data-status") == "completed"
    full_page_shot(browser, "population-biographies-done-1400", 1400)
    browser.find_element(By.CSS_SELECTOR, "#run-result a").click()
    wait_for(
        lambda: browser.find_elements(By.ID, "biographies"), 10, "the new version with biographies"
    )
    assert len(scripted_llm.requests) == 64
    newest = Population.objects.exclude(pk=population.pk).get()
    assert browser.current_url.endswith(f"/store/populations/{newest.pk}/")
    assert "64, written by" in browser.find_element(By.ID, "biographies").text
    full_page_shot(browser, "population-with-biographies-1400", 1400)
