"""Every page type fits a 390 px screen (headless Chromium): home, the indexes, a world and its
turn, attempt, invocation, diff and comparison, the store's pages, a scenario, the workflow
editor, the experiment index, page (with a people row) and form, the metric and population pages and the population form (the admin excluded). At 1400 px
the world page's tables do not scroll sideways inside their cards. Screenshots of the editor and
the world page at 390 px in test-artifacts/ (widths-*.png)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver

from cognition_app.models import SourceInvocation
from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import ScenarioCognitionProfile
from scenarios_app.services import population_put
from tests.support.chromium import full_page_shot, sign_in
from tests.surfaces.pages.test_experiment_pages import (
    TREATED,
    VARIED,
    design,
    expression_metric,
    run_experiment,
    stored_scenario,
)
from worlds_app.models import BiographyRun, TurnAttempt
from worlds_app.services import turn_attempt_enqueue
from worlds_app.services.experiments import experiment_create
from worlds_app.services.references import references_upload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"

# What sticks out past the window's right edge (the innermost elements, for the message).
OVERFLOWING = """
const w = window.innerWidth;
return Array.from(document.querySelectorAll('body *'))
  .filter(el => el.getBoundingClientRect().right > w + 1)
  .filter(el => !Array.from(el.children).some(c => c.getBoundingClientRect().right > w + 1))
  .filter(el => !el.closest('.table-wrap, pre, .cm-scroller, .strip-wrap'))
  .slice(0, 6)
  .map(el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
       (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '') +
       ' ' + Math.round(el.getBoundingClientRect().right));
"""


def _pages() -> list[str]:
    scenario = stored_scenario()
    metrics = [expression_metric("treated", TREATED), expression_metric("varied", VARIED)]
    experiment_create(data=design("widths", scenario, metrics, replicates=1, turns=2))
    run_experiment("widths", metrics)
    people = [{"unit": f"p{i}", "metric": "varied", "value": 10 * i} for i in range(1, 6)]
    references_upload(slug="widths", rows=people)
    population = population_put(
        content=load_fixture("park_visitors_rules")["populations"][0]["ref"]["inline"]
    )["hash"]
    # a biographies run that failed, with a long reason: its page at every width
    run = BiographyRun.objects.create(
        population=population,
        label="park_visitors",
        source_hash="a" * 64,
        prompt="Write a life.",
        entity_template={},
        agents=24,
        done=11,
        status="failed",
        tries=2,
        error_code="biography_failed",
        error_message="source: the source failed writing agent 12's biography (http_error): "
        f"{'y' * 300}; nothing was stored",
        error_details={"field": "source", "agent": 12},
    )
    treated, control = "widths--treated--1", "widths--control--1"
    attempt = TurnAttempt.objects.filter(world__slug=treated, status="committed").first()
    assert attempt is not None
    invocation = SourceInvocation.objects.filter(attempt=attempt).values_list("id", flat=True)
    workflow = ScenarioCognitionProfile.objects.filter(scenario_id=scenario).first()
    assert workflow is not None
    workflow_hash = workflow.profile.workflow_id
    # a failed attempt with a long reason, and a queued one: the world page's cards with them
    (failed,) = turn_attempt_enqueue(slug=control, requested_by="wanda")["attempt_ids"]
    TurnAttempt.objects.filter(pk=failed).update(
        status="failed",
        failure_step="budget_exhausted",
        failure_reason="node 'act': budget_exhausted: budget max_tokens_total = 3000 of "
        f"experiment 'widths': http://127.0.0.1:8000/api/worlds/{control}/budget/ {'x' * 120}",
    )
    turn_attempt_enqueue(slug=control, requested_by="wanda")
    pages = [
        "/",
        "/worlds/",
        "/attempts/",
        "/llm-calls/",
        "/invocations/",
        "/annotations/",
        f"/worlds/{treated}/",
        f"/worlds/{control}/",
        f"/worlds/{treated}/turns/1/",
        f"/worlds/{treated}/diff/?from=0&to=2",
        f"/worlds/{treated}/compare/{control}/",
        f"/worlds/{treated}/interviews/",
        f"/attempts/{attempt.pk}/",
        "/store/",
        "/store/metrics/",
        f"/store/metrics/{metrics[0]}/",
        "/store/populations/",
        f"/store/populations/{population}/",
        "/populations/new/",
        f"/populations/{population}/biographies/",
        f"/biography-runs/{run.pk}/",
        "/store/cognition-workflows/",
        f"/store/cognition-workflows/{workflow_hash}/",
        "/scenarios/",
        f"/scenarios/{scenario}/",
        "/names/",
        "/workflows/author/",
        f"/workflows/author/?workflow={workflow_hash}",
        "/create-world/",
        "/experiments/",
        "/experiments/new/",
        "/experiments/widths/",
    ]
    if invocation:
        pages.append(f"/invocations/{invocation[0]}/")
    return pages


def workflow_hash(pages: list[str]) -> str:
    return next(p for p in pages if "?workflow=" in p).split("=")[-1]


def test_every_page_fits_390_px_and_the_world_tables_fit_their_cards(
    live_server: Any, browser: webdriver.Chrome
) -> None:
    user = User.objects.create_user("wanda", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    pages = _pages()
    sign_in(browser, live_server.url, "wanda", PASSWORD)

    browser.set_window_size(390, 844)
    too_wide: dict[str, Any] = {}
    for path in pages:
        browser.get(f"{live_server.url}{path}")
        sizes = browser.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth];"
        )
        if sizes[0] > sizes[1]:
            too_wide[path] = (sizes[0] - sizes[1], browser.execute_script(OVERFLOWING))
    browser.get(f"{live_server.url}/workflows/author/?workflow={workflow_hash(pages)}")
    full_page_shot(browser, "widths-editor-390", 390)
    browser.get(f"{live_server.url}/worlds/widths--treated--1/")
    full_page_shot(browser, "widths-world-390", 390)
    assert too_wide == {}, f"pages wider than 390 px (by px, what sticks out): {too_wide}"

    # At 1400 px the world page's tables fit their cards: nothing scrolls sideways inside.
    browser.set_window_size(1400, 1000)
    for slug in ("widths--treated--1", "widths--control--1"):
        browser.get(f"{live_server.url}/worlds/{slug}/")
        scrolling = browser.execute_script(
            """return Array.from(document.querySelectorAll('main .table-wrap, main table'))
                .filter(el => el.scrollWidth > el.clientWidth + 1)
                .map(el => (el.closest('[id]') || {}).id + ' ' + el.scrollWidth + '>' +
                           el.clientWidth);"""
        )
        assert scrolling == [], f"{slug}: tables scroll sideways at 1400 px: {scrolling}"
    full_page_shot(browser, "widths-world-1400", 1400)
