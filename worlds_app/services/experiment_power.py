"""The ``power`` part of an estimate (docs/experiments.md, "How many replicates do I need?"): the
request checked against the design (400 naming the field, ``power.effect`` …), the paired
differences' sd given or read from a pilot experiment's results, and the answer of the
statistics layer. Nothing is written."""

from __future__ import annotations

import math
from typing import Any

from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.experiment_design import ExperimentDesign
from chukwa_core.experiment_power import (
    POWER,
    POWER_FIELDS,
    PilotSpread,
    PowerEstimate,
    PowerMetric,
    PowerRequest,
    pilot_spread,
    power_estimate,
    spread_source,
)
from chukwa_core.ids import label_problem
from chukwa_core.metric_kinds import world_scale_of
from chukwa_core.statistics.types import ALPHA
from scenarios_app.selectors import metric_rows
from worlds_app.experiment_results import experiment_results
from worlds_app.models import Experiment
from worlds_app.services.measurements import resolve_metric_refs

CODE = "invalid_power"


def _number(body: dict[str, Any], name: str, default: float | None = None) -> float:
    value = body.get(name, default)
    field = f"power.{name}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(CODE, field, f"must be a finite number, got {value!r}")
    return float(value)


def _fraction(body: dict[str, Any], name: str, default: float) -> float:
    value = _number(body, name, default)
    if not 0 < value < 1:
        raise invalid(CODE, f"power.{name}", f"must be between 0 and 1 (exclusive), got {value}")
    return value


def power_request_of(value: Any, design: ExperimentDesign) -> PowerRequest:
    """``{"metric": ref, "effect": δ, "alpha"?, "power"?, "sd"? | "pilot"?}`` checked: the metric
    one of the design's, δ ≠ 0, 0 < alpha, power < 1, exactly one of sd > 0 and a pilot slug."""
    if not isinstance(value, dict):
        raise invalid(CODE, "power", "must be an object with metric, effect and sd or pilot")
    for name in value:
        if name not in POWER_FIELDS:
            raise invalid(CODE, f"power.{name}", f"unknown; allowed: {', '.join(POWER_FIELDS)}")
    for name in ("metric", "effect"):
        if name not in value:
            raise invalid(CODE, f"power.{name}", "is required")
    try:
        (found,) = resolve_metric_refs([value["metric"]], "power.metric")
    except ChukwaError as exc:
        raise invalid(CODE, "power.metric", exc.message.split(": ", 1)[-1]) from None
    if found["hash"] not in design.metrics:
        raise invalid(
            CODE,
            "power.metric",
            f"{found['label']} ({found['hash'][:12]}…) is not one of the design's metrics",
        )
    effect = _number(value, "effect")
    if effect == 0:
        raise invalid(CODE, "power.effect", "must not be 0: no sample detects no difference")
    alpha = _fraction(value, "alpha", ALPHA)
    power = _fraction(value, "power", POWER)
    if ("sd" in value) == ("pilot" in value):
        raise invalid(
            CODE,
            "power.pilot" if "sd" in value else "power.sd",
            "give exactly one of sd (the paired differences' spread) and pilot (an experiment)",
        )
    if "sd" in value:
        sd = _number(value, "sd")
        if sd <= 0:
            raise invalid(CODE, "power.sd", f"must be greater than 0, got {sd}")
        return PowerRequest(found["hash"], effect, alpha, power, sd=sd)
    pilot = value["pilot"]
    if not isinstance(pilot, str) or label_problem(pilot) is not None:
        raise invalid(CODE, "power.pilot", f"must be an experiment's slug, got {pilot!r}")
    return PowerRequest(found["hash"], effect, alpha, power, pilot=pilot)


def _pilot(request: PowerRequest) -> tuple[float, str]:
    """The paired differences' sd in the pilot's results for the metric, and where from."""
    slug = str(request.pilot)
    if not Experiment.objects.filter(slug=slug).exists():
        raise invalid(CODE, "power.pilot", f"no experiment {slug!r}")
    results = experiment_results(slug=slug)
    metric = next((r for r in results.results if r.metric.hash == request.metric), None)
    if metric is None:
        raise invalid(CODE, "power.pilot", f"experiment {slug!r} did not measure this metric")
    arms = {
        arm.arm: [w.value for w in sorted(arm.worlds, key=lambda w: w.replicate)]
        for arm in metric.arms
    }
    spread = pilot_spread(results.control, arms, slug=slug)
    if not isinstance(spread, PilotSpread):
        raise invalid(CODE, "power.pilot", spread)
    return spread.sd, spread_source(spread, slug)


def experiment_power(*, value: Any, design: ExperimentDesign) -> PowerEstimate:
    """The replicates the design needs for the power asked, and the power of its own."""
    request = power_request_of(value, design)
    (row,) = metric_rows(hashes=[request.metric])
    if request.sd is not None:
        sd, source = request.sd, "given"
    else:
        sd, source = _pilot(request)
    try:
        return power_estimate(
            request,
            metric=PowerMetric(row["hash"], row["label"]),
            scale=world_scale_of(row["content"]),
            replicates=design.replicates,
            sd=sd,
            sd_source=source,
        )
    except ValueError as exc:  # an sd and effect a binary metric's differences cannot have
        field = "power.sd" if request.sd is not None else "power.pilot"
        raise invalid(CODE, field, str(exc)) from None
