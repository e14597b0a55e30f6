"""The live views in headless Chromium, against a real Celery worker and a scripted LLM that
streams slowly:

- a retried generation is watched going RUNNING → REJECTED, and its retry RUNNING → ACCEPTED,
  on one page load (the page is never reloaded: a marker set in the window survives);
- sections the reviewer opened or closed, and the row they selected, stay so across polls;
- the LLM call page fills in while the call streams (text and time to first token), then stops
  polling;
- the waterfall at 390 px wide.

Screenshots land in test-artifacts/ (live-*.png)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from selenium import webdriver
from selenium.webdriver.common.by import By

from cognition_app.models import LlmCall
from devservices import toys
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.support.chromium import ARTIFACTS, chromium, sign_in, wait_for
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, worker_process
from worlds_app.models import TurnAttempt
from worlds_app.services import turn_attempt_enqueue, world_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"
ANT_OK: dict[str, Any] = {
    "kind": "final_patch",
    "tool_call": None,
    "patch": {
        "narration": "The ant walks east across the plate to the crumb and tastes it.",
        "effects": [
            {"op": "set_entity_state", "entity_id": "ant", "state": "beside the crumb, tasting"},
            {"op": "append_entity_memory", "entity_id": "ant", "content": "The crumb is sweet."},
        ],
    },
}
NOT_JSON = "The ant walks to the crumb and eats it, happily, in plain prose."


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def live_worker(tmp_path: Path) -> Iterator[ScriptedLLM]:
    """A scripted LLM, the toy sources and a Celery worker that can reach both."""
    llm = ScriptedLLM()
    llm.start()
    toy_server = toys.serve("127.0.0.1", 0, tmp_path / "toys")
    toy_base = f"http://127.0.0.1:{toy_server.server_address[1]}"
    queue = f"live-{os.getpid()}"
    env = {
        **toys.toy_env(toy_base),
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": "test-secret-key",
    }
    try:
        with worker_process(f"live-{os.getpid()}", env=env, queue=queue), routed_to(queue):
            yield llm
    finally:
        toy_server.shutdown()
        toy_server.server_close()
        llm.stop()


def _sign_in(browser: webdriver.Chrome, base: str) -> None:
    user = User.objects.create_user("watcher", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    sign_in(browser, base, "watcher", PASSWORD)


def _ant_world(slug: str) -> None:
    scenario = scenario_assemble(data=load_fixture("ant_on_plate"))["scenario_hash"]
    world_create(data={"slug": slug, "scenario_ref": {"hash": scenario}})


def _generation_badges(browser: webdriver.Chrome) -> list[str]:
    """The badges of the generation rows, in order (read in the page, atomically)."""
    return browser.execute_script(
        """return Array.from(document.querySelectorAll('.wf-tree .wf-row[data-row^="i-"]'))
            .filter(r => /generation \\d/.test(r.textContent))
            .map(r => r.querySelector('.badge').textContent.trim());"""
    )


def _polls(browser: webdriver.Chrome) -> int:
    return int(browser.execute_script("return (window.chukwaLive || {polls: 0}).polls;"))


def test_a_retry_is_watched_live_and_opened_sections_stay_open(
    live_server: Any, browser: webdriver.Chrome, live_worker: ScriptedLLM
) -> None:
    _ant_world("live-retry")
    # First reply: prose, slowly (rejected: not JSON); then the corrected patch, slowly.
    live_worker.script(
        Reply(text=NOT_JSON, chunk_size=3, chunk_delay_s=0.12, delay_s=0.4),
        Reply(text=json.dumps(ANT_OK), chunk_size=5, chunk_delay_s=0.1, delay_s=0.4),
    )
    _sign_in(browser, live_server.url)
    (attempt_id,) = turn_attempt_enqueue(slug="live-retry", requested_by="watcher")["attempt_ids"]
    browser.get(f"{live_server.url}/attempts/{attempt_id}/")
    browser.execute_script("window.__sameLoad = 'yes';")

    seen: list[tuple[str, ...]] = []
    shots: set[str] = set()
    opened_raw_events = False
    collapsed_node = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        badges = tuple(_generation_badges(browser))
        if badges and (not seen or seen[-1] != badges):
            seen.append(badges)
        if badges == ("running",) and "first" not in shots:
            browser.save_screenshot(str(ARTIFACTS / "live-retry-1-running.png"))
            shots.add("first")
        if badges == ("rejected", "running") and "retry" not in shots:
            # The reviewer opens the raw events, folds the subject's node and selects the
            # rejected generation while the retry streams.
            browser.find_element(By.CSS_SELECTOR, "#raw-events > summary").click()
            opened_raw_events = True
            caret = browser.find_element(By.CSS_SELECTOR, '[data-row="n-ant-act"] .caret')
            caret.click()
            collapsed_node = True
            polls = _polls(browser)
            wait_for(lambda p=polls: _polls(browser) >= p + 2, 10, "two polls after the clicks")
            assert browser.execute_script("return document.getElementById('raw-events').open"), (
                "the opened section snapped shut on a poll"
            )
            assert not browser.execute_script("return document.getElementById('n-ant-act').open"), (
                "the folded node reopened on a poll"
            )
            caret.click()  # unfold again to see both tries
            browser.save_screenshot(str(ARTIFACTS / "live-retry-2-rejected-retry-running.png"))
            shots.add("retry")
        status = TurnAttempt.objects.values_list("status", flat=True).get(pk=attempt_id)
        if status in {"committed", "failed"} and badges and badges[-1] != "running":
            break
        time.sleep(0.15)

    assert opened_raw_events and collapsed_node, f"never saw the retry stream: {seen}"
    assert TurnAttempt.objects.get(pk=attempt_id).status == "committed"
    wait_for(
        lambda: "committed" in browser.find_element(By.CSS_SELECTOR, "h1").text.lower(),
        10,
        "the page to show the commit",
    )
    # Each state was seen on the page, in order, and never "succeeded" for the rejected output.
    assert ("running",) in seen
    assert ("rejected", "running") in seen
    assert seen[-1] == ("rejected", "accepted")
    assert seen.index(("running",)) < seen.index(("rejected", "running"))
    assert all("succeeded" not in badges for badges in seen)
    assert browser.execute_script("return window.__sameLoad") == "yes", "the page was reloaded"
    assert browser.execute_script("return document.getElementById('raw-events').open")

    # Select the rejected try: the side panel says why, and the retry shows its correction.
    rows = browser.find_elements(By.CSS_SELECTOR, '.wf-tree .wf-row[data-row^="i-"]')
    rejected_row = next(r for r in rows if "generation 1" in r.text)
    rejected_row.find_element(By.CSS_SELECTOR, ".wf-track").click()
    row_id = rejected_row.get_attribute("data-row")
    panel = browser.find_element(By.ID, f"detail-{row_id}")
    assert panel.is_displayed()
    assert "not valid JSON" in panel.text
    polls = _polls(browser)
    time.sleep(2.5)
    assert _polls(browser) <= polls + 1, "a finished attempt kept polling"
    browser.save_screenshot(str(ARTIFACTS / "live-retry-3-accepted-selected.png"))

    browser.set_window_size(390, 844)
    browser.get(f"{live_server.url}/attempts/{attempt_id}/")
    bars = browser.find_elements(By.CSS_SELECTOR, ".wf-tree .bar:not(.group)")
    widths = [b.size["width"] for b in bars if b.is_displayed()]
    assert widths and max(widths) >= 40, f"bars at 390 px are dots: {widths}"
    too_wide = browser.execute_script(
        """return Array.from(document.querySelectorAll('#timeline *'))
            .filter(el => !el.closest('details:not([open]) > :not(summary)'))
            .filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
            .map(el => el.tagName + '.' + el.className).slice(0, 5);"""
    )
    assert too_wide == [], f"the timeline is wider than 390 px: {too_wide}"
    browser.execute_script("document.querySelector('.waterfall').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "live-retry-4-390px.png"))


def test_the_llm_call_page_fills_in_while_it_streams(
    live_server: Any, browser: webdriver.Chrome, live_worker: ScriptedLLM
) -> None:
    _ant_world("live-stream")
    live_worker.script(Reply(text=json.dumps(ANT_OK), chunk_size=4, chunk_delay_s=0.1, delay_s=1.0))
    _sign_in(browser, live_server.url)
    (attempt_id,) = turn_attempt_enqueue(slug="live-stream", requested_by="watcher")["attempt_ids"]
    call_id = wait_for(
        lambda: (
            LlmCall.objects.filter(
                invocation__attempt_id=attempt_id, invocation__kind="llm_generation"
            )
            .values_list("id", flat=True)
            .first()
        ),
        60,
        "the LLM call row",
    )
    browser.get(f"{live_server.url}/llm-calls/{call_id}/")
    browser.execute_script("window.__sameLoad = 'yes';")

    lengths: list[int] = []
    ttft_seen = ""
    badges: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = browser.execute_script(
            """return [document.getElementById('call-text').textContent,
                       document.getElementById('call-ttft').textContent.trim(),
                       document.getElementById('call-verdict').textContent.trim()];"""
        )
        text, ttft, badge = state
        if not lengths or lengths[-1] != len(text):
            lengths.append(len(text))
        if not badges or badges[-1] != badge:
            badges.append(badge)
        if badge == "running" and text and not ttft_seen:
            ttft_seen = ttft
        if len(lengths) == 4:
            browser.save_screenshot(str(ARTIFACTS / "live-llm-call-streaming.png"))
        if badge != "running":
            break
        time.sleep(0.1)

    assert badges[0] == "running" and badges[-1] == "accepted", badges
    growing = [n for n in lengths if 0 < n < len(json.dumps(ANT_OK))]
    assert len(growing) >= 3, f"the text did not grow in steps while streaming: {lengths}"
    assert lengths == sorted(lengths)
    assert ttft_seen.endswith("ms") or ttft_seen.endswith(" s"), ttft_seen
    assert browser.execute_script("return window.__sameLoad") == "yes", "the page was reloaded"
    # the finished reply reads pretty-printed; the raw text as streamed is behind a toggle
    assert "The ant walks east across the plate" in browser.find_element(By.ID, "call-json").text
    raw = browser.find_element(By.ID, "call-text").get_attribute("textContent")
    assert "The ant walks east across the plate" in raw
    polls = _polls(browser)
    time.sleep(1.5)
    assert _polls(browser) <= polls + 1, "a finished call kept polling"
    browser.save_screenshot(str(ARTIFACTS / "live-llm-call-finished.png"))
