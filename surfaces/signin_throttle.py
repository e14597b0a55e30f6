"""Sign-in throttling (docs/operations.md, "Sign-in throttling"): slow down guessing, never lock
out an owner of valid credentials by their address.

Password sign-ins (the login page, the admin login, anything calling ``authenticate``) count
attempts per username and client address, each before its password is checked (a success
clears the count), so parallel guesses cannot all pass the check before any is counted.

API tokens are different: a token is 160 random bits, which no one guesses, and the clients
behind one address (a proxy, a NAT, one host running several scripts) share that address. So a
valid token is always accepted, whatever the address's count; only invalid tokens count, per
client address, and only they are refused (429) once the address is over the limit. One
misconfigured script therefore slows itself down, not every other client of its address.

The counters are rows (``surfaces.models.SigninFailure``), so every web process sees the same
counts, each attempt or failure is counted by one atomic statement, and tests roll them back
with the rest. An API request with a token checks the throttle in the same statement as the
token.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
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
from surfaces.models import SigninFailure

RETRY_AFTER_ATTRIBUTE = "_chukwa_signin_retry_after"


def _limit() -> int:
    return int(getattr(settings, "CHUKWA_SIGNIN_FAILURE_LIMIT", 5))


def _window_seconds() -> int:
    return int(getattr(settings, "CHUKWA_SIGNIN_WINDOW_SECONDS", 15 * 60))


def _trusted_proxy_hops() -> int:
    return int(getattr(settings, "CHUKWA_TRUSTED_PROXY_HOPS", 0))


def client_address(request: HttpRequest | None) -> str:
    """The address a request came from, for counting failures.

    With no trusted proxy (``CHUKWA_TRUSTED_PROXY_HOPS=0``, the default), ``REMOTE_ADDR`` only:
    ``X-Forwarded-For`` is whatever the client says, and trusting it would let an attacker pick
    a fresh address per attempt. With N trusted proxies in front, each appends the address it
    received the request from, so the N-th entry from the right was written by the outermost
    trusted proxy and names the client; entries left of it are the client's own claims and are
    ignored. A request carrying fewer entries than N did not come through every proxy: its
    ``REMOTE_ADDR`` is used."""
    if request is None:
        return ""
    remote = str(request.META.get("REMOTE_ADDR", ""))
    hops = _trusted_proxy_hops()
    if hops <= 0:
        return remote
    forwarded = [
        part.strip() for part in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")
    ]
    forwarded = [part for part in forwarded if part]
    if len(forwarded) < hops:
        return remote
    return forwarded[-hops][:64]


def _key(kind: str, username: str, address: str) -> str:
    # Hashed: usernames are arbitrary user input of any length.
    raw = f"{kind}\0{username.casefold()}\0{address}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


# Seconds left in a window that has reached the limit (NULL when sign-in is allowed), as a
# subquery of one row's key: the token check runs it in the same statement as the lookup.
_WAIT_SQL = f"""
SELECT greatest(1, ceil(extract(epoch FROM f.until - clock_timestamp())))::int
FROM {SigninFailure._meta.db_table} f
WHERE f.key = %s AND f.count >= %s AND f.until > clock_timestamp()
"""  # noqa: S608  (the model's own table; the values are parameters)

# One failure, counted atomically: racing failures each count (a read-then-write of a shared
# counter loses the increments that overlap, so many parallel guesses would count as a few).
_RECORD_SQL = f"""
INSERT INTO {SigninFailure._meta.db_table} AS f (key, count, until)
VALUES (%s, 1, clock_timestamp() + make_interval(secs => %s))
ON CONFLICT (key) DO UPDATE SET
    count = CASE WHEN f.until <= clock_timestamp() THEN 1 ELSE f.count + 1 END,
    until = CASE WHEN f.until <= clock_timestamp() THEN EXCLUDED.until ELSE f.until END
"""  # noqa: S608  (the model's own table; the values are parameters)

# One password attempt, counted before the password is checked (as one failure, atomically):
# the count so far and the seconds left in its window.
_TAKE_SQL = f"""{_RECORD_SQL}
RETURNING f.count, greatest(1, ceil(extract(epoch FROM f.until - clock_timestamp())))::int
"""

# Ended windows, a bounded number per failure recorded: the table holds the windows still open.
_PRUNE_SQL = f"""
DELETE FROM {SigninFailure._meta.db_table} WHERE key IN (
    SELECT key FROM {SigninFailure._meta.db_table} WHERE until <= clock_timestamp()
    ORDER BY until LIMIT 100 FOR UPDATE SKIP LOCKED
)
"""  # noqa: S608  (the model's own table)


def retry_after(*, kind: str, username: str, address: str) -> int | None:
    """Seconds until sign-in is allowed again, or None when it is allowed now."""
    row = fetch_dict(f"SELECT ({_WAIT_SQL}) AS wait", [_key(kind, username, address), _limit()])
    return None if row is None else row["wait"]


def record_failure(*, kind: str, username: str, address: str) -> None:
    """Count one failure in a window that opens at the first failure and lasts the window."""
    with connection.cursor() as cursor:
        cursor.execute(_RECORD_SQL, [_key(kind, username, address), _window_seconds()])
        cursor.execute(_PRUNE_SQL)


def take_attempt(*, kind: str, username: str, address: str) -> int | None:
    """Count one attempt as a failure before it is checked; the seconds until sign-in is allowed
    again when it is over the limit (the attempt must be refused), else None. Racing attempts
    each count, so no more than the limit pass in a window, however many run at once."""
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_SQL, [_key(kind, username, address), _window_seconds()])
        count, wait = cursor.fetchone()
        cursor.execute(_PRUNE_SQL)
    return int(wait) if count > _limit() else None


def clear_failures(*, kind: str, username: str, address: str) -> None:
    SigninFailure.objects.filter(key=_key(kind, username, address)).delete()


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
        if name:  # counted now, as a failure until the password proves right
            wait = take_attempt(kind="password", username=name, address=address)
        else:  # no username: nothing to guess, nothing counted
            wait = retry_after(kind="password", username=name, address=address)
        if wait is not None:
            if request is not None:
                setattr(request, RETRY_AFTER_ATTRIBUTE, wait)
            # PermissionDenied stops authenticate() from trying any later backend.
            raise PermissionDenied(throttled_message(wait))
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None:
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
    """Token authentication that refuses invalid tokens from an address after too many of them,
    and always accepts a valid one.

    A request that sends a token is checked in one statement: the token, its user and the
    address's failure count. A request without one (a signed-in browser) costs no query here.
    DRF makes an instance per request; ``authenticate_credentials`` called on its own (the MCP
    transports, with a key from their own configuration) is a plain lookup."""

    _address: str | None = None

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        self._address = address = client_address(request._request)
        try:
            return super().authenticate(request)
        except drf_exceptions.AuthenticationFailed:
            # A malformed header (refused before any lookup) or a key that matched nothing
            # (whose lookup found the address not throttled): throttled first, then counted.
            wait = retry_after(kind="token", username="", address=address)
            if wait is not None:
                raise SigninThrottled(wait) from None
            record_failure(kind="token", username="", address=address)
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        """DRF's lookup (the token and its user, refused if unknown or the user inactive) in
        one statement written once: every API request runs it, and the ORM spent ~0.4 ms of
        CPU compiling the query, several times what running it costs. Read on every request,
        never cached, so a deleted token stops working at once. Within a request, the same
        statement reads the address's failure count: a key that matched nothing from an address
        over the limit is :class:`SigninThrottled`; a key that matched is accepted whatever the
        count (refusing it would only lock its owner out with the guesser)."""
        # DRF keys are 40 hex characters; anything else is refused before the lookup, so a NUL
        # byte in a header never reaches PostgreSQL as a text parameter.
        if len(key) > 40 or "\x00" in key:
            raise drf_exceptions.AuthenticationFailed("Invalid token.")
        sql, token_fields, user_fields = _token_user_query()
        if self._address is None:
            row = fetch_dict(sql, [key])
        else:
            row = fetch_dict(
                f"SELECT ({_WAIT_SQL}) AS wait, tu.* FROM (SELECT 1) _one "  # noqa: S608
                f"LEFT JOIN ({sql}) tu ON true",
                [_key("token", "", self._address), _limit(), key],
            )
            assert row is not None  # one row always: the token's columns NULL without a match
            if row["t_key"] is None:
                if row["wait"] is not None:
                    raise SigninThrottled(row["wait"])
                row = None
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


class ThrottledBearerAuthentication(ThrottledTokenAuthentication):
    """The same API tokens sent as ``Authorization: Bearer <key>`` (what MCP clients and most
    HTTP libraries send), accepted by the REST API as by MCP."""

    keyword = "Bearer"
