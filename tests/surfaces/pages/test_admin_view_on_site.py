"""Admin rows link to their browser pages ("View on site")."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import environment_put, scenario_assemble

pytestmark = pytest.mark.django_db


def _follow_view_on_site(client: Client, admin_url: str) -> str:
    page = client.get(admin_url)
    assert page.status_code == 200
    match = re.search(r'href="(/admin/r/[^"]+)"', page.content.decode())
    assert match, "the change page has no 'View on site' link"
    redirect = client.get(match.group(1))
    assert redirect.status_code == 302
    return redirect["Location"]


def test_admin_change_pages_link_to_the_browser(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", password="a-long-password-1"))
    env_hash = environment_put(content="A hall.")["hash"]
    location = _follow_view_on_site(client, f"/admin/scenarios_app/environment/{env_hash}/change/")
    assert location.endswith(f"/store/environments/{env_hash}/")
    assert client.get(location).status_code == 200
    scenario_hash = scenario_assemble(data=load_fixture("ant_on_plate_rules"))["scenario_hash"]
    location = _follow_view_on_site(
        client, f"/admin/scenarios_app/scenario/{scenario_hash}/change/"
    )
    assert location.endswith(f"/scenarios/{scenario_hash}/")
    assert client.get(location).status_code == 200
