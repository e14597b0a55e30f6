"""A world's budget: checked, set at creation, changed later with its history kept."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, TypedDict

from django.db import transaction

from chukwa_core.component_validation import type_name
from chukwa_core.errors import NotFoundError, invalid
from worlds_app.models import World, WorldBudget
from worlds_app.selectors import require_slug

TOKEN_LIMITS = ("max_tokens_per_turn", "max_tokens_total")
COST_LIMITS = ("max_cost_per_turn", "max_cost_total")
BUDGET_FIELDS = (*TOKEN_LIMITS, *COST_LIMITS)
MAX_TOKENS_LIMIT = 2**62
# The column holds 10 integer digits and 10 decimals.
MAX_COST_LIMIT = Decimal("9999999999")


class BudgetInput(TypedDict, total=False):
    """Any of the four limits; null or absent is no limit. Costs are decimal strings (or
    numbers) in the price table's currency; tokens are integers."""

    max_tokens_per_turn: int | None
    max_cost_per_turn: str | Decimal | None
    max_tokens_total: int | None
    max_cost_total: str | Decimal | None


def parse_budget(value: Any, field: str = "budget") -> dict[str, Any]:
    """The four limits, checked: positive integers for tokens, positive decimals for costs."""
    if not isinstance(value, dict):
        raise invalid("invalid_budget", field, f"must be an object, got {type_name(value)}")
    unknown = sorted(k for k in value if k not in BUDGET_FIELDS)
    if unknown:
        raise invalid(
            "invalid_budget",
            f"{field}.{unknown[0]}",
            f"unknown limit; the limits are {', '.join(BUDGET_FIELDS)}",
        )
    limits: dict[str, Any] = dict.fromkeys(BUDGET_FIELDS)
    for name in TOKEN_LIMITS:
        raw = value.get(name)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw <= MAX_TOKENS_LIMIT:
            raise invalid(
                "invalid_budget", f"{field}.{name}", f"must be a positive integer, got {raw!r}"
            )
        limits[name] = raw
    for name in COST_LIMITS:
        raw = value.get(name)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | int | float | Decimal):
            raise invalid(
                "invalid_budget",
                f"{field}.{name}",
                f"must be a decimal string, got {type_name(raw)}",
            )
        try:
            # str() first: 0.1 as a float becomes "0.1", not its binary expansion
            amount = Decimal(str(raw))
        except InvalidOperation:
            raise invalid(
                "invalid_budget", f"{field}.{name}", f"must be a decimal number, got {raw!r}"
            ) from None
        if not amount.is_finite() or not 0 < amount <= MAX_COST_LIMIT:
            raise invalid(
                "invalid_budget",
                f"{field}.{name}",
                f"must be a positive amount ≤ {MAX_COST_LIMIT}, got {raw!r}",
            )
        if amount != amount.quantize(Decimal("1e-10")):
            raise invalid(
                "invalid_budget", f"{field}.{name}", f"has more than 10 decimals: {raw!r}"
            )
        limits[name] = amount
    return limits


def world_budget_record(*, world: World, limits: dict[str, Any], set_by: str) -> WorldBudget:
    """A new budget row in force from now (inside the caller's transaction)."""
    return WorldBudget.objects.create(world=world, set_by=set_by, **limits)


def world_budget_set(*, slug: str, budget: Any, set_by: str = "") -> WorldBudget:
    """Replace the world's budget (limits not given are lifted); the previous rows stay as
    history. It takes effect from the world's next attempt (a running one keeps the budget it
    started with)."""
    require_slug(slug)
    limits = parse_budget(budget)
    with transaction.atomic(durable=True):
        world = World.objects.select_for_update().filter(slug=slug).first()
        if world is None:
            raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
        return world_budget_record(world=world, limits=limits, set_by=set_by)
