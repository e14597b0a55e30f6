"""Writes for worlds and turn attempts."""

from worlds_app.services.attempts import (
    EnqueueResult,
    turn_attempt_claim,
    turn_attempt_enqueue,
    turn_attempt_reap,
    turn_attempt_retry,
    turn_attempt_run,
)
from worlds_app.services.budgets import BudgetInput, parse_budget, world_budget_set
from worlds_app.services.dispatch import turn_attempt_redrive
from worlds_app.services.worlds import (
    WorldCreateInput,
    scenario_snapshot,
    world_create,
    world_delete,
)

__all__ = [
    "BudgetInput",
    "EnqueueResult",
    "WorldCreateInput",
    "parse_budget",
    "scenario_snapshot",
    "turn_attempt_claim",
    "turn_attempt_enqueue",
    "turn_attempt_reap",
    "turn_attempt_redrive",
    "turn_attempt_retry",
    "turn_attempt_run",
    "world_budget_set",
    "world_create",
    "world_delete",
]
