"""Whether an LLM call may be sent under its world's budget.

Before every LLM call, what the call *could* spend — its prompt estimate plus its completion cap
(the source's ``max_tokens``) — is checked against what is left of each limit: the per-turn
limits against this attempt's calls so far, the total limits against every call the world has
made (failed attempts spent real tokens too). A call that could exceed a limit is not sent.

Fail closed: a source with no completion cap cannot be bounded, so under any budget its call is
refused; under a cost budget, so is a call with no price row. Never a truncated or empty reply.

The limits come from the worlds layer through the call context; nothing here imports it.

Calls running side by side (concurrent subjects) would each see the others' spend
only once they finish, so the check is a reservation: an attempt's :class:`BudgetLedger` counts
what its calls in flight could still spend (prompt estimate + cap, and its worst-case cost), and
the check and the reservation happen under one lock. A reservation is released only after the
call's finished row (with its real usage) is committed, so a call is never counted zero times —
at worst twice, for a moment, which can only refuse, never overspend.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID

from django.db.models import DecimalField, F, IntegerField, Q, Sum, Value
from django.db.models.functions import Coalesce

from cognition_app.costs import worst_case_cost
from cognition_app.models import LlmCall, ModelPrice

# Chat formats wrap each message in a few tokens of their own (role, separators).
TOKENS_PER_MESSAGE = 4


@dataclass(frozen=True)
class BudgetLimits:
    max_tokens_per_turn: int | None = None
    max_cost_per_turn: Decimal | None = None
    max_tokens_total: int | None = None
    max_cost_total: Decimal | None = None

    def is_empty(self) -> bool:
        return all(
            v is None
            for v in (
                self.max_tokens_per_turn,
                self.max_cost_per_turn,
                self.max_tokens_total,
                self.max_cost_total,
            )
        )


@dataclass(frozen=True)
class Spent:
    turn_tokens: int
    turn_cost: Decimal
    total_tokens: int
    total_cost: Decimal


def prompt_estimate(messages: Sequence[Mapping[str, Any]], response_format: Any = None) -> int:
    """An upper-leaning estimate of the prompt's tokens: characters / 4, rounded up, of every
    message and of the response format's schema (the model reads it too), plus a few tokens
    per message."""
    chars = sum(len(str(m.get("content", ""))) for m in messages)
    if response_format is not None:
        chars += len(json.dumps(response_format))
    return math.ceil(chars / 4) + TOKENS_PER_MESSAGE * len(messages)


def completion_cap(params: Mapping[str, Any]) -> int | None:
    """The most the call may generate, as the source says (``max_completion_tokens`` wins,
    like the OpenAI API); None when the source sets no cap."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def spent(*, world_id: int, attempt_id: UUID | None) -> Spent:
    """What the world's LLM calls have spent, in all (its judges' too) and in this attempt (one
    query); a call outside any attempt (``attempt_id`` None) has no turn of its own."""
    tokens = Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0)
    zero = Value(Decimal(0), output_field=DecimalField(max_digits=20, decimal_places=10))
    this_attempt = Q(invocation__attempt_id=attempt_id) if attempt_id is not None else Q(pk__in=[])
    row = LlmCall.objects.filter(invocation__world_id=world_id).aggregate(
        total_tokens=Coalesce(Sum(tokens, output_field=IntegerField()), 0),
        total_cost=Coalesce(Sum("cost"), zero),
        turn_tokens=Coalesce(Sum(tokens, filter=this_attempt, output_field=IntegerField()), 0),
        turn_cost=Coalesce(Sum("cost", filter=this_attempt), zero),
    )
    return Spent(
        turn_tokens=int(row["turn_tokens"]),
        turn_cost=Decimal(row["turn_cost"]),
        total_tokens=int(row["total_tokens"]),
        total_cost=Decimal(row["total_cost"]),
    )


@dataclass(frozen=True)
class Reservation:
    tokens: int = 0
    cost: Decimal = Decimal(0)
    in_ledger: bool = True  # counted in the attempt's own ledger (the world's limits)
    shared: bool = False  # reserved against a shared budget too
    id: UUID | None = None  # the shared reservation's id: its call's LlmCall id


class SharedBudget(Protocol):
    """A budget many worlds share, kept where every worker on every machine sees it (an
    experiment's, in PostgreSQL): a reservation is taken before the call and settled to the
    real spend once its finished row is written."""

    @property
    def has_cost_limit(self) -> bool: ...

    @property
    def name(self) -> str:
        """How a refusal names it: "experiment 'thirst'"."""

    def reserve(
        self, *, tokens: int, cost: Decimal, reservation_id: UUID, attempt_id: UUID | None
    ) -> str | None:
        """Reserve, or why not (the limit, what is spent and reserved, what is left);
        ``reservation_id`` becomes the call's id, ``attempt_id`` (none for a judge) tells the
        reaper whose it is if its worker dies."""

    def settle(self, *, reserved: Reservation, tokens: int, cost: Decimal) -> None:
        """Give back the reservation and count the call's real spend."""


@dataclass
class BudgetLedger:
    """One attempt's budget: its limits and what its LLM calls in flight could still spend;
    ``shared``, the budget its world shares with others (an experiment's), if any."""

    limits: BudgetLimits
    shared: SharedBudget | None = None
    _tokens: int = 0
    _cost: Decimal = Decimal(0)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reserve(
        self,
        *,
        world_id: int | None,
        attempt_id: UUID | None,
        prompt_tokens: int,
        max_completion: int | None,
        price: ModelPrice | None,
        price_key: str,
        call_id: UUID,
    ) -> Reservation | str:
        """The call's reservation, or why it may not be sent (naming the budget and figures):
        the world's limits first, then the shared budget. A call outside any world (a
        population's biography) has no world limits, only its shared budget. The shared
        reservation's id is its call's row's (``call_id``): the settle and the reaper find the
        call by it."""
        outcome: Reservation | str = Reservation(in_ledger=False)
        if not self.limits.is_empty() and world_id is not None:
            with self._lock:  # check and reserve as one step: concurrent calls cannot both pass
                outcome = budget_refusal(
                    limits=self.limits,
                    world_id=world_id,
                    attempt_id=attempt_id,
                    prompt_tokens=prompt_tokens,
                    max_completion=max_completion,
                    price=price,
                    price_key=price_key,
                    in_flight=Reservation(self._tokens, self._cost),
                )
                if isinstance(outcome, Reservation):
                    self._tokens += outcome.tokens
                    self._cost += outcome.cost
        if isinstance(outcome, str) or self.shared is None:
            return outcome
        shared = self.shared
        refusal = None
        if max_completion is None:
            refusal = (
                f"budget of {shared.name}: the source sets no max_tokens, so what this call "
                "could spend has no bound; it was not sent (give the source a max_tokens param)"
            )
        elif shared.has_cost_limit and price is None:
            refusal = (
                f"budget max_cost_total of {shared.name}: no price for {price_key}, so what "
                "this call could cost is unknown; it was not sent (add a model price)"
            )
        if refusal is None:
            assert max_completion is not None
            tokens = prompt_tokens + max_completion
            cost = (
                worst_case_cost(
                    price, prompt_tokens=prompt_tokens, completion_tokens=max_completion
                )
                if price is not None
                else Decimal(0)
            )
            refusal = shared.reserve(
                tokens=tokens, cost=cost, reservation_id=call_id, attempt_id=attempt_id
            )
            if refusal is None:
                return Reservation(
                    tokens, cost, in_ledger=outcome.in_ledger, shared=True, id=call_id
                )
            refusal += f" (prompt estimate {prompt_tokens} + max_tokens {max_completion})"
        self.release(outcome)
        return refusal

    def release(
        self, reservation: Reservation, *, tokens: int = 0, cost: Decimal | None = None
    ) -> None:
        """After the call's finished row is committed (its real usage now counts): the
        attempt's own reservation given back, the shared one settled to ``tokens`` and
        ``cost``, what the call really spent."""
        if reservation.in_ledger:
            with self._lock:
                self._tokens -= reservation.tokens
                self._cost -= reservation.cost
        if reservation.shared and self.shared is not None:
            self.shared.settle(reserved=reservation, tokens=tokens, cost=cost or Decimal(0))


def budget_refusal(
    *,
    limits: BudgetLimits,
    world_id: int,
    attempt_id: UUID | None,
    prompt_tokens: int,
    max_completion: int | None,
    price: ModelPrice | None,
    price_key: str,
    in_flight: Reservation | None = None,
) -> Reservation | str:
    """Why this call may not be sent, naming the budget and the figures; else what it could
    spend (its reservation). ``in_flight``: what the attempt's running calls could still spend."""
    if limits.is_empty():
        return Reservation()
    names = [
        name
        for name in (
            "max_tokens_per_turn",
            "max_cost_per_turn",
            "max_tokens_total",
            "max_cost_total",
        )
        if getattr(limits, name) is not None
    ]
    if max_completion is None:
        return (
            f"budget {', '.join(names)}: the source sets no max_tokens, so what this call could "
            "spend has no bound; it was not sent (give the source a max_tokens param)"
        )
    cost_limits = [n for n in names if n.startswith("max_cost")]
    if cost_limits and price is None:
        return (
            f"budget {', '.join(cost_limits)}: no price for {price_key}, so what this call could "
            "cost is unknown; it was not sent (add a model price)"
        )
    flying = in_flight or Reservation()
    done = spent(world_id=world_id, attempt_id=attempt_id)
    used = Spent(
        turn_tokens=done.turn_tokens + flying.tokens,
        turn_cost=done.turn_cost + flying.cost,
        total_tokens=done.total_tokens + flying.tokens,
        total_cost=done.total_cost + flying.cost,
    )
    could_tokens = prompt_tokens + max_completion
    could_cost = (
        worst_case_cost(price, prompt_tokens=prompt_tokens, completion_tokens=max_completion)
        if price is not None
        else Decimal(0)
    )
    figures = f"prompt estimate {prompt_tokens} + max_tokens {max_completion}"
    if flying.tokens:
        figures += f"; calls in flight could spend {_fmt(flying.tokens)} tokens"
    checks: list[tuple[str, Any, Any, Any, str]] = []
    if limits.max_tokens_per_turn is not None:
        checks.append(
            (
                "max_tokens_per_turn",
                limits.max_tokens_per_turn,
                used.turn_tokens,
                could_tokens,
                "this turn's attempt",
            )
        )
    if limits.max_tokens_total is not None:
        checks.append(
            (
                "max_tokens_total",
                limits.max_tokens_total,
                used.total_tokens,
                could_tokens,
                "the world",
            )
        )
    if cost_limits and price is not None:
        if limits.max_cost_per_turn is not None:
            checks.append(
                (
                    "max_cost_per_turn",
                    limits.max_cost_per_turn,
                    used.turn_cost,
                    could_cost,
                    "this turn's attempt",
                )
            )
        if limits.max_cost_total is not None:
            checks.append(
                ("max_cost_total", limits.max_cost_total, used.total_cost, could_cost, "the world")
            )
    for name, limit, so_far, could, whose in checks:
        if so_far + could > limit:
            unit = "tokens" if name.startswith("max_tokens") else "in cost"
            return (
                f"budget {name} = {_fmt(limit)}: {whose} has spent {_fmt(so_far)} {unit}, "
                f"{_fmt(max(limit - so_far, 0))} left; this call could spend {_fmt(could)} "
                f"({figures}); it was not sent"
            )
    return Reservation(could_tokens, could_cost)


def _fmt(value: int | Decimal) -> str:
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value else "0"
    return str(value)
