"""What a limit is to the admission of a request (``cognition_app.sources.admission``): the
request it is asked about, and the three answers it may give — taken (:class:`Held`), not yet
(:class:`Wait`), never (:class:`Refused`) — plus the one wait loop every limit waits in and the
record of the waits that the call's trace keeps."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cognition_app.budgets import Reservation
from cognition_app.failures import SourceFailure
from cognition_app.models import ModelPrice
from cognition_app.sources.context import INTERACTIVE, CallContext

# How often a request waiting for capacity tries again (and looks at its attempt's cancel flag)
# when the limit cannot say when capacity returns; the longest it sleeps when it can.
WAIT_STEP_SECONDS = 0.05
MAX_STEP_SECONDS = 1.0
# How long a request waiting for a limit that announces freed capacity (``Wait.wake``) blocks
# on that announcement before it asks again anyway (and looks at its attempt's cancel flag).
WAKE_STEP_SECONDS = 0.2
# A wait is told to the call's attempt (``CallContext.on_wait``: the attempt's row, what its
# page shows) once it has lasted this long: a shorter one is over before a page could show it,
# and telling it would cost the attempt two writes while the call waits and then holds its slot.
TELL_AFTER_SECONDS = 0.2


@dataclass(frozen=True)
class CallRequest:
    """One request about to be sent (one try of a call): what every limit is asked about."""

    source_hash: str
    interface: Mapping[str, Any]
    ctx: CallContext
    what: str  # how a cancel names the call
    prompt_tokens: int  # the prompt estimate
    max_completion: int | None  # the source's max_tokens, if any
    price: ModelPrice | None  # the price in force, read with the rows' opening
    # the id of the call's rows, opened before its limits: the budget's reservation takes it
    call_id: uuid.UUID
    # names this request while it waits (a lane's registration, a slot's holder)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def interactive(self) -> bool:
        """Whether the request is an interactive turn's (served first at every limit)."""
        return self.ctx.lane == INTERACTIVE

    @property
    def who(self) -> str:
        """Who the request is for, as a request waiting for its slot names it."""
        return self.ctx.who or f"world {self.ctx.world_slug}'s turn {self.ctx.attempted_turn}"

    @property
    def limits(self) -> Mapping[str, int]:
        """The source's ``limits`` (docs/workflows.md, "Limits"); empty when it sets none."""
        return self.interface.get("limits") or {}

    @property
    def could_spend(self) -> int:
        """What the request could spend in tokens: prompt estimate + max_tokens."""
        return self.prompt_tokens + (self.max_completion or 0)


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Held:
    """Capacity taken for one request: ``give_back`` when the try ends (a rate window's entry
    stays: it counts the request sent); ``reservation``, the budget's, settled by whoever writes
    the finished rows."""

    give_back: Callable[[], None] = _nothing
    reservation: Reservation | None = None


@dataclass(frozen=True)
class Wait:
    """Not now: ``limit`` binds (as the trace names it); capacity may return in ``retry_in``
    seconds (None: unknown, try again after a step; 0: the limit already waited, try at once);
    ``reason``, what the request waits for in words (a slot and who holds it, an interactive
    turn served first), shown on the waiting attempt. A wait that must end (Redis unavailable)
    says with what the try fails once it has lasted ``give_up_after`` seconds. A limit that
    announces capacity given back (``wake``) lets the request block until then (at most the
    seconds it is given) instead of asking again after a fixed step."""

    limit: str
    retry_in: float | None = None
    reason: str = ""
    # what the try fails with once it has waited on ``limit`` for ``give_up_after`` seconds
    # in all (None: it waits as long as the limit binds)
    give_up: SourceFailure | None = None
    give_up_after: float = 0.0
    # blocks until the limit announces capacity given back, or for at most the given seconds
    wake: Callable[[float], None] | None = field(default=None, compare=False)

    def said(self) -> str:
        return self.reason or f"capacity: the {self.limit} limit"


@dataclass(frozen=True)
class Refused:
    """Never, for this request: it is not sent, and its try fails with ``failure``."""

    failure: SourceFailure


class Limit(Protocol):
    """One kind of capacity a request needs before it is sent."""

    name: str  # the limit's own name (docs, errors); its waits name what binds

    def take(self, request: CallRequest) -> Held | Wait | Refused:
        """Take capacity for this request without waiting (a limit that does not apply to the
        request answers ``Held()``)."""


@dataclass
class LimitWaits:
    """How long one request waited for capacity, limit by limit; the trace records the total
    and the limit it waited on longest."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, limit: str, seconds: float) -> None:
        self.seconds[limit] = self.seconds.get(limit, 0.0) + seconds

    @property
    def waited_ms(self) -> int | None:
        return round(sum(self.seconds.values()) * 1000) if self.seconds else None

    @property
    def limit(self) -> str:
        return max(self.seconds, key=lambda name: self.seconds[name]) if self.seconds else ""


def take_waiting(limit: Limit, request: CallRequest, waits: LimitWaits) -> Held | Refused:
    """The one wait loop: ask ``limit`` until it holds or refuses, sleeping a step (or until
    it says capacity returns) between asks, each wait added to ``waits`` under the name of what
    bound, and what it waits for told to the call's ``on_wait`` as it changes once the wait
    has lasted ``TELL_AFTER_SECONDS`` (then "" once held). A stop of the attempt ends the wait
    at once; a wait that gives up (``Wait.give_up``) refuses once it has lasted long enough. A
    limit that announces freed capacity (``Wait.wake``) is asked again as soon as it does."""
    cancel = request.ctx.cancel
    told = ""
    tell_at: float | None = None  # when a wait not yet told is told
    while True:
        before = time.monotonic()
        outcome = limit.take(request)
        if not isinstance(outcome, Wait):
            if told:
                _tell(request, "")
            return outcome
        if outcome.give_up is not None and (
            waits.seconds.get(outcome.limit, 0.0) >= outcome.give_up_after
        ):
            if told:
                _tell(request, "")
            return Refused(outcome.give_up)
        said = outcome.said()
        now = time.monotonic()
        if tell_at is None:
            tell_at = before + TELL_AFTER_SECONDS
        if said != told and (told or now >= tell_at):
            _tell(request, said)
            told = said
        # not told yet: asked again in time to tell it
        until_told = MAX_STEP_SECONDS if told else max(tell_at - now, 0.001)
        if outcome.wake is not None and outcome.retry_in is None:
            # woken as soon as a slot is given back
            outcome.wake(min(WAKE_STEP_SECONDS, until_told))
            if cancel is not None:
                cancel.check(request.what)
            waits.add(outcome.limit, time.monotonic() - before)
            continue
        if outcome.retry_in is None:
            step = WAIT_STEP_SECONDS
        elif outcome.retry_in <= 0:
            step = 0.0  # the limit waited itself
        else:
            step = min(max(outcome.retry_in, WAIT_STEP_SECONDS), MAX_STEP_SECONDS, until_told)
        if cancel is not None:
            if step == 0 or cancel.wait(step):
                cancel.check(request.what)
        elif step:
            time.sleep(step)
        waits.add(outcome.limit, time.monotonic() - before)


def _tell(request: CallRequest, waiting_for: str) -> None:
    if request.ctx.on_wait is not None:
        request.ctx.on_wait(waiting_for)
