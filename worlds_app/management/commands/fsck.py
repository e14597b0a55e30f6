"""Re-hash every content-addressed row and every turn snapshot; report mismatches (like
``git fsck``). Exit status 1 when anything does not match its key."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scenarios_app.integrity import Mismatch, store_verify
from worlds_app.integrity import turn_verify


class Command(BaseCommand):
    help = (
        "Re-hash every stored component, scenario and turn snapshot and report rows whose "
        "content no longer hashes to their key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-turns", action="store_true", help="check the scenario store only")

    def handle(self, *args: Any, **options: Any) -> None:
        checked: Counter[str] = Counter()
        bad: list[Mismatch] = []
        scans = [store_verify()] + ([] if options["no_turns"] else [turn_verify()])
        for scan in scans:
            for kind, mismatch in scan:
                checked[kind] += 1
                if mismatch is not None:
                    bad.append(mismatch)
                    self.stdout.write(
                        f"MISMATCH {mismatch.kind} {mismatch.key}: content hashes to "
                        f"{mismatch.actual}"
                    )
        for kind, count in checked.items():
            wrong = sum(1 for m in bad if m.kind == kind)
            self.stdout.write(f"  {kind:<20} {count:>8} checked  {wrong:>4} mismatched")
        total = sum(checked.values())
        if bad:
            raise CommandError(f"{len(bad)} of {total} rows do not match their hash")
        self.stdout.write(f"ok: {total} rows re-hashed, every one matches its key")
