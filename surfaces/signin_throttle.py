"""Sign-in throttling (SPEC §11): after repeated failures from one address, refuse with a 429.

Password sign-ins (the login page, the admin login, anything calling ``authenticate``) count
failures per username and client address; API token failures count per client address (a
token carries no username). The counters live in Django's cache, which settings back with the
database, so every web process sees the same counts and tests roll them back with the rest.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db import DEFAULT_DB_ALIAS, connection
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework import exceptions as drf_exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.request import Request

from chukwa_core.errors import ChukwaError
from scenarios_app.sql_rows import fetch_dict

RETRY_AFTER_ATTRIBUTE = "_chukwa_signin_retry_after"


def _limit() -> int:
    return int(getattr(settings, "CHUKWA_SIGNIN_FAILURE_LIMIT", 5))


def _window_seconds() -> int:
    return int(getattr(settings, "CHUKWA_SIGNIN_WINDOW_SECONDS", 15 * 60))


def client_address(request: HttpRequest | None) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is whatever the client says unless a trusted proxy
    # rewrites it, and trusting it would let an attacker pick a fresh address per attempt.
    if request is None:
        return ""
    return str(request.META.get("REMOTE_ADDR", ""))


def _key(kind: str, username: str, address: str) -> str:
    # Hashed: usernames are arbitrary user input and cache keys have a length and charset limit.
    raw = f"{kind}\0{username.casefold()}\0{address}".encode("utf-8", "surrogatepass")
    return "signin-failures:" + hashlib.sha256(raw).hexdigest()


def retry_after(*, kind: str, username: str, address: str) -> int | None:
    """Seconds until sign-in is allowed again, or None when it is allowed now."""
    record = cache.get(_key(kind, username, address))
    now = time.time()
    if not record or record["until"] <= now or record["count"] < _limit():
        return None
    return max(1, math.ceil(record["until"] - now))


def record_failure(*, kind: str, username: str, address: str) -> None:
    """Count one failure in a window that opens at the first failure and lasts the window.

    Read-modify-write without a lock: racing failures may count once instead of twice, which
    lets an attacker a handful of extra guesses at most, never an unlimited number."""
    key = _key(kind, username, address)
    now = time.time()
    record = cache.get(key)
    if not record or record["until"] <= now:
        record = {"count": 0, "until": now + _window_seconds()}
    record["count"] += 1
    cache.set(key, record, timeout=max(1, math.ceil(record["until"] - now)))


def clear_failures(*, kind: str, username: str, address: str) -> None:
    cache.delete(_key(kind, username, address))


def throttled_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return (
        f"Too many failed sign-in attempts from this address; try again in about "
        f"{minutes} minute{'s' if minutes != 1 else ''}."
    )


class ThrottledModelBackend(ModelBackend):
    """The model backend, refusing a username+address that failed too often recently."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        if username is None:
            username = kwargs.get(self._username_field(), "")
        name = str(username or "")
        address = client_address(request)
        wait = retry_after(kind="password", username=name, address=address)
        if wait is not None:
            if request is not None:
                setattr(request, RETRY_AFTER_ATTRIBUTE, wait)
            # PermissionDenied stops authenticate() from trying any later backend.
            raise PermissionDenied(throttled_message(wait))
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            if name:
                record_failure(kind="password", username=name, address=address)
        else:
            clear_failures(kind="password", username=name, address=address)
        return user

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return str(get_user_model().USERNAME_FIELD)


def signin_throttle_middleware(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """A sign-in refused by the throttle answers 429 with a clear message, not the login form's
    generic "wrong password" (which would send the user guessing again)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        wait = getattr(request, RETRY_AFTER_ATTRIBUTE, None)
        if wait is None:
            return response
        error = ChukwaError(
            "signin_throttled",
            throttled_message(wait),
            {"retry_after_seconds": wait},
            status_code=429,
        )
        throttled = render(request, "error.html", {"error": error}, status=429)
        throttled["Retry-After"] = str(wait)
        return throttled

    return middleware


class SigninThrottled(drf_exceptions.APIException):
    status_code = 429
    default_code = "signin_throttled"

    def __init__(self, wait: int) -> None:
        super().__init__(throttled_message(wait))
        self.wait = wait


class ThrottledTokenAuthentication(TokenAuthentication):
    """Token authentication that stops answering an address after repeated invalid tokens."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        address = client_address(request._request)
        wait = retry_after(kind="token", username="", address=address)
        if wait is not None:
            raise SigninThrottled(wait)
        try:
            return super().authenticate(request)
        except drf_exceptions.AuthenticationFailed:
            record_failure(kind="token", username="", address=address)
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        """DRF's lookup (the token and its user, refused if unknown or the user inactive) in
        one statement written once: every API request runs it, and the ORM spent ~0.4 ms of
        CPU compiling the query, several times what running it costs. Read on every request,
        never cached, so a deleted token stops working at once."""
        # DRF keys are 40 hex characters; anything else is refused before the lookup, so a NUL
        # byte in a header never reaches PostgreSQL as a text parameter.
        if len(key) > 40 or "\x00" in key:
            raise drf_exceptions.AuthenticationFailed("Invalid token.")
        sql, token_fields, user_fields = _token_user_query()
        row = fetch_dict(sql, [key])
        if row is None:
            raise drf_exceptions.AuthenticationFailed("Invalid token.")
        token = Token.from_db(DEFAULT_DB_ALIAS, token_fields, [row[f"t_{f}"] for f in token_fields])
        user = User.from_db(DEFAULT_DB_ALIAS, user_fields, [row[f"u_{f}"] for f in user_fields])
        if not user.is_active:
            raise drf_exceptions.AuthenticationFailed("User inactive or deleted.")
        token.user = user
        return (user, token)


@functools.cache
def _token_user_query() -> tuple[str, list[str], list[str]]:
    """``SELECT <token columns>, <user columns> … WHERE key = %s``, from the models' own
    metadata (every concrete field, as ``select_related("user")`` loads them)."""

    def quote(name: str | None) -> str:
        assert name is not None  # a concrete field always has a column
        return connection.ops.quote_name(name)

    token_fields = list(Token._meta.concrete_fields)
    user_fields = list(User._meta.concrete_fields)
    columns = [f"t.{quote(f.column)} AS t_{f.attname}" for f in token_fields]
    columns += [f"u.{quote(f.column)} AS u_{f.attname}" for f in user_fields]
    token_user = Token._meta.get_field("user")
    sql = (
        # table and column names are the models' own, quoted; the key is a parameter
        f"SELECT {', '.join(columns)} FROM {quote(Token._meta.db_table)} t "  # noqa: S608
        f"JOIN {quote(User._meta.db_table)} u "
        f"ON u.{quote(User._meta.pk.column)} = t.{quote(token_user.column)} "
        f"WHERE t.{quote(Token._meta.pk.column)} = %s"
    )
    return sql, [f.attname for f in token_fields], [f.attname for f in user_fields]
