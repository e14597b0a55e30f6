"""Create a world from a named or hashed scenario, or as a branch of another world."""

from __future__ import annotations

from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chukwa_core.errors import ChukwaError
from cognition_app.sources import REPLAY_MODES
from worlds_app.services import WorldCreateInput, world_create
from worlds_app.services.budgets import BUDGET_FIELDS


class Command(BaseCommand):
    help = (
        "Create a world: manage.py create_world SLUG --scenario NAME (or --scenario-hash H), "
        "or a branch: --branch-from WORLD:TURN [--scenario NAME]."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        group = parser.add_mutually_exclusive_group()
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
        parser.add_argument(
            "--seed",
            type=int,
            help="0 ≤ SEED < 2^53: rule-policy draws and each LLM call's seed come from it",
        )
        parser.add_argument(
            "--branch-from",
            metavar="WORLD:TURN",
            help="start at a committed turn of another world, with a copy of its state "
            "(the scenario defaults to that world's)",
        )
        budget = parser.add_argument_group("budget (any of them, none by default)")
        budget.add_argument("--budget-max-tokens-per-turn", type=int, metavar="N")
        budget.add_argument("--budget-max-cost-per-turn", metavar="AMOUNT")
        budget.add_argument("--budget-max-tokens-total", type=int, metavar="N")
        budget.add_argument("--budget-max-cost-total", metavar="AMOUNT")

    def handle(self, *args: Any, **options: Any) -> None:
        data: dict[str, Any] = {"slug": options["slug"]}
        if options["scenario"]:
            data["scenario_ref"] = {"name": options["scenario"]}
        elif options["scenario_hash"]:
            data["scenario_ref"] = {"hash": options["scenario_hash"]}
        elif not options["branch_from"]:
            raise CommandError("one of --scenario, --scenario-hash or --branch-from is required")
        if options["branch_from"]:
            world, sep, turn = options["branch_from"].rpartition(":")
            if not sep or not world or not turn.isdigit():
                raise CommandError(
                    f"--branch-from takes WORLD:TURN (a slug and a turn number), got "
                    f"{options['branch_from']!r}"
                )
            data["branch_from"] = {"world": world, "turn": int(turn)}
        if options["seed"] is not None:
            data["seed"] = options["seed"]
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
        branched = (
            f", branched from {world.branched_from_slug!r} at turn {world.branched_from_turn}"
            if world.branched_from_turn is not None
            else ""
        )
        seeded = f", seed {world.seed}" if world.seed is not None else ""
        self.stdout.write(
            f"world {world.slug!r} created from {world.label} ({world.scenario_id[:12]}), "
            f"turn {world.current_turn}{branched}{seeded}{replaying}"
            + (f", budget {_budget_text(budget)}" if budget else "")
        )


def _budget_text(budget: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in budget.items())
