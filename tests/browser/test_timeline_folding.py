"""A long attempt timeline in headless Chromium: an ant (an LLM agent whose first reply was
rejected) and thirty mites (rule policies) make one attempt of 127 waterfall rows, run through
the services. Past 40 rows the page folds the quiet subjects and leaves open the one whose
generation was rejected; a fold opens and closes in place. The timeline and both LLM calls read
at AA contrast in light and dark mode, at 1280 px and at 390 px. Screenshots in
test-artifacts/ (fold-*.png)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from cognition_app.models import LlmCall
from surfaces.pages.timeline import FOLD_ABOVE
from tests.support.chromium import (
    ARTIFACTS,
    chromium,
    low_contrast,
    prefer_colour_scheme,
    sign_in,
    wait_for,
)
from tests.support.crowds import crowded_world
from tests.surfaces.pages.test_world_pages import ANT_OK, BAD_REPLY, run_turn
from worlds_app.models import AttemptStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"
MITES = 30


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium(1280, 900) as driver:
        yield driver


def _crowded_plate() -> None:
    """The ant's plate with thirty rule-policy mites on it."""
    crowded_world("ant_on_plate", "crowded", mites=MITES, environment="kitchen_plate")


def _rows(browser: webdriver.Chrome) -> tuple[int, int]:
    """(waterfall rows in the page, rows a reader can see)."""
    return browser.execute_script(
        """const rows = Array.from(document.querySelectorAll('.wf-tree .wf-row'));
           return [rows.length, rows.filter(r => r.checkVisibility()).length];"""
    )


def _is_open(browser: webdriver.Chrome, row_id: str) -> bool:
    return bool(browser.execute_script(f"return document.getElementById('{row_id}').open"))


def _no_sideways_scroll(browser: webdriver.Chrome) -> bool:
    return bool(
        browser.execute_script(
            "var d = document.documentElement; return d.scrollWidth <= d.clientWidth"
        )
    )


def _full_shot(browser: webdriver.Chrome, name: str, width: int) -> None:
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(max(height + 140, 600), 5000))
    browser.save_screenshot(str(ARTIFACTS / f"fold-{name}.png"))


def test_a_long_timeline_folds_its_quiet_sections(
    live_server: Any,
    browser: webdriver.Chrome,
    scripted_llm: Any,
    toy_sources: str,
) -> None:
    _crowded_plate()
    scripted_llm.script(BAD_REPLY, ANT_OK)
    attempt = run_turn("crowded")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    rejected, accepted = LlmCall.objects.filter(
        invocation__attempt=attempt, invocation__kind="llm_generation"
    ).order_by("started_at")
    User.objects.create_user("reviewer", password=PASSWORD)
    sign_in(browser, live_server.url, "reviewer", PASSWORD)

    url = f"{live_server.url}/attempts/{attempt.pk}/"
    browser.get(url)
    total, visible = _rows(browser)
    assert total > 3 * FOLD_ABOVE, total  # 127 rows: 4 a mite, 6 for the ant, the commit
    assert "quiet sections folded" in browser.find_element(By.CSS_SELECTOR, ".wf-axis").text
    # Quiet subjects folded: a mite shows its one row; the ant, whose first reply was rejected,
    # is open down to both tries.
    assert not _is_open(browser, "s-mite_07")
    # a folded subject still says what it did: the rule its policy matched
    assert "rule wander" in browser.find_element(By.CSS_SELECTOR, "[data-row='s-mite_07']").text
    assert _is_open(browser, "s-ant") and _is_open(browser, "n-ant-act")
    assert _is_open(browser, "g-ant-act-0")
    tries = browser.find_elements(By.CSS_SELECTOR, "#g-ant-act-0 .wf-row[data-row^='i-']")
    assert [t.text.split(" ·")[0] for t in tries if t.is_displayed()] == ["act", "act"]
    assert visible < FOLD_ABOVE < total, (visible, total)
    mite_node = browser.find_element(By.CSS_SELECTOR, "[data-row='n-mite_07-decide']")
    assert not mite_node.is_displayed()
    # the keyboard walks the rows a reader sees (ArrowDown from a folded mite skips its node)
    browser.find_element(By.CSS_SELECTOR, "[data-row='s-mite_07']").send_keys(Keys.ARROW_DOWN)
    focused = browser.execute_script("return document.activeElement.getAttribute('data-row')")
    assert focused == "s-mite_08", focused
    assert low_contrast(browser) == []
    assert _no_sideways_scroll(browser)
    _full_shot(browser, "timeline-1280", 1280)
    browser.set_window_size(1280, 900)

    # A fold opens in place (no reload) and shows the mite's node; it closes again.
    browser.execute_script("window.__sameLoad = 'yes';")
    caret = browser.find_element(By.CSS_SELECTOR, "[data-row='s-mite_07'] .caret")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", caret)
    caret.click()
    wait_for(mite_node.is_displayed, 5, "the mite's node to unfold")
    assert _is_open(browser, "s-mite_07")
    assert _rows(browser)[1] == visible + 2  # its node and its patch
    browser.find_element(By.CSS_SELECTOR, "[data-row='n-mite_07-decide'] .caret").click()
    rule = browser.find_element(By.CSS_SELECTOR, "#n-mite_07-decide .wf-leaf .wf-row")
    wait_for(rule.is_displayed, 5, "the rule-policy row")
    assert "matched rule wander" in rule.text
    browser.save_screenshot(str(ARTIFACTS / "fold-unfolded-mite.png"))
    caret.click()
    wait_for(lambda: not mite_node.is_displayed(), 5, "the fold to close")
    assert browser.execute_script("return window.__sameLoad") == "yes"

    # The rejected try, selected: the side panel says why, legible in light and dark.
    row = browser.find_element(By.CSS_SELECTOR, f"[data-row='i-{rejected.invocation_id}']")
    row.find_element(By.CSS_SELECTOR, ".wf-track").click()
    panel = browser.find_element(By.ID, f"detail-i-{rejected.invocation_id}")
    assert panel.is_displayed() and "not valid JSON" in panel.text
    assert low_contrast(browser) == []
    browser.save_screenshot(str(ARTIFACTS / "fold-selected-rejected.png"))
    prefer_colour_scheme(browser, "dark")
    assert low_contrast(browser) == []
    _full_shot(browser, "timeline-1280-dark", 1280)

    # The LLM calls: the rejected one (with the corrective message it led to) and the accepted
    # one; the chunk table is folded.
    for call, name in ((rejected, "rejected"), (accepted, "accepted")):
        for scheme in ("dark", "light"):
            prefer_colour_scheme(browser, scheme)
            browser.set_window_size(1280, 900)
            browser.get(f"{live_server.url}/llm-calls/{call.pk}/")
            verdict = browser.find_element(By.ID, "call-verdict").text.lower()
            assert verdict == name, verdict
            crumbs = browser.find_element(By.CSS_SELECTOR, "nav.crumbs").text
            assert crumbs.startswith("Worlds / crowded / attempt 1 / invocation "), crumbs
            assert not _is_open(browser, "chunk-table")
            assert low_contrast(browser) == [], (name, scheme)
            _full_shot(browser, f"llm-call-{name}-{scheme}", 1280)

    # 390 px, light and dark: nothing sideways, still legible.
    for scheme in ("light", "dark"):
        prefer_colour_scheme(browser, scheme)
        browser.set_window_size(390, 844)
        for path in (f"/attempts/{attempt.pk}/", f"/llm-calls/{rejected.pk}/"):
            browser.get(f"{live_server.url}{path}")
            assert _no_sideways_scroll(browser), (path, scheme)
            assert low_contrast(browser) == [], (path, scheme)
        browser.get(url)
        # one time scale: every visible row's track spans what the axis spans, at every depth
        spans = browser.execute_script(
            """return Array.from(document.querySelectorAll('.waterfall .wf-track'))
                .filter(t => t.checkVisibility())
                .map(t => { const b = t.getBoundingClientRect();
                            return [Math.round(b.left), Math.round(b.right)]; });"""
        )
        assert len(spans) > 10 and {tuple(s) for s in spans} == {tuple(spans[0])}, spans
        _full_shot(browser, f"timeline-390-{scheme}", 390)
        browser.get(f"{live_server.url}/llm-calls/{rejected.pk}/")
        _full_shot(browser, f"llm-call-390-{scheme}", 390)
