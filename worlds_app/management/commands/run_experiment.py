"""Run an experiment from its design (the JSON of ``POST /api/experiments/``; docs/experiments.md):
validate it, create it, wait with a progress bar over turns while the workers run it, then print
the results table and the experiment's URL.

Exit status: 0 when the experiment completed; non-zero when the design is refused (nothing is
written), when it failed or was cancelled (the table of what was measured is printed first), or
when Ctrl-C stopped the waiting (the experiment goes on: it is not cancelled).
"""

from __future__ import annotations

import json
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse
from tqdm import tqdm

from chukwa_core.errors import ChukwaError
from chukwa_core.experiment_table import results_table
from chukwa_core.experiment_time import duration_text
from chukwa_core.ids import is_hash
from worlds_app.experiment_results import experiment_results
from worlds_app.experiment_selectors import COMPLETED, RUNNING, experiment_get
from worlds_app.management.workers import worker_names
from worlds_app.services.experiment_design import design_of
from worlds_app.services.experiment_estimate import Estimate, experiment_estimate
from worlds_app.services.experiments import experiment_create

# After the last turn, measuring can trail (an LLM judge takes seconds per turn). A failed or
# cancelled experiment never reaches its planned count, so waiting for it stops once
# measurements stop arriving; a completed one is waited for longer, and if its measurements
# still stall (no worker consumes the measure queue) the command says so and exits non-zero.
SETTLE_SECONDS = 3.0
STALL_SECONDS = 120.0


def read_design(name: str, stdin: Any = None) -> Any:
    """The design JSON of the file ``name`` (``-``: standard input); a file that cannot be read
    or is not JSON is a CommandError naming the file and, for JSON, where it breaks."""
    where = "standard input" if name == "-" else name
    try:
        text = (stdin or sys.stdin).read() if name == "-" else Path(name).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{where}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{where}: invalid_json: line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


def refusal(exc: ChukwaError) -> CommandError:
    """A refused design as one line: the error code, the field, the message."""
    field = exc.details.get("field")
    message = exc.message
    if field and not message.startswith(f"{field}:"):
        message = f"{field}: {message}"
    return CommandError(f"{exc.code}: {message}")


def experiment_url(slug: str) -> str:
    return settings.CHUKWA_SITE_URL + reverse("page-experiment-detail", args=[slug])


def cost_text(cost: Decimal | None, tokens: int) -> str:
    amount = "unknown" if cost is None else (format(cost.normalize(), "f") if cost else "0")
    return f"cost {amount} ({tokens} tokens)"


def estimate_text(estimate: Estimate) -> str:
    calls, tokens = estimate["calls"], estimate["tokens"]
    lines = [
        f"worlds: {estimate['worlds']} by {estimate['turns_per_world']} turns",
        f"calls at most: {calls['total']} ({calls['agents']} agents, {calls['judges']} judges)",
        f"tokens at most: {tokens['total']} "
        f"({tokens['prompt']} prompt, {tokens['completion']} completion)",
        f"cost at most: {estimate['cost'] if estimate['cost'] is not None else 'unknown'}",
        "time: "
        + ("unknown" if estimate["seconds"] is None else duration_text(estimate["seconds"]))
        + f" ({estimate['seconds_basis']})",
    ]
    batched = estimate["batch_cost"]
    if batched["batch_declared"]:
        amount = batched["batch"] if batched["batch"] is not None else "unknown (no batch price)"
        lines.append(
            f"cost at most in {batched['mode']} mode with batches: {amount} "
            f"({batched['calls_batched']} calls in provider batches)"
        )
    if estimate["unpriced"]:
        lines.append(f"unpriced: {', '.join(estimate['unpriced'])}")
    if estimate["budget"] is not None:
        within = estimate["within_budget"]
        verdict = "unknown" if within is None else ("yes" if within else "no")
        lines.append(f"budget: {json.dumps(estimate['budget'])}; within it: {verdict}")
    lines.append(f"method: {estimate['method']}")
    power = estimate["power"]
    if power is not None:
        needed = power.replicates_needed
        lines += [
            f"power: {power.metric.label} ({power.type}), effect {power.effect:g}, "
            f"sd {power.sd:.4g} ({power.sd_source}), alpha {power.alpha:g}",
            f"replicates needed for power {power.power_target:g}: "
            + (str(needed) if needed is not None else f"unknown ({power.note})"),
            f"power of the design's {power.replicates} replicates: "
            + ("—" if power.power_of_design is None else f"{power.power_of_design:.3f}"),
            f"power method: {power.method}",
        ]
    return "\n".join(lines)


def power_flags(options: dict[str, Any], data: Any) -> Any:
    """The design with the ``--power-*`` flags as its ``power`` (the API's estimate input);
    unchanged without them. The metric defaults to the design's first."""
    given = {
        "metric": options.get("power_metric"),
        "effect": options.get("power_effect"),
        "sd": options.get("power_sd"),
        "pilot": options.get("power_pilot"),
        "alpha": options.get("power_alpha"),
        "power": options.get("power_target"),
    }
    if all(value is None for value in given.values()):
        return data
    if not options["estimate"]:
        raise CommandError("the --power-* flags go with --estimate; nothing was written")
    power: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    metric = power.pop("metric", None)
    if metric is not None:
        power["metric"] = {"hash": metric} if is_hash(metric) else {"label": metric}
    elif isinstance(data, dict) and isinstance(data.get("metrics"), list) and data["metrics"]:
        power["metric"] = data["metrics"][0]
    return {**data, "power": power} if isinstance(data, dict) else data


class Command(BaseCommand):
    help = (
        "Create an experiment from its design JSON (FILE, or - for standard input), wait while "
        "the workers run it with a progress bar, then print its results table."
    )

    stealth_options = ("stdin",)  # call_command(..., stdin=…) reads "-" from it

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the design JSON, as POST /api/experiments/ takes it")
        parser.add_argument(
            "--estimate",
            action="store_true",
            help="print what the experiment could spend and write nothing",
        )
        power = parser.add_argument_group(
            "power (with --estimate)",
            "the replicates needed to detect an effect: --power-effect and one of --power-sd "
            "and --power-pilot",
        )
        power.add_argument(
            "--power-metric", help="a metric of the design, label or hash (default: the first)"
        )
        power.add_argument("--power-effect", type=float, help="the paired difference to detect")
        power.add_argument(
            "--power-sd", type=float, help="the sd of the paired differences (binary: see docs)"
        )
        power.add_argument("--power-pilot", help="an experiment whose results give that sd instead")
        power.add_argument("--power-alpha", type=float, help="default 0.05")
        power.add_argument("--power-target", type=float, help="the power wanted; default 0.8")
        parser.add_argument(
            "--no-wait", action="store_true", help="create the experiment and return"
        )
        parser.add_argument(
            "--reuse",
            choices=("exact", "off"),
            help="answer a request identical to a recorded one from the record (exact, an "
            "experiment's default) or send every request (off); overrides the file's reuse",
        )
        parser.add_argument(
            "--mode",
            choices=("online", "batch"),
            help="send each model call when it is made (online, the default) or run in lockstep "
            "ticks through the sources' batch APIs (batch); overrides the file's mode",
        )
        parser.add_argument("--created-by", default="cli", help="recorded on the experiment")
        parser.add_argument(
            "--poll", type=float, default=0.5, help="seconds between progress reads"
        )
        parser.add_argument(
            "--timeout", type=float, default=None, help="give up waiting after this many seconds"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        data = power_flags(options, read_design(options["file"], options.get("stdin")))
        if options.get("reuse") and isinstance(data, dict):
            data = {**data, "reuse": options["reuse"]}
        if options.get("mode") and isinstance(data, dict):
            data = {**data, "mode": options["mode"]}
        if options["estimate"]:
            try:
                estimate = experiment_estimate(data=data)
            except ChukwaError as exc:
                raise refusal(exc) from None
            self.stdout.write(estimate_text(estimate))
            if isinstance(data, dict) and isinstance(data.get("stopping"), dict):
                most = data["stopping"].get("max_replicates")
                self.stdout.write(
                    f"stopping rule: priced at max_replicates ({most} per arm), its worst case"
                )
            return
        try:
            design_of(data)  # refused before anything else is asked, and nothing written
        except ChukwaError as exc:
            raise refusal(exc) from None
        if not options["no_wait"] and not worker_names():
            raise CommandError(
                "no Celery worker answered: start the stack (./bin/stack) or a worker first "
                "(or pass --no-wait); nothing was written"
            )
        try:
            experiment = experiment_create(data=data, created_by=options["created_by"])
        except ChukwaError as exc:
            raise refusal(exc) from None
        slug = experiment.slug
        url = experiment_url(slug)
        self.stdout.write(f"experiment {slug} created: {url}")
        if options["no_wait"]:
            return
        try:
            state = self._wait(slug, options["poll"], options["timeout"])
        except KeyboardInterrupt:
            raise CommandError(
                f"stopped waiting; experiment {slug} was not cancelled and goes on in the "
                f"workers: {url}",
                returncode=130,
            ) from None
        self.stdout.write("\n" + results_table(experiment_results(slug=slug)))
        self.stdout.write(f"\n{cost_text(state['cost'], state['tokens'])}")
        self.stdout.write(f"Experiment: {url}")
        progress = state["progress"]
        if state["status"] == COMPLETED and (
            progress["measurements_done"] < progress["measurements_planned"]
        ):
            raise CommandError(
                f"measurements stalled at {progress['measurements_done']} of "
                f"{progress['measurements_planned']}: is a worker consuming the measure queue "
                f"({settings.CHUKWA_MEASURE_QUEUE})? The table above is partial."
            )
        if state["status"] != COMPLETED:
            failed = ", ".join(w["slug"] for w in state["failed_worlds"]) or "none"
            raise CommandError(
                f"experiment {slug} {state['status']}; worlds short of their turns: {failed}"
            )

    def _wait(self, slug: str, poll: float, timeout: float | None) -> dict[str, Any]:
        """Poll the experiment until its turns are done and its measurements are in; a bar over
        turns on standard error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        state = experiment_get(slug=slug)
        measured, settled_at = -1, time.monotonic()
        with tqdm(
            total=state["progress"]["turns_planned"],
            desc=slug,
            unit="turn",
            file=self.stderr._out,
            disable=None,  # no bar when standard error is not a terminal
        ) as bar:
            while True:
                progress = state["progress"]
                bar.total = progress["turns_planned"]
                bar.n = progress["turns_committed"]
                eta = progress["eta_seconds"]
                bar.set_postfix_str(
                    f"measured {progress['measurements_done']}/{progress['measurements_planned']}"
                    f", {cost_text(state['cost'], state['tokens'])}"
                    + ("" if eta is None else f", eta {eta} s")
                )
                if state["status"] != RUNNING:
                    if progress["measurements_done"] != measured:
                        measured, settled_at = progress["measurements_done"], time.monotonic()
                    patience = STALL_SECONDS if state["status"] == COMPLETED else SETTLE_SECONDS
                    if (
                        progress["measurements_done"] >= progress["measurements_planned"]
                        or time.monotonic() - settled_at > patience
                    ):
                        return state
                if deadline is not None and time.monotonic() > deadline:
                    raise CommandError(
                        f"timed out; experiment {slug} was not cancelled and goes on in the "
                        f"workers: {experiment_url(slug)}"
                    )
                time.sleep(poll)
                state = experiment_get(slug=slug)
