"""An LLM source's ``limits`` (docs/workflows.md, "Limits"): the provider's limits, enforced
across every worker process on every machine through Redis, so that adding machines adds
throughput until the model's limits bind and never past them.

- ``concurrency``: at most that many of the source's requests in flight (a try waiting to be
  tried again holds none). Each holds a
  **lease** in a sorted set (score: when it expires). A process renews the leases it holds
  every third of a lease; a process that dies stops renewing, and its slots come back when
  their leases run out (``CHUKWA_LIMIT_LEASE_SECONDS``, 15 s): a killed worker cannot leak
  capacity.
- ``requests_per_minute``: a sliding window of the last minute's requests sent, every try of a
  call counted.
- ``tokens_per_minute``: a sliding window of the last minute's tokens, each request counted at its
  prompt estimate plus its ``max_tokens`` (what it could spend; counted before it is sent).
- **The endpoint's own word**: a 429 with ``Retry-After``, or ``x-ratelimit-remaining-*: 0``
  with its ``x-ratelimit-reset-*``, pauses every worker's calls to the source for that long.

Checking and taking capacity is one Lua script, atomic in Redis: two workers cannot both take
the last slot. The script answers which of the limits binds (``concurrency``,
``requests_per_minute``, ``tokens_per_minute``, or ``rate_limited`` while the endpoint's pause
lasts) and when it may free up; admission (``cognition_app.sources.admission``) waits and records
the wait like any other limit's. Redis unavailable, a call is not sent unchecked: it waits for
Redis (as the limit ``redis``) for ``CHUKWA_REDIS_WAIT_SECONDS``, then its try fails.

A slot given back is announced: a call waiting for a concurrency slot registers itself while it
waits and blocks on a Redis list (``BLPOP``); giving a slot back pushes one wake-up there when
someone waits (an interactive call's list first), so the first waiter asks again at once
instead of at its next step. Redis wakes its blocked clients first come, first served. A wait
still asks again every ``WAKE_STEP_SECONDS`` (a killed worker's slot comes back by its lease
running out, which nobody announces).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from cognition_app.failures import SourceFailure
from cognition_app.sources.admission.base import (
    WAIT_STEP_SECONDS,
    CallRequest,
    Held,
    Refused,
    Wait,
)
from cognition_app.sources.admission.leases import (
    LEASES,
    REDIS_RETRY_SECONDS,
    client,
    lease_seconds,
    redis_key,
    redis_wait_seconds,
    script,
)
from cognition_app.sources.admission.priority import WAITING_MS, held_by

logger = logging.getLogger(__name__)

# KEYS: concurrency, requests, tokens, pause, interactive waiting, holders, others waiting for
# a slot (``_wake_keys``). ARGV: token,
# lease_ms, concurrency, requests_per_minute, tokens_per_minute, tokens, window_ms, interactive
# (1/0), who, waiting_ms. Returns {1, "", 0, ""} when taken, else {0, <the limit that binds>,
# <ms until it may free up, 0 if unknown>, <who holds the concurrency slots>}. The time is
# Redis's own (``TIME``), never a worker's: a worker whose clock is off cannot stretch or cut a
# window or a lease. An interactive call that must wait registers itself (``priority``); a call
# of another lane waits while one is registered, and registers itself among the others waiting
# when it waits for a slot (what ``_RELEASE`` counts to announce a slot given back).
_ACQUIRE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local conc, rpm, tpm, tokens = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6])
local window = tonumber(ARGV[7])
local interactive = ARGV[8] == '1'
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local function wait(limit, ms, holders)
  if interactive then
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[10]), ARGV[1])
    redis.call('PEXPIRE', KEYS[5], 60000)
  end
  return {0, limit, ms, holders or ''}
end
if not interactive and redis.call('ZCARD', KEYS[5]) > 0 then
  return {0, 'interactive_first', 0, ''}
end
local paused = redis.call('PTTL', KEYS[4])
if paused > 0 then return wait('rate_limited', paused) end
if conc > 0 then
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #gone do redis.call('HDEL', KEYS[6], gone[i]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= conc then
    local holding = redis.call('ZRANGE', KEYS[1], 0, -1)
    local names = {}
    for i = 1, #holding do
      local name = redis.call('HGET', KEYS[6], holding[i])
      if name then names[#names + 1] = name end
    end
    if not interactive then
      redis.call('ZADD', KEYS[7], now + tonumber(ARGV[10]), ARGV[1])
      redis.call('PEXPIRE', KEYS[7], 60000)
    end
    return wait('concurrency', 0, table.concat(names, '; '))
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return wait('requests_per_minute', tonumber(oldest[2]) + window - now)
  end
end
if tpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
  local entries = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do
    used = used + tonumber(string.match(entries[i], ':(%d+)$'))
  end
  if used + tokens > tpm then
    local freed = used
    for i = 1, #entries, 2 do
      freed = freed - tonumber(string.match(entries[i], ':(%d+)$'))
      if freed + tokens <= tpm then
        return wait('tokens_per_minute', tonumber(entries[i + 1]) + window - now)
      end
    end
    return wait('tokens_per_minute', 0)
  end
end
if interactive then redis.call('ZREM', KEYS[5], ARGV[1]) else redis.call('ZREM', KEYS[7], ARGV[1]) end
if conc > 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], 3600000)
  redis.call('HSET', KEYS[6], ARGV[1], ARGV[9])
  redis.call('PEXPIRE', KEYS[6], 3600000)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[2], 2 * window)
end
if tpm > 0 then
  redis.call('ZADD', KEYS[3], now, ARGV[1] .. ':' .. ARGV[6])
  redis.call('PEXPIRE', KEYS[3], 2 * window)
end
return {1, '', 0, ''}
"""

# KEYS: concurrency, holders, interactive waiting, interactive wake-ups, others waiting, their
# wake-ups. ARGV: token, waiting_ms. The slot and its holder's name go; if a call waits for a
# slot (an interactive one first), one wake-up is pushed for it, never more wake-ups queued than
# calls waiting (a waiter that took a slot without being woken leaves at most one behind).
_RELEASE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local function announce(waiting, woken)
  redis.call('ZREMRANGEBYSCORE', waiting, '-inf', now)
  local count = redis.call('ZCARD', waiting)
  if count == 0 then return false end
  if redis.call('LLEN', woken) < count then
    redis.call('RPUSH', woken, '1')
    redis.call('PEXPIRE', woken, tonumber(ARGV[2]))
  end
  return true
end
if not announce(KEYS[3], KEYS[4]) then announce(KEYS[5], KEYS[6]) end
return 1
"""

# What a wait on each limit is, in words (the waiting attempt shows it).
_WAITING_FOR = {
    "interactive_first": "the source's limits: an interactive turn's call, served first",
    "rate_limited": "the source's rate limit: the endpoint asked to pause",
    "concurrency": "the source's concurrency slots",
    "requests_per_minute": "the source's requests_per_minute window",
    "tokens_per_minute": "the source's tokens_per_minute window",
}


def _keys(source_hash: str) -> list[str]:
    names = ("concurrency", "requests", "tokens", "pause", "interactive", "holders")
    return [redis_key("limits", source_hash, name) for name in names]


def _wake_keys(source_hash: str) -> list[str]:
    """The keys of a slot's announcement: the calls of other lanes waiting for a slot, and the
    wake-up lists of interactive calls and of the others."""
    names = ("waiting", "woken:interactive", "woken")
    return [redis_key("limits", source_hash, name) for name in names]


class ClusterLimits:
    name = "limits"

    def take(self, request: CallRequest) -> Held | Wait | Refused:
        return take_capacity(
            request.source_hash,
            request.limits,
            request.could_spend,
            token=request.token,
            who=request.who,
            interactive=request.interactive,
        )


LIMIT = ClusterLimits()


def take_capacity(
    source_hash: str,
    limits: Mapping[str, int],
    tokens: int,
    *,
    token: str | None = None,
    who: str = "",
    interactive: bool = True,
) -> Held | Wait | Refused:
    """Take capacity for one request under ``limits`` (none: nothing to take), or name the limit
    that binds, when it may free up and what the request waits for. A concurrency slot is held
    until given back (its lease renewed meanwhile); a window's entry stays: the request was
    sent. ``token`` names the request across its tries (an interactive one's registration)."""
    if not limits:
        return Held()
    tpm = int(limits.get("tokens_per_minute", 0))
    if tpm and tokens > tpm:
        return Refused(
            SourceFailure(
                "config",
                f"limits.tokens_per_minute = {tpm}: this call could spend {tokens} tokens (prompt "
                "estimate + max_tokens), more than a minute allows; it was not sent",
            )
        )
    keys = _keys(source_hash)
    waiting, woken_interactive, woken = _wake_keys(source_hash)
    token = token or uuid.uuid4().hex
    conc = int(limits.get("concurrency", 0))
    args = [
        token,
        int(lease_seconds() * 1000),
        conc,
        int(limits.get("requests_per_minute", 0)),
        tpm,
        tokens,
        int(settings.CHUKWA_LIMIT_WINDOW_SECONDS * 1000),
        int(interactive),
        who,
        WAITING_MS,
    ]
    try:
        taken, limit, retry_ms, holders = script(client(), _ACQUIRE)(
            keys=[*keys, waiting], args=args
        )
    except (RedisError, OSError) as exc:
        # Fail closed: unchecked, the call is not sent. It waits for Redis to come back (a
        # restart, a failover) for CHUKWA_REDIS_WAIT_SECONDS, then its try fails.
        wait = redis_wait_seconds()
        return Wait(
            "redis",
            retry_in=REDIS_RETRY_SECONDS,
            reason="Redis, to check the source's limits (unavailable)",
            give_up=SourceFailure(
                "transport",
                f"the source's limits could not be checked (Redis unavailable for {wait:g} s: "
                f"{type(exc).__name__}); it was not sent",
            ),
            give_up_after=wait,
        )
    if int(taken) != 1:
        limit = limit.decode() if isinstance(limit, bytes) else str(limit)
        holders = holders.decode() if isinstance(holders, bytes) else str(holders)
        reason = _WAITING_FOR.get(limit, limit)
        wake = None
        if limit == "concurrency":
            reason = f"{reason}: {held_by(holders.split('; '))}"
            wake = partial(_await_slot, woken_interactive if interactive else woken)
        return Wait(
            "concurrency" if limit == "interactive_first" else limit,
            retry_in=int(retry_ms) / 1000 if int(retry_ms) > 0 else None,
            reason=reason,
            wake=wake,
        )
    if not conc:
        return Held()
    LEASES.hold(token, partial(_renew_slot, keys[0], token))
    release = [keys[0], keys[5], keys[4], woken_interactive, waiting, woken]
    return Held(give_back=partial(_give_back, release, token))


def _renew_slot(key: str, token: str, pipe: Any, now_ms: int, lease: int) -> object:
    return pipe.zadd(key, {token: now_ms + lease}, xx=True)


def _give_back(keys: list[str], token: str) -> None:
    LEASES.drop(token)
    try:  # one round trip: the slot, its holder's name, and a waiter woken
        script(client(), _RELEASE)(keys=keys, args=[token, WAITING_MS])
    except (RedisError, OSError) as exc:  # the lease runs out by itself
        logger.warning("limit slot not given back, Redis unavailable (%s)", exc)


# When this process last logged that a wake-up could not be waited for (at most once a minute).
_wake_warned_at: float | None = None
WAKE_WARN_EVERY_SECONDS = 60.0


def _await_slot(woken: str, seconds: float) -> None:
    """Block until a slot given back is announced on ``woken``, or ``seconds`` pass. If Redis
    refuses the wait, the call asks again after a step (logged: the waits then poll), and an
    unavailable Redis is reported by that next ask and waited for like any."""
    global _wake_warned_at
    try:
        client().blpop([woken], timeout=seconds)
    except (RedisError, OSError) as exc:
        now = time.monotonic()
        if _wake_warned_at is None or now - _wake_warned_at >= WAKE_WARN_EVERY_SECONDS:
            _wake_warned_at = now
            logger.warning(
                "a freed slot's wake-up could not be waited for (%s: %s); waiting calls ask "
                "again every %g s",
                type(exc).__name__,
                exc,
                WAIT_STEP_SECONDS,
            )
        time.sleep(WAIT_STEP_SECONDS)


_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
    r"(?:(\d+(?:\.\d+)?)ms)?$"
)


def reset_seconds(value: str | None) -> float | None:
    """An ``x-ratelimit-reset-*`` value (``1s``, ``6m0s``, ``20ms``, or plain seconds)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    match = _DURATION.match(value)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


# KEYS: pause. ARGV: ms. A pause only grows: set only when none is longer (one script, so two
# workers pausing at once cannot both read "none" and the shorter write last).
_PAUSE = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
  return 1
end
return 0
"""


def pause_for(source_hash: str, seconds: float) -> None:
    """Hold every worker's calls to the source for ``seconds`` (the endpoint asked so); a pause
    already longer is kept (a shorter one never cuts it)."""
    millis = int(min(seconds, 60.0) * 1000)
    if millis <= 0:
        return
    try:
        script(client(), _PAUSE)(keys=[_keys(source_hash)[3]], args=[millis])
    except (RedisError, OSError) as exc:  # the endpoint's own 429s still slow us down
        logger.warning("source %s not paused, Redis unavailable (%s)", source_hash[:12], exc)


def note_rate_headers(source_hash: str, status: int, headers: Mapping[str, str]) -> float | None:
    """After an answer of a source with ``limits``: a 429's ``Retry-After``, or a remaining
    count of 0 with its reset time, pauses the source cluster-wide. Returns the pause."""
    from cognition_app.sources.retry import retry_after_seconds

    lowered = {k.lower(): v for k, v in headers.items()}
    pause = None
    if status == 429:
        pause = retry_after_seconds(lowered.get("retry-after")) or 1.0
    for kind in ("requests", "tokens"):
        if lowered.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0":
            reset = reset_seconds(lowered.get(f"x-ratelimit-reset-{kind}"))
            if reset is not None:
                pause = max(pause or 0.0, reset)
    if pause:
        pause_for(source_hash, pause)
    return pause
