"""A factorial design's arms and a stopping rule, validated (docs/designs.md): ``factors``
over a ``base`` scenario become arms, each a fork of the base (a level's ``fork`` is the
store's fork request without its parent, applied in the factors' order); ``stopping`` is
checked against the design. Errors are 400s naming the field (``factors[i].levels[j].fork…``).

Forking writes scenarios, so validation forks inside a transaction it rolls back (the hashes
are content-addressed: the same forks give the same hashes later); the experiment's creation
forks again in its own transaction (``write=True``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.experiment_design import Arm, Factorial, Stopping
from chukwa_core.factorial import factorial_design
from scenarios_app.services.forks import scenario_fork

SCALARS = ("scenario_slug", "description", "chronon_seconds")
FORK_FIELDS = ("changes", "note", "metadata", "operator")


class _Rollback(Exception):
    pass


def factorial_arms(factorial: Factorial, *, write: bool) -> list[Arm]:
    """One arm per run of the design, its scenario the base with the run's forks applied.
    ``write=False``: nothing stays written (the forks are rolled back)."""
    design = factorial.design
    arms: list[Arm] = []
    try:
        with transaction.atomic():
            for arm in design.arms:
                scenario_hash = factorial.base_hash
                for i, (factor, level) in enumerate(zip(design.factors, arm.levels, strict=True)):
                    fork = factor.levels[level].fork
                    if fork is None:
                        continue
                    where = f"factors[{i}].levels[{level}].fork"
                    scenario_hash = _fork(scenario_hash, fork, where)
                arms.append(Arm(arm.label, scenario_hash))
            if not write:
                raise _Rollback
    except _Rollback:
        pass
    return arms


def _fork(parent: str, fork: Mapping[str, Any], where: str) -> str:
    body = require_object(fork, where, "invalid_factors")
    check_keys(body, where, required=("changes",), optional=FORK_FIELDS[1:], code="invalid_input")
    try:
        with transaction.atomic():  # a savepoint: a refused fork leaves the others as they were
            result = scenario_fork(
                data={"primary_parent": {"hash": parent}, **body},  # type: ignore[typeddict-item]
                durable=False,
            )
    except ChukwaError as exc:
        inner = str(exc.details.get("field", ""))
        if inner in SCALARS:  # the store names a changed scalar by its bare name
            inner = f"changes.{inner}"
        outer = f"{where}.{inner}" if inner else where
        bare = inner.removeprefix("changes.")
        message = (
            exc.message.replace(bare, outer, 1) if bare and bare in exc.message else exc.message
        )
        raise ChukwaError(
            exc.code if exc.status_code != 404 else "unresolved_reference",
            message if message.startswith(outer) else f"{outer}: {message}",
            {**exc.details, "field": outer},
            status_code=400 if exc.status_code == 404 else exc.status_code,
        ) from None
    return result["scenario_hash"]


def stopping_of(
    value: Any, *, metrics: list[str], resolve: Any, replicates: int, arms: list[Arm], control: str
) -> Stopping:
    """``{"metric": ref, "alpha", "max_replicates", "every"[, "treatment"]}``: the metric one
    of the design's, 0 < alpha < 1, replicates ≤ max_replicates, every ≥ 1; the test pairs
    ``treatment`` (default: the only other arm; required when there are more) with the
    control."""
    body = require_object(value, "stopping", "invalid_stopping")
    check_keys(
        body, "stopping", required=Stopping.INPUT_REQUIRED, optional=Stopping.INPUT_OPTIONAL,
        code="invalid_stopping",
    )  # fmt: skip
    metric = resolve(body["metric"], "stopping.metric")
    if metric not in metrics:
        raise invalid("invalid_stopping", "stopping.metric", "must be one of the design's metrics")
    alpha = body["alpha"]
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, int | float)
        or not math.isfinite(alpha)
        or not 0 < alpha < 1
    ):
        raise invalid("invalid_stopping", "stopping.alpha", "must be a number between 0 and 1")
    maximum = body["max_replicates"]
    if isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < replicates:
        raise invalid(
            "invalid_stopping",
            "stopping.max_replicates",
            f"must be a whole number at least replicates ({replicates})",
        )
    every = body["every"]
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise invalid("invalid_stopping", "stopping.every", "must be a whole number ≥ 1")
    others = [a.label for a in arms if a.label != control]
    treatment = body.get("treatment")
    if treatment is None:
        if len(others) != 1:
            raise invalid(
                "invalid_stopping",
                "stopping.treatment",
                f"name the arm tested against the control (one of {', '.join(others)})",
            )
        treatment = others[0]
    if treatment not in others:
        raise invalid(
            "invalid_stopping", "stopping.treatment", f"{treatment!r} is not a treatment arm"
        )
    return Stopping(metric, float(alpha), maximum, every, replicates, treatment)


def factorial_of(body: Mapping[str, Any], base_hash: str) -> Factorial:
    """The validated factors (400 naming ``factors[i]…`` or ``fraction``)."""
    factorial_design(body["factors"], body.get("fraction"))
    return Factorial(base_hash, body["factors"], body.get("fraction"))
