"""Add an operator's intervention to a world: a WorldPatch from a file, joining a future turn."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chukwa_core.errors import ChukwaError
from worlds_app.services.interventions import InterventionInput, intervention_create


class Command(BaseCommand):
    help = (
        "Add an intervention: manage.py intervene WORLD PATCH.json [--turn N] [--note TEXT] "
        "[--operator NAME]. The patch joins turn N (default: the next that has not started) "
        "as its first patch, applied before any agent thinks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("world", help="the world's slug")
        parser.add_argument("patch_file", help="a JSON file holding one WorldPatch ('-': stdin)")
        parser.add_argument("--turn", type=int, help="the turn it joins")
        parser.add_argument("--note", default="", help="why (shown in provenance)")
        parser.add_argument(
            "--operator", default="cli", help="who intervenes (recorded; default cli)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["patch_file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        try:
            patch = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not JSON: {exc}") from None
        data: InterventionInput = {"patch": patch, "note": options["note"]}
        if options["turn"] is not None:
            data["turn"] = options["turn"]
        try:
            made = intervention_create(
                slug=options["world"], data=data, created_by=options["operator"]
            )
        except ChukwaError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(
            f"intervention {made.pk} joins turn {made.turn} of {options['world']!r} "
            f"(pending until that turn commits)"
        )
