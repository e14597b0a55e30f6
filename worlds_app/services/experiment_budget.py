"""An experiment's budget (docs/experiments.md, "Estimate and budget"): one total over all its
worlds and judges, kept on the experiment's row so that every worker on every machine sees the
same ledger.

Before each LLM call of any of its worlds, what the call could spend (prompt estimate plus its
``max_tokens``, and the worst case of that in cost) is **reserved** by one ``UPDATE`` that adds
it only if spent + reserved + this call still fits every limit: PostgreSQL's row lock makes
concurrent reservations queue, so no two calls can both take the last of it. When the call's
finished row is written, the reservation is **settled**: given back, and the call's real spend
counted. A call that does not fit is not sent (``budget_exhausted`` naming the experiment's
budget), and the experiment stops: its queued turns are cancelled with that reason, and it
ends ``failed``.

A worker killed between reserving and settling leaves its reservation held: the experiment
counts it as spent at its worst case, which can only refuse early, never overshoot.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from cognition_app.budgets import BudgetLedger, BudgetLimits, Reservation
from worlds_app.models import Experiment
from worlds_app.services.cancelling import cancel_queued


@dataclass(frozen=True)
class ExperimentBudget:
    experiment_id: int
    slug: str
    max_tokens_total: int | None
    max_cost_total: Decimal | None

    @property
    def has_cost_limit(self) -> bool:
        return self.max_cost_total is not None

    @property
    def name(self) -> str:
        return f"experiment {self.slug!r}"

    def reserve(self, *, tokens: int, cost: Decimal) -> str | None:
        table = connection.ops.quote_name(Experiment._meta.db_table)
        with connection.cursor() as cursor:
            # one statement: checked and reserved under the row's lock, committed at once
            cursor.execute(
                f"UPDATE {table} SET reserved_tokens = reserved_tokens + %s, "  # noqa: S608
                "reserved_cost = reserved_cost + %s "
                "WHERE id = %s AND budget_exhausted_at IS NULL "
                "AND (max_tokens_total IS NULL "
                "OR spent_tokens + reserved_tokens + %s <= max_tokens_total) "
                "AND (max_cost_total IS NULL OR spent_cost + reserved_cost + %s <= max_cost_total) "
                "RETURNING id",
                [tokens, cost, self.experiment_id, tokens, cost],
            )
            if cursor.fetchone() is not None:
                return None
        return self._refused(tokens, cost)

    def _refused(self, tokens: int, cost: Decimal) -> str:
        row = Experiment.objects.get(pk=self.experiment_id)
        if self.max_tokens_total is not None and (
            row.spent_tokens + row.reserved_tokens + tokens > self.max_tokens_total
        ):
            left = max(self.max_tokens_total - row.spent_tokens - row.reserved_tokens, 0)
            message = (
                f"budget max_tokens_total = {self.max_tokens_total} of {self.name}: its worlds "
                f"and judges have spent {row.spent_tokens} tokens and calls in flight could "
                f"spend {row.reserved_tokens}, {left} left; this call could spend {tokens}; "
                "it was not sent"
            )
        elif self.max_cost_total is not None and (
            row.spent_cost + row.reserved_cost + cost > self.max_cost_total
        ):
            left_cost = max(self.max_cost_total - row.spent_cost - row.reserved_cost, Decimal(0))
            message = (
                f"budget max_cost_total = {_fmt(self.max_cost_total)} of {self.name}: its "
                f"worlds and judges have spent {_fmt(row.spent_cost)} and calls in flight could "
                f"spend {_fmt(row.reserved_cost)}, {_fmt(left_cost)} left; this call could "
                f"spend {_fmt(cost)}; it was not sent"
            )
        else:
            message = f"the budget of {self.name} ran out earlier; it was not sent"
        self._exhausted(message)
        return message

    def _exhausted(self, message: str) -> None:
        """The first refusal stops the experiment: its queued turns are cancelled (running
        ones end as they would, each further call refused)."""
        now = timezone.now()
        with transaction.atomic():
            stopped = Experiment.objects.filter(
                pk=self.experiment_id, budget_exhausted_at__isnull=True
            ).update(budget_exhausted_at=now)
            if stopped:
                cancel_queued(self.experiment_id, f"budget_exhausted: {message}", now)

    def settle(self, *, reserved: Reservation, tokens: int, cost: Decimal) -> None:
        Experiment.objects.filter(pk=self.experiment_id).update(
            reserved_tokens=F("reserved_tokens") - reserved.tokens,
            reserved_cost=F("reserved_cost") - reserved.cost,
            spent_tokens=F("spent_tokens") + tokens,
            spent_cost=F("spent_cost") + cost,
        )


def budget_ledger(limits: BudgetLimits | None, experiment_id: int | None) -> BudgetLedger | None:
    """The ledger one attempt (or one measuring job) checks its calls against: the world's
    limits and its experiment's shared budget; None when neither sets any."""
    shared = experiment_budget(experiment_id)
    if limits is None and shared is None:
        return None
    return BudgetLedger(limits or BudgetLimits(), shared)


def experiment_budget(experiment_id: int | None) -> ExperimentBudget | None:
    """The shared budget of a world's experiment, if it has one (read once per attempt)."""
    if experiment_id is None:
        return None
    row = Experiment.objects.filter(pk=experiment_id).first()
    if row is None or not row.has_budget:
        return None
    return ExperimentBudget(
        experiment_id=row.pk,
        slug=row.slug,
        max_tokens_total=row.max_tokens_total,
        max_cost_total=row.max_cost_total,
    )


def _fmt(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"
