"""Safe by default: debug off, a generated secret key kept in the data folder,
loopback hosts, sign-in throttled after repeated failures, health detail for signed-in users."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chukwa_site import embedded

PROJECT_DIR = Path(__file__).resolve().parents[2]
PRINT_SETTINGS = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({'debug': settings.DEBUG, 'hosts': settings.ALLOWED_HOSTS, "
    "'key': settings.SECRET_KEY}))"
)


def settings_in_subprocess(data_dir: Path, **env: str) -> dict[str, Any]:
    """The settings a fresh process computes from ``env`` alone (external service URLs, so
    nothing embedded is started and nothing is connected to)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CHUKWA_DEBUG", "DJANGO_SECRET_KEY", "CHUKWA_ALLOWED_HOSTS")
    }
    base.update(
        DJANGO_SETTINGS_MODULE="chukwa_site.settings",
        CHUKWA_DATA_DIR=str(data_dir),
        DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
        REDIS_URL="redis://127.0.0.1:1/0",
        **env,
    )
    out = subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS],
        cwd=PROJECT_DIR,
        env=base,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_defaults_are_debug_off_loopback_hosts_and_a_kept_secret_key(tmp_path: Path) -> None:
    first = settings_in_subprocess(tmp_path)
    assert first["debug"] is False
    assert first["hosts"] == ["localhost", "127.0.0.1", "[::1]"]
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first["key"] == key_file.read_text().strip()
    assert len(first["key"]) >= 50
    assert settings_in_subprocess(tmp_path)["key"] == first["key"]  # reused, not regenerated


def test_environment_turns_debug_on_and_names_hosts_and_key(tmp_path: Path) -> None:
    got = settings_in_subprocess(
        tmp_path,
        CHUKWA_DEBUG="true",
        CHUKWA_ALLOWED_HOSTS="chukwa.example, 10.0.0.5",
        DJANGO_SECRET_KEY="k" * 60,
    )
    assert got == {"debug": True, "hosts": ["chukwa.example", "10.0.0.5"], "key": "k" * 60}
    assert not (tmp_path / "secret_key").exists()


def test_secret_key_file_that_is_empty_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUKWA_DATA_DIR", str(tmp_path))
    (tmp_path / "secret_key").write_text("")
    with pytest.raises(RuntimeError, match="no usable secret key"):
        embedded.secret_key()


@pytest.mark.django_db
def test_unknown_host_is_refused(client: Client) -> None:
    assert client.get("/accounts/login/", HTTP_HOST="evil.example").status_code == 400
    assert client.get("/accounts/login/", HTTP_HOST="localhost").status_code == 200


@pytest.mark.django_db
def test_static_files_are_served_with_debug_off(client: Client, settings: Any) -> None:
    assert settings.DEBUG is False
    response = client.get("/static/chukwa/site.css")
    assert response.status_code == 200
    assert b"".join(response.streaming_content)
    assert client.get("/static/admin/css/base.css").status_code == 200


# --- health -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_health_tells_anonymous_callers_the_status_only(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code in (200, 503)
    body = response.json()
    assert body == {"ok": response.status_code == 200}


@pytest.mark.django_db
def test_health_tells_signed_in_users_the_detail(client: Client, reader_user: User) -> None:
    client.force_login(reader_user)
    body = client.get("/healthz").json()
    assert body["database"]["ok"] is True
    assert {"ok", "database", "redis", "worker"} <= set(body)


# --- sign-in throttling -------------------------------------------------------------------


def _sign_in(client: Client, password: str, address: str = "10.1.1.1", url: str = "") -> Any:
    return client.post(
        url or "/accounts/login/",
        {"username": "alice", "password": password, "next": "/"},
        REMOTE_ADDR=address,
    )


@pytest.mark.django_db
def test_sign_in_is_throttled_after_five_failures(client: Client) -> None:
    User.objects.create_user("alice", password="the-right-password-1")
    for _ in range(5):
        assert _sign_in(client, "wrong").status_code == 200  # the form again, with its error
    response = _sign_in(client, "the-right-password-1")
    assert response.status_code == 429
    assert b"Too many failed sign-in attempts" in response.content
    assert int(response["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session
    # Another address is not affected, and signs in.
    assert _sign_in(Client(), "the-right-password-1", address="10.2.2.2").status_code == 302


@pytest.mark.django_db
def test_a_success_before_the_limit_resets_the_count(client: Client) -> None:
    User.objects.create_user("alice", password="the-right-password-1")
    for _ in range(4):
        _sign_in(client, "wrong")
    assert _sign_in(client, "the-right-password-1").status_code == 302
    client.logout()
    for _ in range(4):
        assert _sign_in(client, "wrong").status_code == 200
    assert _sign_in(client, "the-right-password-1").status_code == 302


@pytest.mark.django_db
def test_admin_sign_in_is_throttled_too(client: Client) -> None:
    User.objects.create_user("alice", password="the-right-password-1", is_staff=True)
    for _ in range(5):
        assert _sign_in(client, "wrong", url="/admin/login/").status_code == 200
    assert _sign_in(client, "the-right-password-1", url="/admin/login/").status_code == 429


@pytest.mark.django_db
def test_invalid_api_tokens_are_throttled_per_address_and_valid_ones_never(
    reader_user: User,
) -> None:
    good = Token.objects.create(user=reader_user).key
    client = APIClient(REMOTE_ADDR="10.3.3.3")
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    for _ in range(5):
        response = client.get("/api/worlds/")
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"
    response = client.get("/api/worlds/")
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "signin_throttled"
    assert "Too many failed sign-in attempts" in error["message"]
    assert int(response["Retry-After"]) == error["details"]["retry_after_seconds"]
    # The owner of a valid token shares the address and is not locked out with the guesser.
    client.credentials(HTTP_AUTHORIZATION=f"Token {good}")
    assert client.get("/api/worlds/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("token", ["a\x00b", "x" * 5000])
def test_impossible_token_is_a_401_not_a_lookup(token: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.get("/api/worlds/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CHUKWA_DEBUG", "ture"),
        ("CHUKWA_ATTEMPT_LEASE_SECONDS", "60s"),
        ("CHUKWA_LOG_LEVEL", "LOUD"),
    ],
)
def test_a_typo_in_a_setting_is_an_error_naming_it(name: str, value: str) -> None:
    """Settings are parsed strictly (environs): a mistyped boolean is not silently False."""
    result = subprocess.run(
        [sys.executable, "-c", "import chukwa_site.settings"],
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert name in result.stderr
