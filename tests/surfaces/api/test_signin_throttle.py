"""The sign-in throttle's counters (surfaces/signin_throttle.py): failures racing each
other are all counted, ended windows start again and are pruned, and an API request with a token
checks the throttle in the same statement as the token; password attempts racing each other
never get more guesses than the limit."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from surfaces.models import SigninFailure
from surfaces.signin_throttle import RETRY_AFTER_ATTRIBUTE, _key, record_failure, retry_after


@pytest.mark.django_db(transaction=True)
def test_racing_failures_are_all_counted() -> None:
    """A read-then-write counter (the cache's get and set) loses the increments that overlap:
    many parallel guesses would count as a few, each wave buying the attacker more guesses."""
    threads = 12
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def fail_once() -> None:
        try:
            start.wait()
            record_failure(kind="token", username="", address="10.7.7.7")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=fail_once) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert SigninFailure.objects.get(key=_key("token", "", "10.7.7.7")).count == threads
    assert retry_after(kind="token", username="", address="10.7.7.7") is not None


@pytest.mark.django_db(transaction=True)
def test_racing_password_guesses_get_no_more_tries_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twelve guesses at once from one address: each is counted before its password is checked,
    so five are checked and seven refused — not twelve checked because none had been counted
    when each looked."""
    User.objects.create_user("carol", password="the-right-password-1")
    checked: list[str] = []
    check = ModelBackend.authenticate

    def slow_check(backend: Any, request: Any, **kwargs: Any) -> Any:
        checked.append(kwargs.get("password", ""))
        time.sleep(0.2)  # a password hash takes a while: every guess is in flight at once
        return check(backend, request, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", slow_check)
    threads = 12
    start = threading.Barrier(threads)
    outcomes: list[str] = []

    def guess(n: int) -> None:
        request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="10.9.9.9")
        try:
            start.wait()
            user = authenticate(request, username="carol", password=f"guess-{n}")
            refused = hasattr(request, RETRY_AFTER_ATTRIBUTE)  # the 429's mark
            outcomes.append("refused" if refused else "wrong" if user is None else "in")
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcomes.append(repr(exc))
        finally:
            connections.close_all()

    workers = [threading.Thread(target=guess, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["wrong"] * 5
    assert len(checked) == 5
    # the right password is refused too until the window ends (not checked); a success clears
    request = RequestFactory().post("/", REMOTE_ADDR="10.9.9.9")
    assert authenticate(request, username="carol", password="the-right-password-1") is None
    assert hasattr(request, RETRY_AFTER_ATTRIBUTE) and len(checked) == 5
    SigninFailure.objects.all().delete()
    request = RequestFactory().post("/", REMOTE_ADDR="10.9.9.9")
    assert authenticate(request, username="carol", password="the-right-password-1") is not None
    assert not SigninFailure.objects.exists()


@pytest.mark.django_db
def test_an_ended_window_counts_from_one_and_ended_windows_are_pruned() -> None:
    past = timezone.now() - timedelta(seconds=1)
    ended = [SigninFailure(key=f"{n:064x}", count=9, until=past) for n in range(150)]
    SigninFailure.objects.bulk_create(ended)
    key = _key("password", "alice", "10.1.1.1")
    SigninFailure.objects.create(key=key, count=9, until=past)
    assert retry_after(kind="password", username="Alice", address="10.1.1.1") is None

    record_failure(kind="password", username="ALICE", address="10.1.1.1")
    row = SigninFailure.objects.get(key=key)
    assert row.count == 1
    assert row.until > timezone.now() + timedelta(seconds=800)  # a new 900 s window
    # at most 100 ended windows go per failure recorded, the oldest first
    assert SigninFailure.objects.filter(until__lte=timezone.now()).count() == 50
    record_failure(kind="password", username="bob", address="10.1.1.1")
    assert SigninFailure.objects.filter(until__lte=timezone.now()).count() == 0
    assert SigninFailure.objects.count() == 2


@pytest.mark.django_db
def test_a_token_and_the_throttle_are_one_statement_and_no_token_costs_none(
    reader_user: User,
) -> None:
    key = Token.objects.create(user=reader_user).key
    with_token = APIClient(REMOTE_ADDR="10.5.5.5")
    with_token.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    with CaptureQueriesContext(connection) as queries:
        assert with_token.get("/api/worlds/").status_code == 200
    touching = [q["sql"] for q in queries.captured_queries if "signinfailure" in q["sql"]]
    assert len(touching) == 1
    assert "authtoken_token" in touching[0]

    signed_in = APIClient(REMOTE_ADDR="10.5.5.5")
    signed_in.force_login(reader_user)
    with CaptureQueriesContext(connection) as queries:
        assert signed_in.get("/api/worlds/").status_code == 200
    assert not [q for q in queries.captured_queries if "signinfailure" in q["sql"]]
    assert not [q for q in queries.captured_queries if "authtoken_token" in q["sql"]]


@pytest.mark.django_db
@pytest.mark.parametrize("header", ["Token", "Token a b", "Token not-a-real-token"])
def test_a_throttled_address_gets_a_429_whatever_its_header(header: str) -> None:
    client = APIClient(REMOTE_ADDR="10.6.6.6")
    client.credentials(HTTP_AUTHORIZATION="Token wrong-token")
    for _ in range(5):
        assert client.get("/api/worlds/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/worlds/")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "signin_throttled"
    # the refused requests were not counted again: the window still holds five failures
    assert SigninFailure.objects.get(key=_key("token", "", "10.6.6.6")).count == 5


@pytest.mark.django_db
def test_malformed_headers_count_as_failures() -> None:
    client = APIClient(REMOTE_ADDR="10.8.8.8")
    client.credentials(HTTP_AUTHORIZATION="Token")
    for _ in range(5):
        response = client.get("/api/worlds/")
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"
    assert client.get("/api/worlds/").status_code == 429
