"""Every browser page with hostile path, query and form values answers a 4xx (or a normal
page), never a server error: the pages' counterpart of the API schema fuzz."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLResolver, get_resolver

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from tests.surfaces.api.test_api_fuzz import NASTY
from worlds_app.services import world_create

PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")
# Pages only: the API has its own fuzz test, the admin is Django's, health may be 503 by design.
SKIPPED = ("admin/", "^api/", "api/", "healthz", "accounts/")
QUERY_KEYS = ("world", "subject", "to", "from", "limit", "offset", "scenario", "created_after")
FORM_KEYS = ("count", "content", "world", "subject", "scenario", "label", "name", "note")


def _routes(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern)


@pytest.mark.django_db
def test_no_page_answers_with_a_server_error(operator_user: User) -> None:
    scenario_assemble(data=load_fixture("ant_on_plate_rules"))
    world_create(data={"slug": "plate", "scenario_ref": {"name": "ant_on_plate_rules"}})
    client = Client(raise_request_exception=False)
    client.force_login(operator_user)
    routes = [r for r in _routes(get_resolver().url_patterns) if not r.startswith(SKIPPED)]
    failures: list[str] = []
    requests = 0
    for route in routes:
        for value in NASTY:
            url = "/" + PARAMETER.sub(quote(value, safe=""), route)
            query = "&".join(f"{key}={quote(value, safe='')}" for key in QUERY_KEYS)
            for suffix in ("", "?format=json", f"?{query}", f"?{query}&format=json"):
                for method in ("get", "post"):
                    form = dict.fromkeys(FORM_KEYS, value) if method == "post" else None
                    response = getattr(client, method)(url + suffix, form)
                    requests += 1
                    if response.status_code >= 500:
                        failures.append(f"{method.upper()} {url[:80]}{suffix[:80]}")
            if not PARAMETER.search(route):
                break  # the query and form values above already ran for this route
    print(f"\npage fuzz: {len(routes)} routes, {requests} requests, {len(failures)} server errors")
    assert len(routes) >= 20
    assert failures == []
