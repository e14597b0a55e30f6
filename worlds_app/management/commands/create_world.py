"""Create a world from a named or hashed scenario."""

from __future__ import annotations

from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chukwa_core.errors import ChukwaError
from cognition_app.sources import REPLAY_MODES
from worlds_app.services import WorldCreateInput, world_create
from worlds_app.services.budgets import BUDGET_FIELDS


class Command(BaseCommand):
    help = "Create a world: manage.py create_world SLUG --scenario NAME (or --scenario-hash H)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--scenario", help="scenario name")
        group.add_argument("--scenario-hash", help="scenario hash")
        parser.add_argument("--name", help='display name (default "<label> #<slug>")')
        parser.add_argument(
            "--start-time", help="simulation time of turn 0 (ISO 8601; default now)"
        )
        parser.add_argument(
            "--replay-from",
            metavar="SLUG",
            help="serve calls from this world's recorded invocations (same scenario and "
            "--start-time reproduce it exactly)",
        )
        parser.add_argument(
            "--replay-mode",
            choices=REPLAY_MODES,
            help="with --replay-from: replay_then_live (unmatched calls go live) or "
            "replay_strict (they fail the attempt)",
        )
        budget = parser.add_argument_group("budget (any of them, none by default)")
        budget.add_argument("--budget-max-tokens-per-turn", type=int, metavar="N")
        budget.add_argument("--budget-max-cost-per-turn", metavar="AMOUNT")
        budget.add_argument("--budget-max-tokens-total", type=int, metavar="N")
        budget.add_argument("--budget-max-cost-total", metavar="AMOUNT")

    def handle(self, *args: Any, **options: Any) -> None:
        ref = (
            {"name": options["scenario"]}
            if options["scenario"]
            else {"hash": options["scenario_hash"]}
        )
        data: dict[str, Any] = {"slug": options["slug"], "scenario_ref": ref}
        if options["name"]:
            data["name"] = options["name"]
        if options["start_time"]:
            data["start_time"] = options["start_time"]
        if (options["replay_from"] is None) != (options["replay_mode"] is None):
            raise CommandError("--replay-from and --replay-mode go together")
        if options["replay_from"] is not None:
            data["replay_from"] = {"world": options["replay_from"], "mode": options["replay_mode"]}
        budget = {
            name: options[f"budget_{name}"]
            for name in BUDGET_FIELDS
            if options[f"budget_{name}"] is not None
        }
        if budget:
            data["budget"] = budget  # checked by the service, like the API's
        try:
            world = world_create(  # checked by the service
                data=cast(WorldCreateInput, data), created_by="cli"
            )
        except ChukwaError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        replaying = (
            f", replaying {world.replay_from['world']!r} ({world.replay_from['mode']})"
            if world.replay_from
            else ""
        )
        self.stdout.write(
            f"world {world.slug!r} created from {world.label} ({world.scenario_id[:12]}), "
            f"turn 0{replaying}" + (f", budget {_budget_text(budget)}" if budget else "")
        )


def _budget_text(budget: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in budget.items())
