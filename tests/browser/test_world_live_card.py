"""The world page's attempts card in headless Chromium, against a real Celery worker: "Run turns"
is clicked, and the card follows the attempts to COMMITTED and the header's current turn to the
new turn on one page load, every poll answered 200 (or 286, the last), then stops polling.
Screenshots in test-artifacts/ (world-live-*.png)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.webdriver.common.by import By

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.chromium import ARTIFACTS, sign_in, wait_for
from worlds_app.models import TurnAttempt
from worlds_app.services import world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"

# Every HTMX request the page makes, with its answer's status (read back by the test).
RECORD_REQUESTS = """
window.__requests = [];
document.body.addEventListener('htmx:afterRequest', function (e) {
  window.__requests.push([e.detail.requestConfig.verb, e.detail.pathInfo.requestPath,
                          e.detail.xhr.status]);
});
window.__sameLoad = 'yes';
"""


def _badges(browser: webdriver.Chrome) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#queue tbody .badge'))"
        ".map(b => b.textContent.trim());"
    )


def test_run_turns_card_follows_the_attempts_to_commit(
    live_server: Any, browser: webdriver.Chrome, celery_worker: str
) -> None:
    fixture = copy.deepcopy(load_fixture("ant_on_plate_rules"))
    body = {k: v for k, v in fixture.items() if k not in ("name", "note")}
    scenario = scenario_assemble(data=body)["scenario_hash"]
    world_create(data={"slug": "live-card", "scenario_ref": {"hash": scenario}})
    user = User.objects.create_user("runner", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    sign_in(browser, live_server.url, "runner", PASSWORD)

    browser.get(f"{live_server.url}/worlds/live-card/")
    browser.execute_script(RECORD_REQUESTS)
    assert browser.find_element(By.ID, "world-current-turn").text == "0"
    count = browser.find_element(By.ID, "run-count")
    count.clear()
    count.send_keys("2")
    browser.find_element(By.CSS_SELECTOR, ".run-form button[type=submit]").click()
    wait_for(lambda: len(_badges(browser)) == 2, 10, "the card to show the two attempts")
    browser.save_screenshot(str(ARTIFACTS / "world-live-1-queued.png"))

    wait_for(
        lambda: _badges(browser) == ["committed", "committed"],
        60,
        f"the card to show both attempts committed (it shows {_badges(browser)})",
    )
    wait_for(
        lambda: browser.find_element(By.ID, "world-current-turn").text == "2",
        10,
        "the header's current turn to reach 2",
    )
    # the turn history follows too
    wait_for(lambda: "Turn 2" in browser.find_element(By.ID, "turns").text, 10, "turn 2 listed")
    assert set(TurnAttempt.objects.values_list("status", flat=True)) == {"committed"}
    assert browser.execute_script("return window.__sameLoad") == "yes", "the page was reloaded"
    browser.save_screenshot(str(ARTIFACTS / "world-live-2-committed.png"))

    # The card stopped polling once nothing ran, and no request the page made failed.
    requests = browser.execute_script("return window.__requests")
    polls = [r for r in requests if r[0] == "get"]
    assert polls and all(path == "/worlds/live-card/" for _, path, _ in polls), requests
    assert all(status in (200, 286) for _, _, status in requests), requests
    assert polls[-1][2] == 286, requests
    settled = len(browser.execute_script("return window.__requests"))
    time.sleep(4.5)
    assert len(browser.execute_script("return window.__requests")) == settled, "still polling"
    assert "live" not in browser.find_element(By.CSS_SELECTOR, "#queue .card-head").text.lower()
