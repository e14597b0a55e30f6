"""Call admission: every limit a request must pass before it is sent, checked for each request
sent — each try of a call, inside the retry loop — in one fixed order, each wait waited in one
loop and recorded the same way on the try's rows (``limit_wait_ms``: how long in all;
``limit_wait``: the limit it waited on longest).

The order (:data:`LIMITS`), cheapest and most local first, the budget last:

1. ``process``: the source's ``limits.concurrency`` within this worker process (in memory);
2. ``cluster``: the source's ``limits`` over every worker (Redis): ``concurrency`` leases,
   ``requests_per_minute`` and ``tokens_per_minute`` windows, the endpoint's ``rate_limited``
   pause;
3. ``endpoint``: the deployment's ``CHUKWA_<X>_MAX_CONCURRENCY`` (PostgreSQL advisory locks);
4. ``budget``: the world's and its experiment's budgets, reserved (never waits: fits or is
   refused).

Capacity is taken for one request and given back when its try ends: a call waiting to be tried
again (its backoff, a 429's ``Retry-After``) holds no slot, and a rate window counts every
request sent, retries included. A request waits before its rows open and before its
``timeout_ms`` starts, so a deadline covers the exchange only. A refusal (a budget that does not
fit, a limit misconfigured) gives back what was taken and fails the try, traced like any other.

Adding a limit: a module in this package with a class whose ``take`` answers
:class:`~cognition_app.sources.admission.base.Held`, ``Wait`` or ``Refused`` (``base.Limit``),
and one entry in :data:`LIMITS` at its place in the order. Nothing else branches on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cognition_app.budgets import Reservation
from cognition_app.failures import SourceFailure
from cognition_app.sources.admission import budget, cluster, endpoint, process
from cognition_app.sources.admission.base import (
    CallRequest,
    Held,
    Limit,
    LimitWaits,
    Refused,
    take_waiting,
)

__all__ = ["LIMITS", "Admission", "CallRequest", "admitted"]

# The registry, in the order a request passes the limits.
LIMITS: tuple[Limit, ...] = (process.LIMIT, cluster.LIMIT, endpoint.LIMIT, budget.LIMIT)


@dataclass(frozen=True)
class Admission:
    """What admitting one request came to: its waits, and either the capacity it holds (with
    the budget's reservation) or why it may not be sent."""

    waits: LimitWaits
    refusal: SourceFailure | None
    reservation: Reservation
    # the capacity held, last taken last: given back once (``give_back``)
    held: list[Held] = dataclasses.field(default_factory=list)

    def give_back(self) -> None:
        """Give back the capacity held, last taken first; at most once. The try gives it back
        as soon as its exchange with the endpoint is over (its reply read): judging the reply
        and writing its rows need no slot. Whatever it has not given back goes when the try
        ends."""
        while self.held:
            self.held.pop().give_back()


@contextmanager
def admitted(request: CallRequest) -> Iterator[Admission]:
    """Pass every limit in order, waiting as each asks, and hold what was taken while the
    request's try runs; given back, last first, when it ends (or when a limit refuses) unless
    the try gave it back before (``Admission.give_back``)."""
    waits = LimitWaits()
    admission = Admission(waits, None, Reservation(in_ledger=False))
    try:
        for limit in LIMITS:
            outcome = take_waiting(limit, request, waits)
            if isinstance(outcome, Refused):
                # not sent: nothing to settle later, and no slot held while it is traced
                admission.give_back()
                admission = dataclasses.replace(admission, refusal=outcome.failure)
                break
            admission.held.append(outcome)
            if outcome.reservation is not None:
                admission = dataclasses.replace(admission, reservation=outcome.reservation)
        yield admission
    finally:
        admission.give_back()
