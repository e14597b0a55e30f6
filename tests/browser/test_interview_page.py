"""The interviews page (docs/populations.md, "Interviewing without disturbing") in Chromium:
an operator asks with the form, the interview is queued for a real Celery worker, and its card
follows it to the answers and the two equal state hashes without the page being reloaded.
Screenshots go to test-artifacts/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from devservices import toys
from scenarios_app.services import response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.chromium import ARTIFACTS, chromium, sign_in, wait_for
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.worker import routed_to, unread_queue, worker_process
from tests.worlds_app.test_measurements import buyers_world
from worlds_app.models import Interview, Turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PASSWORD = "a-long-password-1"


@pytest.fixture
def interview_worker(tmp_path: Path) -> Iterator[ScriptedLLM]:
    """The scripted model, the toys (the buyers' vending machine) and a worker reaching both."""
    llm = ScriptedLLM()
    llm.start()
    toy_server = toys.serve("127.0.0.1", 0, tmp_path / "toys")
    toy_base = f"http://127.0.0.1:{toy_server.server_address[1]}"
    saved = {name: os.environ.get(name) for name in toys.toy_env(toy_base)}
    os.environ.update(toys.toy_env(toy_base))  # the buyers' turns run in this process
    queue = f"interview-page-{os.getpid()}"
    env = {
        **toys.toy_env(toy_base),
        "CHUKWA_DB_NAME": connection.settings_dict["NAME"],
        "CHUKWA_LLM_BASE_URL": llm.base_url,
        "CHUKWA_LLM_API_KEY": "test-secret-key",
    }
    try:
        with unread_queue(f"{queue}-setup"):
            buyers_world("buyers", 1)
        with worker_process(queue, env=env, queue=queue), routed_to(queue):
            yield llm
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        toy_server.shutdown()
        toy_server.server_close()
        llm.stop()


def test_the_interview_card_follows_the_worker_to_the_answers_without_a_reload(
    live_server: Any, interview_worker: ScriptedLLM
) -> None:
    user = User.objects.create_user("asker", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    source = response_source_put(content=LLM_SOURCE)["hash"]
    hash_before = Turn.objects.get(world__slug="buyers", number=1).state_hash
    interview_worker.script(
        Reply(text="I pressed the button and the candy bar dropped.", delay_s=1.5),
        Reply(text="The machine was already empty when I tried.", delay_s=1.5),
    )
    with chromium(width=1200, height=900) as browser:
        sign_in(browser, live_server.url, "asker", PASSWORD)
        browser.get(f"{live_server.url}/worlds/buyers/interviews/")
        browser.find_element(By.ID, "iv-questions").send_keys("What happened at the machine?")
        Select(browser.find_element(By.ID, "iv-source")).select_by_value(source)
        browser.find_element(By.CSS_SELECTOR, "#interview-form button[type=submit]").click()
        made = wait_for(lambda: Interview.objects.first(), 10, "the interview to be stored")
        card = f"#interview-{made.pk}"
        wait_for(
            lambda: browser.find_elements(By.CSS_SELECTOR, f"{card}[hx-get]"),
            10,
            "the page showing the interview's live card",
        )
        browser.execute_script("window.__sameLoad = 'yes';")
        seen: list[str] = []

        def status() -> str:
            found = browser.find_element(By.CSS_SELECTOR, card).get_attribute("data-status")
            if not seen or seen[-1] != found:
                seen.append(str(found))
            return str(found)

        wait_for(lambda: status() == "running", 60, "the card to show the worker running it")
        browser.execute_script("document.querySelector(arguments[0]).scrollIntoView()", card)
        browser.save_screenshot(str(ARTIFACTS / "interview-1-running.png"))
        wait_for(lambda: status() == "completed", 90, "the card to show the answers")
        browser.execute_script("document.querySelector(arguments[0]).scrollIntoView()", card)
        browser.save_screenshot(str(ARTIFACTS / "interview-2-completed.png"))
        assert browser.execute_script("return window.__sameLoad") == "yes", "the page reloaded"
        text = browser.find_element(By.CSS_SELECTOR, card).text
        assert "I pressed the button and the candy bar dropped." in text
        assert "The machine was already empty when I tried." in text
        assert "World unchanged" in text and "2 of 2 answers" in text
        shown = browser.find_elements(By.CSS_SELECTOR, f'{card} [data-key="unchanged"] code')
        titles = [c.get_attribute("title") for c in shown]
        assert titles == [hash_before, hash_before]
        assert not browser.find_elements(By.CSS_SELECTOR, f"{card}[hx-get]")  # polling stopped
        assert seen[-2:] == ["running", "completed"]
