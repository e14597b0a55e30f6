"""A reviewer in headless Chromium (Debian's chromium + chromedriver, driven by Selenium):
sign in, open a park world, queue a turn, watch the timeline go from running to committed,
open Bob's LLM call and see the streamed text, and follow the vending machine's provenance to
the LLM call that changed it. Screenshots land in test-artifacts/."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from selenium import webdriver
from selenium.webdriver.common.by import By

from devservices import toys
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.chromium import ARTIFACTS
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from tests.support.worlds import backend_checked
from worlds_app.services import world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.fixture
def park_worker(tmp_path: Path) -> Iterator[tuple[ScriptedLLM, str]]:
    """A scripted LLM, the toy sources and a Celery worker that can reach both."""
    llm = ScriptedLLM()
    llm.start()
    toy_server = toys.serve("127.0.0.1", 0, tmp_path / "toys")
    toy_base = f"http://127.0.0.1:{toy_server.server_address[1]}"
    queue = f"browser-{os.getpid()}"
    env = {
        **toys.toy_env(toy_base),
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": "test-secret-key",
    }
    try:
        with worker_process(f"browser-{os.getpid()}", env=env, queue=queue), routed_to(queue):
            yield llm, queue
    finally:
        toy_server.shutdown()
        toy_server.server_close()
        llm.stop()


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _href(driver: webdriver.Chrome, pattern: str) -> str:
    for link in driver.find_elements(By.TAG_NAME, "a"):
        href = link.get_attribute("href") or ""
        if re.search(pattern, href):
            return href
    raise AssertionError(f"no link matching {pattern!r} on {driver.current_url}")


def test_reviewer_watches_a_park_turn_and_follows_provenance(
    live_server: Any, browser: webdriver.Chrome, park_worker: tuple[ScriptedLLM, str]
) -> None:
    llm, _queue = park_worker
    user = User.objects.create_user("reviewer", password="a-long-password-1", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    # the attempt's first LLM-call link is a generation's (a conformance check has its own
    # LLM call too; the backend is already checked here)
    backend_checked(llm.base_url, "gpt-4o-mini")
    scenario = scenario_assemble(data=load_fixture("park"))["scenario_hash"]
    world_create(data={"slug": "park-ui", "scenario_ref": {"hash": scenario}})
    patch = {
        "kind": "final_patch",
        "tool_call": None,
        "patch": {
            "narration": "Bob buys the last candy bar and unwraps it.",
            "effects": [
                {"op": "set_entity_state", "entity_id": "bob", "state": "eating a candy bar"},
                {"op": "set_entity_state", "entity_id": "vending_machine", "state": "empty"},
                {"op": "append_entity_memory", "entity_id": "bob", "content": "I bought candy."},
            ],
        },
    }
    # Slow stream: the attempt stays running long enough to be watched.
    llm.script(
        {
            "kind": "tool_call",
            "tool_call": {"name": "buy_candy", "arguments": {"item": "candy_bar"}},
            "patch": None,
        },
        Reply(text=json.dumps(patch), chunk_size=4, chunk_delay_s=0.08),
    )

    browser.get(f"{live_server.url}/accounts/login/?next=/worlds/park-ui/")
    browser.find_element(By.NAME, "username").send_keys("reviewer")
    browser.find_element(By.NAME, "password").send_keys("a-long-password-1")
    browser.find_element(
        By.CSS_SELECTOR, "form button[type=submit], form input[type=submit]"
    ).click()
    # The sign-in URL itself carries ?next=/worlds/park-ui/, so wait on the path alone.
    _wait(
        lambda: browser.current_url.split("?")[0].endswith("/worlds/park-ui/"),
        10,
        "the world page",
    )
    assert "Bob" in browser.page_source
    browser.save_screenshot(str(ARTIFACTS / "world-page.png"))

    count = browser.find_element(By.CSS_SELECTOR, "form input[name=count]")
    count.clear()
    count.send_keys("1")
    count.find_element(By.XPATH, "ancestor::form").find_element(
        By.CSS_SELECTOR, "button[type=submit], input[type=submit]"
    ).click()
    timeline_url = _wait(
        lambda: _try_href(browser, r"/attempts/[0-9a-f-]{36}/"), 15, "a timeline link"
    )
    browser.get(timeline_url)
    _wait(lambda: "running" in browser.page_source.lower(), 30, "the timeline to show running")
    browser.save_screenshot(str(ARTIFACTS / "attempt-timeline-running.png"))
    # The page updates itself (HTMX polling) until the attempt settles.
    _wait(
        lambda: "committed" in browser.page_source.lower(),
        90,
        "the timeline to settle on committed",
    )
    time.sleep(1.5)
    browser.save_screenshot(str(ARTIFACTS / "attempt-timeline.png"))

    call_url = _href(browser, r"/llm-calls/[0-9a-f-]{36}/")
    browser.get(call_url)
    assert (
        "buy_candy" in browser.page_source or "Bob buys the last candy bar" in browser.page_source
    )
    browser.save_screenshot(str(ARTIFACTS / "llm-call.png"))

    browser.get(f"{live_server.url}/worlds/park-ui/entities/vending_machine/")
    assert "empty" in browser.page_source
    decided_by = _href(browser, r"/llm-calls/[0-9a-f-]{36}/")
    browser.get(decided_by)
    assert "Bob buys the last candy bar" in browser.page_source
    browser.save_screenshot(str(ARTIFACTS / "provenance-llm-call.png"))


def _try_href(driver: webdriver.Chrome, pattern: str) -> str | None:
    try:
        return _href(driver, pattern)
    except AssertionError:
        return None
