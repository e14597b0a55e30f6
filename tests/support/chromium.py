"""Headless Chromium for the browser tests (Debian's chromium + chromedriver, Selenium)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

PROJECT = Path(__file__).resolve().parents[2]
CONTRAST = (Path(__file__).parent / "contrast.js").read_text()
ARTIFACTS = PROJECT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[webdriver.Chrome]:
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    ARTIFACTS.mkdir(exist_ok=True)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """``predicate``'s first truthy value within ``timeout`` seconds. An element the page
    replaced between being found and being read (an htmx swap) is "not yet", as selenium's
    WebDriverWait can be told to treat it: the predicate runs again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except StaleElementReferenceException:
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def sign_in(driver: webdriver.Chrome, base: str, username: str, password: str) -> None:
    driver.get(f"{base}/accounts/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(lambda: "/accounts/login/" not in driver.current_url, 10, "the sign-in")


def low_contrast(driver: webdriver.Chrome) -> list[Any]:
    """Text below WCAG AA contrast on the current page (see contrast.js)."""
    rows: list[Any] = driver.execute_script(CONTRAST)
    return rows


def prefer_colour_scheme(driver: webdriver.Chrome, scheme: str) -> None:
    """Emulate the system's colour preference ("light" or "dark"); the open page follows it."""
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )


def full_page_shot(driver: webdriver.Chrome, name: str, width: int) -> None:
    """A screenshot of the whole page at ``width`` px, saved as test-artifacts/<name>.png."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height + 140, 600), 4000))
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def sideways_overflow(driver: webdriver.Chrome) -> int:
    """How many px the page is wider than the window (0 or less: it fits)."""
    return int(
        driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
    )
