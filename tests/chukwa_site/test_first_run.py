"""A first run that tells the truth: while the embedded toy model serves, every page says so;
a health check answering 503 while the stack warms up is not logged as an error; the Admin
link is shown to staff only."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from chukwa_site.logs import HealthCheckFilter

BANNER = "Embedded toy model."


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/worlds/", "/attempts/", "/scenarios/"])
def test_every_page_says_when_the_toy_model_serves(
    client: Client, reader_user: User, settings: Any, path: str
) -> None:
    client.force_login(reader_user)
    settings.CHUKWA_EMBEDDED_MODEL = True
    page = client.get(path).content.decode()
    assert BANNER in page and "CHUKWA_LLM_BASE_URL" in page
    settings.CHUKWA_EMBEDDED_MODEL = False
    assert BANNER not in client.get(path).content.decode()


def _record(path: str, status: int) -> logging.LogRecord:
    record = logging.LogRecord(
        "django.request", logging.ERROR, __file__, 1, "Service Unavailable: %s", (path,), None
    )
    record.request = RequestFactory().get(path)
    record.status_code = status
    return record


def test_a_warming_up_health_check_is_not_an_error() -> None:
    keep = HealthCheckFilter()
    logger = logging.getLogger("django.request")
    old = logger.level
    try:
        logger.setLevel(logging.WARNING)  # as deployed (CHUKWA_LOG_LEVEL's default)
        quiet = _record("/healthz", 503)
        assert keep.filter(quiet) is False  # INFO, below WARNING: not written
        assert (quiet.levelno, quiet.levelname) == (logging.INFO, "INFO")
        logger.setLevel(logging.INFO)
        assert keep.filter(_record("/healthz", 503)) is True  # written, at INFO
        logger.setLevel(logging.WARNING)
        for record in (_record("/api/worlds/", 503), _record("/healthz", 500)):
            assert keep.filter(record) is True and record.levelno == logging.ERROR
    finally:
        logger.setLevel(old)


@pytest.mark.django_db
def test_the_admin_link_is_for_staff_only(client: Client, reader_user: User) -> None:
    client.force_login(reader_user)
    assert 'href="/admin/"' not in client.get("/").content.decode()
    staff = User.objects.create_user("staffer", password="a-long-password-1", is_staff=True)
    client.force_login(staff)
    assert 'href="/admin/"' in client.get("/").content.decode()


@pytest.mark.django_db
def test_create_user_makes_readers_and_operators(client: Client) -> None:
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    out = StringIO()
    call_command("create_user", "rita", "--reader", stdout=out)
    token = out.getvalue().split("API token: ")[1].strip()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/worlds/").status_code == 200
    denied = api.post("/api/environments/", {"content": "A field."}, format="json")
    assert denied.status_code == 403
    rita = User.objects.get(username="rita")
    assert not rita.is_staff and not rita.groups.exists()

    call_command("create_user", "rita", "--operator", stdout=StringIO())
    assert api.post("/api/environments/", {"content": "A field."}, format="json").status_code == 201
    rita.refresh_from_db()
    assert rita.is_staff and rita.groups.filter(name="operators").exists()
