"""A reviewer in headless Chromium reads measured metrics: the world page's per-turn strips
(values, errors, the baseline), a turn's measurements, the metric page with its agreement with
reviewers, and the turn's annotation form offering the metric labels as names. At 1400 and 390 px,
light and dark. Screenshots land in test-artifacts/ (metrics-*.png)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from scenarios_app.services import metric_put, response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.chromium import (
    full_page_shot,
    low_contrast,
    prefer_colour_scheme,
    sideways_overflow,
    sign_in,
    wait_for,
)
from tests.support.scripted_llm import ScriptedLLM
from tests.worlds_app.test_measurements import DRANK, TOOL_CALLS, buyers_world, expression, judge
from worlds_app.models import Annotation, Turn
from worlds_app.services.measurements import world_measure

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


def test_measured_metrics_on_the_world_turn_and_metric_pages(
    live_server: object, browser: webdriver.Chrome, toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    reviewer = User.objects.create_user("rita", password=PASSWORD)
    world = buyers_world("buyers", 6)
    bought = metric_put(content=expression("bought", DRANK))["hash"]
    calls = metric_put(content=expression("tool_calls", TOOL_CALLS, "sum"))["hash"]
    state = metric_put(content=expression("ann_state", "entities.ann.state", "last"))["hash"]
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    plausible = metric_put(content=judge(source))["hash"]
    scripted_llm.script(
        *(
            json.dumps({"score": 5 - n % 3, "rationale": f"Turn {n}: nothing strains belief."})
            for n in range(7)
        )
    )
    world_measure(world_id=world.pk, metric_hashes=[bought, calls, state, plausible])
    for number, label in ((1, 1), (2, 0), (3, 0), (4, 0)):
        Annotation.objects.create(
            target_kind="turn",
            turn=Turn.objects.get(world=world, number=number),
            name="bought",
            value_kind="number",
            value_number=label,
            author=reviewer,
        )

    sign_in(browser, base, "rita", PASSWORD)
    browser.get(f"{base}/worlds/buyers/")
    card = browser.find_element(By.ID, "metrics")
    text = card.text
    assert "bought" in text and "tool_calls" in text and "ann_state" in text
    rows = card.find_elements(By.CSS_SELECTOR, "table.metrics > tbody > tr")
    assert [r.find_element(By.TAG_NAME, "code").text for r in rows] == [
        "ann_state",
        "bought",
        "plausible",
        "tool_calls",
    ]
    rows = [
        rows[0],
        rows[1],
        rows[3],
        rows[2],
    ]  # as before the judge: ann_state, bought, tool_calls; then plausible
    # one cell per turn (0…6), each linking to its turn
    cells = rows[2].find_elements(By.CSS_SELECTOR, "svg.metric-strip a")
    assert len(cells) == 7
    assert cells[1].get_dom_attribute("href") == "/worlds/buyers/turns/1/"
    assert "7 turns, 7 errors" in rows[0].text  # ann_state is text: metric_type on every turn
    assert rows[2].find_elements(By.TAG_NAME, "strong")[-1].text == "2"  # the sum, turns 1…6
    rows[2].find_element(By.CSS_SELECTOR, "details summary").click()
    assert "0: 0 · 1: 2 · 2: 0" in rows[2].find_element(By.CSS_SELECTOR, ".strip-values").text
    assert low_contrast(browser) == []
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "metrics-1-world-1400", 1400)
    prefer_colour_scheme(browser, "dark")
    assert low_contrast(browser) == []
    full_page_shot(browser, "metrics-2-world-1400-dark", 1400)
    prefer_colour_scheme(browser, "light")
    browser.set_window_size(390, 900)
    browser.get(f"{base}/worlds/buyers/")
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "metrics-3-world-390", 390)

    browser.set_window_size(1400, 1000)
    browser.get(f"{base}/worlds/buyers/turns/1/")
    measured = browser.find_element(By.ID, "measurements").text
    assert "bought" in measured and "METRIC_TYPE" in measured.upper()
    # the judge's score with its rationale and its call
    assert "Turn 1: nothing strains belief." in measured and "judge call" in measured
    form_name = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, ".note-form input[name=name]"),
        10,
        "the annotation form",
    )[0]
    offered = browser.find_elements(
        By.CSS_SELECTOR, f"datalist#{form_name.get_attribute('list')} option"
    )
    assert {o.get_attribute("value") for o in offered} == {
        "ann_state",
        "bought",
        "plausible",
        "tool_calls",
    }
    full_page_shot(browser, "metrics-4-turn-1400", 1400)

    browser.get(f"{base}/store/metrics/{bought}/")
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "Worlds measured" in page and "buyers" in page
    agreement = browser.find_element(By.ID, "agreement").text
    assert "bought" in agreement and "1.000" in agreement  # the reviewer agrees on every turn
    assert low_contrast(browser) == []
    full_page_shot(browser, "metrics-5-metric-1400", 1400)
    browser.set_window_size(390, 900)
    browser.get(f"{base}/store/metrics/{bought}/")
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "metrics-6-metric-390", 390)
    browser.set_window_size(390, 900)
    browser.get(f"{base}/worlds/buyers/turns/1/")
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "metrics-7-turn-390", 390)
    browser.set_window_size(1400, 1000)
    browser.get(f"{base}/store/metrics/{plausible}/")
    assert "buyers" in browser.find_element(By.TAG_NAME, "main").text
    assert low_contrast(browser) == []
    full_page_shot(browser, "metrics-8-judge-1400", 1400)
    browser.get(f"{base}/worlds/buyers/turns/1/")
    browser.find_element(By.LINK_TEXT, "judge call").click()
    call_page = browser.find_element(By.TAG_NAME, "main").text
    assert "judge" in call_page and "Turn 1: nothing strains belief." in call_page
    assert low_contrast(browser) == []
    full_page_shot(browser, "metrics-9-judge-call-1400", 1400)


def test_making_a_metric_checked_as_typed_and_tried_on_a_turn(
    live_server: object, browser: webdriver.Chrome, toy_sources: str, scripted_llm: ScriptedLLM
) -> None:
    """An operator types an expression (a mistake is named beside the field as it is typed),
    tries it on a committed turn (its value and the turn view), tries a judge (its messages,
    then its score when asked), and stores the expression."""
    base = live_server.url  # type: ignore[attr-defined]
    operator = User.objects.create_user("olga", password=PASSWORD)
    operator.groups.add(Group.objects.get_or_create(name="operators")[0])
    buyers_world("buyers", 2)
    response_source_put(content=LLM_SOURCE)
    sign_in(browser, base, "olga", PASSWORD)

    browser.get(f"{base}/metrics/new/")
    browser.find_element(By.ID, "mf-label").send_keys("bought")
    browser.find_element(By.ID, "mf-expression").send_keys("length(calls[?")
    wait_for(
        lambda: "Incomplete expression" in browser.find_element(By.ID, "mf-expression-error").text,
        10,
        "the expression's error beside it",
    )
    assert browser.find_element(By.ID, "mf-expression-error").is_displayed()
    full_page_shot(browser, "metric-form-1-error-1400", 1400)
    expression = browser.find_element(By.ID, "mf-expression")
    expression.clear()
    expression.send_keys(DRANK)
    wait_for(
        lambda: "binary (0 or 1)" in browser.find_element(By.ID, "metric-check").text,
        10,
        "the check's types",
    )
    assert not browser.find_element(By.ID, "mf-expression-error").is_displayed()
    Select(browser.find_element(By.ID, "mf-world")).select_by_value("buyers")
    turn = browser.find_element(By.ID, "mf-turn")
    turn.clear()
    turn.send_keys("1")
    browser.find_element(By.CSS_SELECTOR, "button[value=try]").click()
    value = wait_for(lambda: browser.find_elements(By.ID, "try-value"), 10, "the try's value")
    assert value[0].text == "1.0"
    browser.find_element(By.CSS_SELECTOR, ".try-view summary").click()
    assert "buy_candy" in browser.find_element(By.ID, "try-result").text
    assert low_contrast(browser) == []
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "metric-form-2-tried-1400", 1400)
    browser.set_window_size(390, 900)
    assert sideways_overflow(browser) <= 0
    full_page_shot(browser, "metric-form-3-tried-390", 390)
    browser.set_window_size(1400, 1000)
    browser.find_element(By.CSS_SELECTOR, "button[value=save]").click()
    wait_for(lambda: "/store/metrics/" in browser.current_url, 10, "the metric's page")
    assert "binary (0 or 1)" in browser.find_element(By.ID, "turn-type").text

    browser.get(f"{base}/metrics/new/?kind=llm_judge")
    browser.find_element(By.ID, "mf-label").send_keys("plausible")
    Select(browser.find_element(By.ID, "mf-source")).select_by_index(1)
    browser.find_element(By.ID, "mf-system").send_keys("You rate how plausible a turn is.")
    browser.find_element(By.ID, "mf-user").send_keys("Rate this turn 1-5:\n{{turn.patches}}")
    Select(browser.find_element(By.ID, "mf-world")).select_by_value("buyers")
    turn = browser.find_element(By.ID, "mf-turn")
    turn.clear()
    turn.send_keys("1")
    browser.find_element(By.CSS_SELECTOR, "button[value=try]").click()
    wait_for(
        lambda: "Ann presses the button" in browser.find_element(By.ID, "try-result").text,
        10,
        "the judge's messages: " + browser.find_element(By.ID, "metric-form").text[-600:],
    )
    assert scripted_llm.requests == []
    scripted_llm.script(json.dumps({"score": 4, "rationale": "A vending machine does that."}))
    browser.find_element(By.ID, "ask-judge").click()
    score = wait_for(lambda: browser.find_elements(By.ID, "try-value"), 20, "the judge's score")
    assert score[0].text == "4.0" and len(scripted_llm.requests) == 1
    assert "A vending machine does that." in browser.find_element(By.ID, "try-result").text
    assert low_contrast(browser) == []
    full_page_shot(browser, "metric-form-4-judge-asked-1400", 1400)
