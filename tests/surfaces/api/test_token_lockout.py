"""One client must never lock the others out (docs/operations.md, "Sign-in throttling"): over
real HTTP, every client of the live server shares one address (127.0.0.1), as clients behind a
proxy, a NAT or on one host do. Invalid tokens from it are refused once over the limit; valid
tokens (an operator's, a reader's, an MCP client's) are always accepted; password sign-in stays
throttled per username and address. Behind trusted proxies the address comes from the entry of
``X-Forwarded-For`` the outermost proxy wrote."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import RequestFactory, override_settings
from rest_framework.authtoken.models import Token

from surfaces.models import SigninFailure
from surfaces.signin_throttle import _key, client_address

pytestmark = pytest.mark.django_db(transaction=True)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}


def _token(user: User) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def test_bad_tokens_from_one_address_never_lock_out_valid_ones(
    live_server: Any, operator_user: User, reader_user: User
) -> None:
    base = live_server.url
    operator, reader = _token(operator_user), _token(reader_user)
    with httpx.Client(base_url=base, timeout=30) as http:
        made_up = [
            http.get("/api/worlds/", headers={"Authorization": f"Token {n:040x}"}) for n in range(6)
        ]
        assert [r.status_code for r in made_up] == [401] * 5 + [429]
        assert made_up[-1].json()["error"]["code"] == "signin_throttled"
        assert int(made_up[-1].headers["Retry-After"]) > 0
        # An MCP client with a made-up bearer token is refused the same way.
        bad_mcp = http.post(
            "/mcp/", json=INITIALIZE, headers={**MCP_ACCEPT, "Authorization": "Bearer " + "e" * 40}
        )
        assert bad_mcp.status_code == 429

        # Every valid token from the same address is still served: reads, writes, MCP.
        read = http.get("/api/worlds/", headers={"Authorization": f"Token {reader}"})
        assert read.status_code == 200
        write = http.post(
            "/api/environments/",
            json={"content": "A field nobody locked out."},
            headers={"Authorization": f"Token {operator}"},
        )
        assert write.status_code == 201, write.text
        for authorization in (f"Bearer {reader}", f"Token {operator}"):
            mcp = http.post(
                "/mcp/", json=INITIALIZE, headers={**MCP_ACCEPT, "Authorization": authorization}
            )
            assert mcp.status_code == 200, mcp.text
            assert mcp.json()["result"]["serverInfo"]["name"] == "chukwa"

        # Still over the limit: the next invalid token is refused, not answered 401.
        again = http.get("/api/worlds/", headers={"Authorization": "Token " + "d" * 40})
        assert again.status_code == 429
    # Valid tokens were never counted as failures; refused ones were not counted again.
    assert SigninFailure.objects.get(key=_key("token", "", "127.0.0.1")).count == 5


def _sign_in(http: httpx.Client, password: str) -> httpx.Response:
    form = http.get("/accounts/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert csrf is not None
    return http.post(
        "/accounts/login/",
        data={
            "username": "alice",
            "password": password,
            "csrfmiddlewaretoken": csrf.group(1),
            "next": "/",
        },
        headers={"Referer": f"{http.base_url}accounts/login/"},
    )


def test_password_sign_in_is_still_throttled_per_username_and_address(
    live_server: Any, reader_user: User
) -> None:
    User.objects.create_user("alice", password="the-right-password-1")
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        for _ in range(5):
            assert _sign_in(http, "wrong").status_code == 200  # the form again
        refused = _sign_in(http, "the-right-password-1")
        assert refused.status_code == 429
        assert "Too many failed sign-in attempts" in refused.text
        assert int(refused.headers["Retry-After"]) > 0
        # A token of another user from the same address is not affected.
        read = http.get("/api/worlds/", headers={"Authorization": f"Token {_token(reader_user)}"})
        assert read.status_code == 200


def _request(remote: str, forwarded: str | None = None) -> Any:
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return RequestFactory().get("/api/worlds/", REMOTE_ADDR=remote, **extra)


def test_without_trusted_proxies_the_forwarded_header_is_ignored() -> None:
    assert client_address(_request("10.0.0.9", "1.2.3.4")) == "10.0.0.9"


@override_settings(CHUKWA_TRUSTED_PROXY_HOPS=1)
def test_one_trusted_proxy_names_the_client_in_the_last_entry() -> None:
    # The client sent "6.6.6.6" itself; the proxy appended the address it saw.
    assert client_address(_request("10.0.0.2", "6.6.6.6, 203.0.113.7")) == "203.0.113.7"
    assert client_address(_request("10.0.0.2", "203.0.113.8")) == "203.0.113.8"
    # No entry: the request did not come through the proxy.
    assert client_address(_request("10.0.0.2")) == "10.0.0.2"


@override_settings(CHUKWA_TRUSTED_PROXY_HOPS=2)
def test_two_trusted_proxies_read_the_second_entry_from_the_right() -> None:
    assert client_address(_request("10.0.0.3", "6.6.6.6, 198.51.100.4, 10.0.0.2")) == (
        "198.51.100.4"
    )
    # Fewer entries than proxies: REMOTE_ADDR, never the client's own claim.
    assert client_address(_request("10.0.0.3", "6.6.6.6")) == "10.0.0.3"


@override_settings(CHUKWA_TRUSTED_PROXY_HOPS=1)
def test_behind_a_trusted_proxy_clients_are_throttled_apart(live_server: Any) -> None:
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        for _ in range(5):
            bad = http.get(
                "/api/worlds/",
                headers={"Authorization": "Token " + "c" * 40, "X-Forwarded-For": "203.0.113.1"},
            )
            assert bad.status_code == 401
        over = http.get(
            "/api/worlds/",
            headers={"Authorization": "Token " + "c" * 40, "X-Forwarded-For": "203.0.113.1"},
        )
        assert over.status_code == 429
        # Another client behind the same proxy has its own count.
        other = http.get(
            "/api/worlds/",
            headers={"Authorization": "Token " + "c" * 40, "X-Forwarded-For": "203.0.113.2"},
        )
        assert other.status_code == 401
