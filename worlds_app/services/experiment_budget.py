"""An experiment's budget (docs/experiments.md, "Estimate and budget"): one total over all its
worlds and judges, kept in the experiment's ledger row (``ExperimentLedger``, apart from the
experiment's own row) so that every worker on every machine sees the same ledger.

Before each LLM call of any of its worlds, what the call could spend (prompt estimate plus its
``max_tokens``, and the worst case of that in cost) is **reserved** by one statement that adds
it to the ledger only if spent + reserved + this call still fits every limit, and writes the
call's ``BudgetReservation`` row: PostgreSQL's row lock makes concurrent reservations queue,
so no two calls can both take the last of it. When the call's finished row is written, the
reservation is **settled** (on the settler thread, ``budget_settler``): its row deleted, given
back, and the call's real spend counted. A call that does not fit is not sent
(``budget_exhausted`` naming the experiment's budget), and the experiment stops: its queued
turns are cancelled with that reason, and it ends ``failed``.

A worker killed between reserving and settling leaves its reservation row: the reaper settles
it (``settle_leaked``) from the call's own row, what the call really spent (nothing when it
never finished), so the ledger always comes back to the calls' rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from cognition_app.budgets import BudgetLedger, BudgetLimits, Reservation
from scenarios_app.sql_rows import fetch_tuples
from worlds_app.models import BudgetReservation, Experiment, ExperimentLedger
from worlds_app.services.budget_settler import settle_later, settle_now
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

    def reserve(
        self, *, tokens: int, cost: Decimal, reservation_id: UUID, attempt_id: UUID | None
    ) -> str | None:
        ledger = connection.ops.quote_name(ExperimentLedger._meta.db_table)
        res = connection.ops.quote_name(BudgetReservation._meta.db_table)
        experiments = connection.ops.quote_name(Experiment._meta.db_table)
        # One statement: checked and reserved under the ledger row's lock, committed at once.
        # Bound server-side (its types spelled out), so a worker prepares it once and plans it
        # once: it runs before every call of a budgeted experiment, holding the call's slot.
        reserved = fetch_tuples(
            f"WITH l AS (UPDATE {ledger} SET reserved_tokens = reserved_tokens + %s::bigint, "  # noqa: S608
            "reserved_cost = reserved_cost + %s::numeric "
            "WHERE experiment_id = %s::bigint "
            "AND (%s::bigint IS NULL OR spent_tokens + reserved_tokens + %s::bigint <= %s::bigint) "
            "AND (%s::numeric IS NULL OR spent_cost + reserved_cost + %s::numeric <= %s::numeric) "
            f"AND NOT EXISTS (SELECT 1 FROM {experiments} e WHERE e.id = %s::bigint "
            "AND e.budget_exhausted_at IS NOT NULL) RETURNING experiment_id) "
            f"INSERT INTO {res} (id, experiment_id, attempt_id, tokens, cost, created_at) "
            "SELECT %s::uuid, experiment_id, %s::uuid, %s::bigint, %s::numeric, now() FROM l "
            "RETURNING id",
            [
                tokens,
                cost,
                self.experiment_id,
                self.max_tokens_total,
                tokens,
                self.max_tokens_total,
                self.max_cost_total,
                cost,
                self.max_cost_total,
                self.experiment_id,
                reservation_id,
                attempt_id,
                tokens,
                cost,
            ],
        )
        if reserved:
            return None
        return self._refused(tokens, cost)

    def _refused(self, tokens: int, cost: Decimal) -> str:
        row = ExperimentLedger.objects.filter(pk=self.experiment_id).first() or ExperimentLedger()
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
        """Handed to the settler thread (off the trace writer's): returns at once. What the
        call spent is read from its own row there (``tokens`` and ``cost`` are what it should
        say), so the ledger never counts a spend whose row was not written."""
        reservation_id = reserved.id
        assert reservation_id is not None
        # once the rows written in the caller's transaction (if any) are committed: the
        # settler reads them (at once in autocommit; a rollback leaves it to the reaper)
        transaction.on_commit(lambda: settle_later(reservation_id))


def settle_leaked(*, attempt_id: UUID | None = None, created_before: datetime | None = None) -> int:
    """The reaper's part: reservations whose worker died — of a dead attempt, or any taken
    before ``created_before`` (longer ago than an attempt or a judge's task may run: a judge's
    whose worker died, or one whose process stopped before its settler thread wrote it) —
    settled from their calls' own rows, what each call really spent (nothing if it never
    finished). Returns how many."""
    leaked = BudgetReservation.objects.all()
    if attempt_id is not None:
        leaked = leaked.filter(attempt_id=attempt_id)
    else:
        assert created_before is not None
        leaked = leaked.filter(created_at__lt=created_before)
    return settle_now(list(leaked.values_list("pk", flat=True)))


def budget_ledger(limits: BudgetLimits | None, experiment_id: int | None) -> BudgetLedger | None:
    """The ledger one attempt (or one measuring job) checks its calls against: the world's
    limits and its experiment's shared budget; None when neither sets any."""
    shared = experiment_budget(experiment_id)
    if limits is None and shared is None:
        return None
    return BudgetLedger(limits or BudgetLimits(), shared)


def experiment_budget(experiment_id: int | None) -> ExperimentBudget | None:
    """The shared budget of a world's experiment, if it has one. Its slug and limits never
    change once the experiment exists, so each process reads them once per experiment (not the
    experiment's row each attempt)."""
    if experiment_id is None:
        return None
    if experiment_id in _budgets:
        return _budgets[experiment_id]
    row = (
        Experiment.objects.filter(pk=experiment_id)
        .values("slug", "max_tokens_total", "max_cost_total")
        .first()
    )
    if row is None:
        return None
    budget = None
    if row["max_tokens_total"] is not None or row["max_cost_total"] is not None:
        budget = ExperimentBudget(experiment_id=experiment_id, **row)
    with _budgets_lock:
        if len(_budgets) >= MAX_CACHED_BUDGETS:
            _budgets.clear()
        _budgets[experiment_id] = budget
    return budget


MAX_CACHED_BUDGETS = 1024
_budgets: dict[int, ExperimentBudget | None] = {}
_budgets_lock = threading.Lock()


def _fmt(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"
