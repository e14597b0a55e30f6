"""The REST API takes an API token as ``Authorization: Bearer <token>`` — what MCP clients and
most HTTP libraries send — as well as ``Token <token>``; a wrong one is a 401, never a
silent anonymous read, and counts toward the address's sign-in throttle like any bad token."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from surfaces.models import SigninFailure

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_rest_api_accepts_bearer_and_token_alike(live_server: Any) -> None:
    user = User.objects.create_user("olga", password="x")
    key = Token.objects.create(user=user).key
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        for scheme in ("Bearer", "Token", "bearer"):
            answer = http.get("/api/experiments/", headers={"Authorization": f"{scheme} {key}"})
            assert answer.status_code == 200, (scheme, answer.text)
            assert answer.json() == {"results": []}
        refused = http.get("/api/experiments/", headers={"Authorization": "Bearer " + "0" * 40})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] in ("authentication_failed", "not_authenticated")
        assert SigninFailure.objects.exists()
        assert http.get("/api/experiments/").status_code in (401, 403)
