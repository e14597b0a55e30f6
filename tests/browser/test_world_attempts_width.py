"""At 1400 px the world page's attempts card holds its table without sideways scrolling, on a
world with several attempts of every kind a row can show: committed turns with their costs, a
failure with a long reason (an unbroken URL in it), a queued attempt. Screenshot in
test-artifacts/world-attempts-1400.png."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from selenium import webdriver

from tests.cognition_app.test_cost_budgets import add_price
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.support.chromium import full_page_shot, sign_in
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worlds import create_world, run_turn
from worlds_app.models import TurnAttempt
from worlds_app.services import turn_attempt_enqueue

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-password-1"
USAGE = {"prompt_tokens": 123_456, "completion_tokens": 7_890}

# The attempts card and every scrolling box inside it: (what, scrollWidth, clientWidth).
WIDTHS = """
const card = document.getElementById('queue');
return [card, ...card.querySelectorAll('.table-wrap, table')].map(el =>
  [el.id || el.className || el.tagName, el.scrollWidth, el.clientWidth]);
"""


def test_the_attempts_card_does_not_scroll_sideways_at_1400_px(
    live_server: Any, browser: webdriver.Chrome, scripted_llm: ScriptedLLM
) -> None:
    user = User.objects.create_user("wanda", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    add_price()
    create_world("ant_on_plate", "crowded")
    for _ in range(3):
        scripted_llm.script(Reply(text=json.dumps(ANT_OK), usage=USAGE))
        run_turn("crowded")
    (failed,) = turn_attempt_enqueue(slug="crowded", requested_by="wanda")["attempt_ids"]
    TurnAttempt.objects.filter(pk=failed).update(
        status="failed",
        failure_step="budget_exhausted",
        failure_reason="node 'act': budget_exhausted: budget max_tokens_total = 3000 of the "
        f"world: http://127.0.0.1:8000/api/worlds/crowded/budget/{'x' * 160}",
    )
    turn_attempt_enqueue(slug="crowded", requested_by="wanda")
    assert TurnAttempt.objects.filter(world__slug="crowded").count() == 5

    sign_in(browser, live_server.url, "wanda", PASSWORD)
    browser.set_window_size(1400, 1000)
    browser.get(f"{live_server.url}/worlds/crowded/")
    rows = browser.execute_script("return document.querySelectorAll('#queue tbody tr').length")
    assert rows == 5
    widths = browser.execute_script(WIDTHS)
    scrolling = [w for w in widths if w[1] > w[2]]
    assert scrolling == [], f"the attempts card scrolls sideways at 1400 px: {scrolling}"
    full_page_shot(browser, "world-attempts-1400", 1400)
