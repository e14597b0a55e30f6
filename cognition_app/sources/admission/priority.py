"""Interactive first at every limit (docs/operations.md, "Interactive first"): a call of an
interactive turn (``CallContext.lane``) that waits for a limit is served before queued calls of
experiments' worlds and of judges waiting for the same limit. While one waits, the others do not
take that limit's capacity even when it is free: they wait, saying so, until it has taken it.

- Within a process (``process.py``): the slots' own condition counts the interactive calls
  waiting for them.
- Across processes (``cluster.py``, ``endpoint.py``): an interactive call waiting registers its
  token in a Redis sorted set of the limit, scored by when the registration lapses (Redis's
  clock, :data:`WAITING_MS` ahead, renewed at every try), and removes it once it holds its
  capacity; a call of another lane that finds a live registration waits. A waiting call that
  dies lapses within :data:`WAITING_MS`.

What a waiting call waits for, and who holds the slot it waits for, is told to its attempt as it
waits (``CallContext.on_wait``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from redis.exceptions import RedisError

from cognition_app.sources.admission.leases import script

logger = logging.getLogger(__name__)

WAITING_MS = 3000
INTERACTIVE_FIRST = "an interactive turn's call, served first"

# KEYS: the limit's waiting set. ARGV: token, interactive (1/0), waiting (1: register, 0: remove).
# Returns 1 when a call of another lane must wait (a live interactive registration), else 0.
_LANE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[2] == '1' then
  if ARGV[3] == '1' then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
    redis.call('PEXPIRE', KEYS[1], 60000)
  else
    redis.call('ZREM', KEYS[1], ARGV[1])
  end
  return 0
end
if redis.call('ZCARD', KEYS[1]) > 0 then return 1 end
return 0
"""


def lane_gate(client: Any, key: str, token: str, interactive: bool, waiting: bool) -> bool:
    """For an interactive call: register it as waiting (``waiting``) or remove it; False. For
    another: whether an interactive call waits for the limit (it must then wait too). Redis
    unavailable: no order is kept (logged), the limit itself still holds."""
    try:
        answer = script(client, _LANE)(
            keys=[key], args=[token, int(interactive), int(waiting), WAITING_MS]
        )
    except (RedisError, OSError) as exc:
        logger.warning("interactive-first order not kept, Redis unavailable (%s)", exc)
        return False
    return bool(int(answer))


class Slots:
    """``n`` slots of one process, taken interactive first: while an interactive call waits,
    a call of another lane does not take a freed slot. Each held slot names its holder."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._interactive_waiting = 0
        self._cond = threading.Condition()
        self.holders: dict[str, str] = {}

    def take(self, token: str, who: str, interactive: bool, timeout: float) -> bool:
        with self._cond:
            if interactive:
                self._interactive_waiting += 1
            try:
                taken = self._cond.wait_for(
                    lambda: self._free > 0 and (interactive or not self._interactive_waiting),
                    timeout,
                )
                if taken:
                    self._free -= 1
                    self.holders[token] = who
                return taken
            finally:
                if interactive:
                    self._interactive_waiting -= 1

    def give_back(self, token: str) -> None:
        with self._cond:
            self._free += 1
            self.holders.pop(token, None)
            self._cond.notify_all()

    def waiting_for(self, interactive: bool) -> str:
        """Why a call was not given a slot: the holders, or an interactive call first."""
        with self._cond:
            if self._free > 0 and not interactive and self._interactive_waiting:
                return INTERACTIVE_FIRST
            return held_by(list(self.holders.values()))


def held_by(holders: list[str]) -> str:
    named = "; ".join(sorted(set(h for h in holders if h)))
    return f"held by {named}" if named else "held by another call"
