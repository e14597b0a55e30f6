"""The workflow editor in headless Chromium: the stored workflow is picked, not pasted; an invalid
value is marked on its own line in the code editor; a prompt is edited as plain multi-line text
and lands in the JSON; the review shows the changed prompt line before anything is saved; the
saved version links back to the one it was derived from. Screenshots in test-artifacts/."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import ScenarioCognitionProfile, WorkflowDerivation
from scenarios_app.services import scenario_assemble
from tests.support.chromium import (
    ARTIFACTS,
    chromium,
    low_contrast,
    prefer_colour_scheme,
    sign_in,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


def _marked_lines(browser: webdriver.Chrome) -> list[str]:
    return browser.execute_script(
        """return Array.from(document.querySelectorAll('.cm-lintRange-error'))
            .map(el => el.closest('.cm-line').textContent);"""
    )


def _set_doc(browser: webdriver.Chrome, find: str, replace: str) -> None:
    browser.execute_script(
        """const view = window.chukwaEditor, doc = view.state.doc.toString();
           const at = doc.indexOf(arguments[0]);
           if (at < 0) throw new Error('not in the document: ' + arguments[0]);
           view.dispatch({changes: {from: at, to: at + arguments[0].length, insert: arguments[1]}});""",
        find,
        replace,
    )


def _editor_colours(browser: webdriver.Chrome) -> dict[str, str]:
    """Computed colours of the code editor: its ground, its text, its gutter and a number."""
    return browser.execute_script(
        """const ed = document.querySelector('.cm-editor'), css = el => getComputedStyle(el);
           const line = Array.from(ed.querySelectorAll('.cm-line'))
             .find(l => l.textContent.includes('"max_generation_attempts": 3'));
           const number = line && Array.from(line.querySelectorAll('span'))
             .find(s => s.textContent === '3');
           return {background: css(ed).backgroundColor, text: css(ed.querySelector('.cm-content')).color,
                   gutter: css(ed.querySelector('.cm-gutters')).backgroundColor,
                   number: number ? css(number).color : null};"""
    )


def test_an_operator_edits_reviews_and_saves_a_workflow(
    live_server: Any, browser: webdriver.Chrome
) -> None:
    body = {k: v for k, v in copy.deepcopy(load_fixture("ant_on_plate")).items() if k != "note"}
    body.pop("name", None)
    scenario = scenario_assemble(data=body)["scenario_hash"]
    parent = (
        ScenarioCognitionProfile.objects.select_related("profile")
        .get(scenario_id=scenario, label="ant")
        .profile.workflow_id
    )
    user = User.objects.create_user("author", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    sign_in(browser, live_server.url, "author", PASSWORD)

    browser.get(f"{live_server.url}/workflows/author/")
    Select(browser.find_element(By.ID, "load-workflow")).select_by_value(parent)
    browser.find_element(By.CSS_SELECTOR, "form.author-load button[type=submit]").click()
    wait_for(lambda: browser.execute_script("return !!window.chukwaEditor"), 10, "the editor")
    wait_for(
        lambda: "valid" in browser.find_element(By.ID, "author-validation").text, 10, "validation"
    )
    assert "✓ valid" in browser.find_element(By.ID, "author-validation").text

    # The editor follows the page into dark mode while it is open (no reload), and back; its
    # text, gutter numbers and syntax colours stay legible (AA) in both.
    light = _editor_colours(browser)
    assert light["background"] == "rgb(255, 255, 255)"  # the page's card, --card
    assert light["text"] == "rgb(29, 35, 48)"  # --fg
    assert light["number"] and light["number"] != light["text"]  # syntax colours
    assert low_contrast(browser) == []
    browser.execute_script("window.__sameLoad = 'yes';")
    prefer_colour_scheme(browser, "dark")
    # The ground follows the page's CSS at once; the syntax colours follow when the editor's
    # media-query listener reconfigures it: wait for both.
    dark = wait_for(
        lambda: (
            (c := _editor_colours(browser))["background"] == "rgb(23, 28, 39)"
            and c["number"] not in (None, light["number"])
            and c
        ),
        10,
        "the editor and its syntax colours to turn dark",
    )
    assert dark["text"] == "rgb(227, 231, 241)"  # the dark --fg
    assert dark["gutter"] == "rgb(15, 19, 27)"  # the dark --bg
    assert dark["number"] not in (None, light["number"])  # the dark syntax colours
    assert low_contrast(browser) == []
    assert browser.execute_script("return window.__sameLoad") == "yes"
    browser.save_screenshot(str(ARTIFACTS / "author-0-dark.png"))
    prefer_colour_scheme(browser, "light")
    wait_for(lambda: _editor_colours(browser) == light, 10, "the editor to turn light again")

    # An invalid value: the server's error is marked on that value's own line.
    _set_doc(browser, '"max_generation_attempts": 3', '"max_generation_attempts": 0')
    marked = wait_for(lambda: _marked_lines(browser), 10, "an error marker")
    assert any('"max_generation_attempts": 0' in line for line in marked), marked
    assert "max_generation_attempts" in browser.find_element(By.ID, "author-validation").text
    browser.execute_script(
        "document.querySelector('.cm-lintRange-error').scrollIntoView({block: 'center'})"
    )
    browser.save_screenshot(str(ARTIFACTS / "author-1-error-marked.png"))
    _set_doc(browser, '"max_generation_attempts": 0', '"max_generation_attempts": 3')
    wait_for(lambda: not _marked_lines(browser), 10, "the marker to go")

    # A JSON syntax error is marked at its line too.
    _set_doc(browser, '"max_generation_attempts": 3', '"max_generation_attempts": 3,,')
    marked = wait_for(lambda: _marked_lines(browser), 10, "a syntax error marker")
    assert any("max_generation_attempts" in line for line in marked), marked
    _set_doc(browser, '"max_generation_attempts": 3,,', '"max_generation_attempts": 3')
    wait_for(lambda: not _marked_lines(browser), 10, "the syntax marker to go")

    # The system prompt, edited as plain text, rewrites the JSON.
    def type_into_prompt() -> bool:
        # The panel is rebuilt (debounced) after editor changes: a field found just before a
        # rebuild goes stale, so find it again and retry.
        try:
            prompt = browser.find_elements(By.CSS_SELECTOR, "#author-prompts textarea")[0]
            assert "Rules for the WorldPatch" in prompt.get_attribute("value")
            prompt.click()
            browser.execute_script("arguments[0].setSelectionRange(1e6, 1e6);", prompt)
            prompt.send_keys("\nAlways answer in one short sentence.")
        except (IndexError, StaleElementReferenceException):
            return False
        return True

    wait_for(type_into_prompt, 10, "the prompt fields")
    doc = browser.execute_script("return window.chukwaEditor.state.doc.toString()")
    assert "\\nAlways answer in one short sentence." in doc

    # Review: the changed prompt line, and nothing stored yet.
    before = WorkflowDerivation.objects.count()
    browser.find_element(By.CSS_SELECTOR, "button[formaction$='/review']").click()
    diff = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#author-review .d-add"), 10, "the diff"
    )
    assert [d.text for d in diff] == ["+    Always answer in one short sentence."]
    assert WorkflowDerivation.objects.count() == before
    browser.execute_script("document.getElementById('author-review').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "author-2-review-diff.png"))

    browser.find_element(By.NAME, "save_note").send_keys("one sentence answers")
    browser.find_element(By.ID, "author-confirm-save").click()
    wait_for(lambda: "/store/cognition-workflows/" in browser.current_url, 10, "the saved version")
    edge = WorkflowDerivation.objects.get()
    assert edge.parent_id == parent and edge.note == "one sentence answers"
    assert edge.child_id in browser.current_url
    assert parent[:12] in browser.find_element(By.TAG_NAME, "main").text  # "Derived from"
    browser.save_screenshot(str(ARTIFACTS / "author-3-saved-version.png"))
