"""Queue N turns of a world, wait for the Celery worker to run them, summarize each turn."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from chukwa_core.errors import ChukwaError
from cognition_app.selectors import CostTotals
from worlds_app import selectors
from worlds_app.management.workers import worker_names
from worlds_app.models import ACTIVE_STATUSES, AttemptStatus, TurnAttempt
from worlds_app.services import turn_attempt_enqueue


def cost_text(cost: CostTotals) -> str:
    """ "cost 0.00024 (1200 tokens)"; a call without a price makes it "unknown", never 0."""
    tokens = f"{cost['tokens']['total']} tokens"
    if cost["total"] is None:
        amount = "unknown" if cost["calls"] else "0"
    else:
        amount = format(cost["total"].normalize(), "f") if cost["total"] else "0"
    notes = [tokens]
    if cost["unknown_calls"] and cost["total"] is not None:
        amount += "+"  # a lower bound: some calls have no price
        notes.append(f"{cost['unknown_calls']} call(s) unpriced")
    if cost["estimated_calls"]:
        notes.append("estimated")
    return f"cost {amount} ({', '.join(notes)})"


def summarize_turn(slug: str, number: int) -> str:
    """One line: the turn, each subject's narration, what changed, and what it cost."""
    turn = selectors.turn_get(slug=slug, number=number)
    narrations = " | ".join(f"{p['subject_id']}: {p['narration']}" for p in turn["patches"])
    changed = sorted({t["target_id"] for t in turn["transitions"]})
    return (
        f"turn {number} [{turn['simulation_time']:%H:%M:%S}] {narrations or '(no patches)'}"
        f" — changed: {', '.join(changed) or 'nothing'} — {cost_text(turn['cost'])}"
    )


class Command(BaseCommand):
    help = "Queue N turns for a world and print a summary of each as the worker commits it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("count", type=int, nargs="?", default=1)
        parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait in all")
        parser.add_argument(
            "--timelines", action="store_true", help="print each attempt's timeline path"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug, count = options["slug"], options["count"]
        if not worker_names():
            raise CommandError(
                "no Celery worker answered: start the stack (./bin/stack) or a worker first"
            )
        try:
            queued = turn_attempt_enqueue(slug=slug, count=count, requested_by="cli")
        except ChukwaError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        pending = list(queued["attempt_ids"])
        deadline = time.monotonic() + options["timeout"]
        failed = False
        with tqdm(total=count, desc=slug, unit="turn", file=self.stderr._out, disable=None) as bar:
            while pending:
                if time.monotonic() > deadline:
                    raise CommandError(f"timed out waiting for {len(pending)} attempt(s)")
                attempt = TurnAttempt.objects.get(pk=pending[0])
                if attempt.status in ACTIVE_STATUSES:
                    time.sleep(0.2)
                    continue
                pending.pop(0)
                bar.update(1)
                if attempt.status == AttemptStatus.COMMITTED:
                    bar.write(summarize_turn(slug, attempt.produced_turn or 0))
                    if options["timelines"]:
                        bar.write(f"  timeline: /attempts/{attempt.pk}/")
                else:
                    failed = True
                    bar.write(
                        f"attempt {attempt.pk} {attempt.status}: "
                        f"{attempt.failure_step}: {attempt.failure_reason}"
                    )
        if failed:
            raise CommandError("some attempts did not commit; see above")
