"""Experiments (docs/experiments.md): one request makes arms by replicates ordinary worlds
``<slug>--<arm>--<i>``, replicate i seeded alike in every arm (paired), with the arm's
interventions, ``turns`` turns queued on each, and every world measured with the experiment's
metrics at turn 0 and as each turn commits.

The design is validated, and every reference resolved, before anything is written; the worlds,
their interventions and their turns are then written in one transaction (a 400 or 409 found
while writing — a world slug taken, a start time out of range — writes nothing either).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import ChukwaError, ConflictError, NotFoundError, invalid
from chukwa_core.ids import label_problem
from chukwa_core.patching import PatchRejected, check_patch_shape
from chukwa_core.seeds import experiment_seed, replicate_seed, seed_problem
from scenarios_app.services._store import reject_nul
from worlds_app.models import Experiment, World
from worlds_app.selectors import require_slug
from worlds_app.services.attempts import MAX_BATCH, turn_attempt_enqueue
from worlds_app.services.budgets import parse_budget
from worlds_app.services.dispatch import measure_on_commit
from worlds_app.services.experiment_stop import cancel_queued
from worlds_app.services.interventions import MAX_NOTE_CHARS, intervention_create
from worlds_app.services.measurements import resolve_metric_refs
from worlds_app.services.worlds import scenario_hash_from_ref, world_create

MAX_WORLDS = 1000
MAX_TURNS = MAX_BATCH  # one batch of turns per world
SLUG_MAX = 64
RESERVED_SLUGS = ("estimate",)  # /api/experiments/estimate/
CREATE_REQUIRED = ("slug", "arms", "replicates", "turns", "metrics")
CREATE_OPTIONAL = ("name", "description", "control", "seed", "start_time", "budget")
BUDGET_LIMITS = ("max_cost_total", "max_tokens_total")
ARM_REQUIRED = ("label", "scenario_ref")
ARM_OPTIONAL = ("interventions",)


def world_slug(experiment: str, arm: str, replicate: int) -> str:
    return f"{experiment}--{arm}--{replicate}"


def _count(value: Any, field: str, low: int, high: int, code: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(code, field, f"must be an integer {low}…{high}, got {value!r}")
    return value


def _text(body: Mapping[str, Any], field: str, limit: int) -> str:
    value = body.get(field, "")
    if value is None:
        value = ""
    if not isinstance(value, str) or len(value) > limit:
        raise invalid("invalid_input", field, f"must be a string ≤ {limit} chars")
    reject_nul(value, field)
    return value


def _interventions(value: Any, field: str, turns: int) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise invalid("invalid_interventions", field, "must be an array")
    found = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        body = require_object(item, where, "invalid_interventions")
        check_keys(
            body, where, required=("turn", "patch"), optional=("note",), code="invalid_input"
        )
        turn = _count(body["turn"], f"{where}.turn", 1, turns, "invalid_turn")
        try:
            check_patch_shape(body["patch"])
        except PatchRejected as exc:
            raise invalid(
                "invalid_patch", f"{where}.patch", exc.message, pointer=exc.pointer
            ) from None
        note = _text(body, "note", MAX_NOTE_CHARS)
        found.append({"turn": turn, "patch": body["patch"], "note": note})
    return found


def design_of(data: Any) -> dict[str, Any]:
    """The validated design, every reference resolved to a hash (400 naming the field)."""
    body = require_object(data, "body", "invalid_input")
    check_keys(body, "", required=CREATE_REQUIRED, optional=CREATE_OPTIONAL, code="invalid_input")
    slug = body["slug"]
    problem = label_problem(slug)
    if problem is not None:
        raise invalid("invalid_slug", "slug", f"{slug!r} {problem}")
    if slug in RESERVED_SLUGS:
        raise invalid("invalid_slug", "slug", f"{slug!r} is reserved (a path of the API)")
    replicates = _count(body["replicates"], "replicates", 1, MAX_WORLDS, "invalid_replicates")
    turns = _count(body["turns"], "turns", 1, MAX_TURNS, "invalid_turns")
    arms_in = body["arms"]
    if not isinstance(arms_in, list) or not arms_in:
        raise invalid("invalid_arms", "arms", "must be a non-empty array of arms")
    if len(arms_in) * replicates > MAX_WORLDS:
        raise invalid(
            "too_many_worlds",
            "replicates",
            f"{len(arms_in)} arms by {replicates} replicates is {len(arms_in) * replicates} "
            f"worlds; at most {MAX_WORLDS}",
        )
    arms: list[dict[str, Any]] = []
    for index, arm_in in enumerate(arms_in):
        where = f"arms[{index}]"
        arm = require_object(arm_in, where, "invalid_arms")
        check_keys(arm, where, required=ARM_REQUIRED, optional=ARM_OPTIONAL, code="invalid_input")
        label = arm["label"]
        problem = label_problem(label)
        if problem is not None:
            raise invalid("invalid_label", f"{where}.label", f"{label!r} {problem}")
        if any(a["label"] == label for a in arms):
            raise invalid("duplicate_arm", f"{where}.label", f"arm {label!r} is named twice")
        longest = world_slug(slug, label, replicates)
        if len(longest) > SLUG_MAX:
            raise invalid(
                "slug_too_long",
                f"{where}.label",
                f"world slug {longest!r} would be longer than {SLUG_MAX} characters",
            )
        scenario_hash = _scenario(arm["scenario_ref"], f"{where}.scenario_ref")
        arms.append(
            {
                "label": label,
                "scenario_ref": {"hash": scenario_hash},
                "interventions": _interventions(
                    arm.get("interventions", []), f"{where}.interventions", turns
                ),
            }
        )
    control = body.get("control") or arms[0]["label"]
    if control not in {a["label"] for a in arms}:
        raise invalid("invalid_control", "control", f"{control!r} is not one of the arms")
    metrics = resolve_metric_refs(body["metrics"], "metrics")
    seed = body.get("seed")
    if seed is None:
        seed = experiment_seed(slug)
    elif (problem := seed_problem(seed)) is not None:
        raise invalid("invalid_seed", "seed", problem)
    design: dict[str, Any] = {
        "slug": slug,
        "name": _text(body, "name", 200) or slug,
        "description": _text(body, "description", 10_000),
        "arms": arms,
        "control": control,
        "replicates": replicates,
        "turns": turns,
        "metrics": [m["hash"] for m in metrics],
        "seed": seed,
    }
    if body.get("start_time") is not None:
        design["start_time"] = body["start_time"]
    if body.get("budget") is not None:
        design["budget"] = _budget(body["budget"])
    return design


def _budget_columns(budget: Mapping[str, Any] | None) -> dict[str, Any]:
    if budget is None:
        return {}
    cost = budget["max_cost_total"]
    return {
        "max_tokens_total": budget["max_tokens_total"],
        "max_cost_total": None if cost is None else Decimal(cost),
    }


def _budget(value: Any) -> dict[str, Any]:
    """The experiment's budget: one total over all its worlds and judges (no per-turn limits:
    a world's own budget has those), cost as a decimal string."""
    if isinstance(value, dict):
        for name in value:
            if name not in BUDGET_LIMITS:
                raise invalid(
                    "invalid_budget",
                    f"budget.{name}",
                    f"unknown limit; an experiment's limits are {', '.join(BUDGET_LIMITS)}",
                )
    limits = parse_budget(value)
    if all(limits[name] is None for name in BUDGET_LIMITS):
        raise invalid(
            "invalid_budget", "budget", f"give at least one of {', '.join(BUDGET_LIMITS)}"
        )
    cost = limits["max_cost_total"]
    return {
        "max_cost_total": None if cost is None else format(cost.normalize(), "f"),
        "max_tokens_total": limits["max_tokens_total"],
    }


def _scenario(ref: Any, field: str) -> str:
    """The stored scenario an arm names (by name or hash: a design writes nothing before it
    runs, so no inline scenario); an error names the arm's field."""
    if not isinstance(ref, dict) or len(ref) != 1 or next(iter(ref)) not in ("name", "hash"):
        raise invalid(
            "invalid_scenario_ref", field, 'must be {"name": N} or {"hash": H} of a stored scenario'
        )
    try:
        scenario_hash, _ = scenario_hash_from_ref(ref)
    except ChukwaError as exc:
        if exc.status_code == 404:  # every reference of a design resolves, or it is a 400
            ((mode, value),) = ref.items()
            raise invalid(
                "unresolved_reference", field, f"no stored scenario has {mode} {value!r}"
            ) from None
        inner = str(exc.details.get("field", "scenario_ref"))
        outer = field + inner.removeprefix("scenario_ref")
        raise ChukwaError(
            exc.code,
            exc.message.replace(inner, outer, 1),
            {**exc.details, "field": outer},
            status_code=exc.status_code,
        ) from None
    return scenario_hash


def experiment_create(*, data: Any, created_by: str = "") -> Experiment:
    """Validate the design, then create the experiment, its worlds, their interventions and
    turns in one transaction; after it commits, turn 0 of every world is measured and the first
    turns are kicked."""
    design = design_of(data)
    slug = design["slug"]
    with transaction.atomic(durable=True):
        if Experiment.objects.filter(slug=slug).exists():
            raise ConflictError(
                "experiment_exists",
                f"slug: an experiment {slug!r} already exists",
                {"field": "slug"},
            )
        experiment = Experiment.objects.create(
            slug=slug,
            name=design["name"],
            description=design["description"],
            design=design,
            seed=design["seed"],
            created_by=created_by,
            **_budget_columns(design.get("budget")),
        )
        _make_worlds(experiment, range(1, design["replicates"] + 1), created_by)
    return experiment


def _make_worlds(experiment: Experiment, replicates: range, created_by: str) -> None:
    """Replicates ``replicates`` of every arm: the worlds, their interventions and turns, in the
    caller's transaction; each world measured at turn 0 once it commits."""
    design = experiment.design
    for arm in design["arms"]:
        for replicate in replicates:
            name = world_slug(experiment.slug, arm["label"], replicate)
            world_data: dict[str, Any] = {
                "slug": name,
                "scenario_ref": arm["scenario_ref"],
                "name": f"{design['name']}: {arm['label']} #{replicate}",
                "seed": replicate_seed(design["seed"], replicate),
            }
            if "start_time" in design:
                world_data["start_time"] = design["start_time"]
            world = world_create(data=world_data, created_by=created_by, durable=False)  # type: ignore[arg-type]
            World.objects.filter(pk=world.pk).update(
                experiment=experiment, arm=arm["label"], replicate=replicate
            )
            for item in arm["interventions"]:
                intervention_create(slug=name, data=item, created_by=created_by, durable=False)
            turn_attempt_enqueue(
                slug=name, count=design["turns"], requested_by=created_by, durable=False
            )
            measure_on_commit(world.pk, experiment.pk)  # turn 0, the baseline


def _locked(slug: str) -> Experiment:
    require_slug(slug)
    experiment = Experiment.objects.select_for_update().filter(slug=slug).first()
    if experiment is None:
        raise NotFoundError(
            "experiment_not_found", f"slug: no experiment {slug!r}", {"field": "slug"}
        )
    return experiment


def experiment_add_replicates(*, slug: str, count: Any, created_by: str = "") -> Experiment:
    """Add ``count`` replicates to every arm: their seeds continue the experiment's (replicate
    R+1, R+2…), their turns are queued and they are measured like the first."""
    count = _count(count, "count", 1, MAX_WORLDS, "invalid_count")
    with transaction.atomic(durable=True):
        experiment = _locked(slug)
        if experiment.cancelled_at is not None:
            raise ConflictError(
                "experiment_cancelled",
                f"slug: experiment {slug!r} was cancelled",
                {"field": "slug"},
            )
        design = experiment.design
        first, total = design["replicates"] + 1, design["replicates"] + count
        arms = len(design["arms"])
        if arms * total > MAX_WORLDS:
            raise invalid(
                "too_many_worlds",
                "count",
                f"{arms} arms by {total} replicates is {arms * total} worlds; at most {MAX_WORLDS}",
            )
        longest = max(world_slug(slug, a["label"], total) for a in design["arms"])
        if len(longest) > SLUG_MAX:
            raise invalid(
                "slug_too_long", "count", f"world slug {longest!r} would be longer than {SLUG_MAX}"
            )
        experiment.design = {**design, "replicates": total}
        experiment.save(update_fields=["design"])
        _make_worlds(experiment, range(first, total + 1), created_by)
    return experiment


def experiment_add_metrics(*, slug: str, metrics: Any) -> Experiment:
    """Add metrics to the experiment and measure every turn its worlds committed (and every
    turn they commit from now on) with them: researchers think of measures after the run."""
    found = resolve_metric_refs(metrics, "metrics")
    with transaction.atomic(durable=True):
        experiment = _locked(slug)
        design = experiment.design
        added = [m["hash"] for m in found if m["hash"] not in design["metrics"]]
        experiment.design = {**design, "metrics": [*design["metrics"], *added]}
        experiment.save(update_fields=["design"])
        for world_id in World.objects.filter(experiment=experiment).values_list("pk", flat=True):
            measure_on_commit(world_id, experiment.pk)
    return experiment


def experiment_cancel(*, slug: str) -> Experiment:
    """Cancel what has not started: every queued attempt of the experiment's worlds (a running
    one ends as it would have)."""
    with transaction.atomic(durable=True):
        experiment = _locked(slug)
        if experiment.cancelled_at is None:
            experiment.cancelled_at = timezone.now()
            experiment.save(update_fields=["cancelled_at"])
        cancel_queued(
            experiment.pk,
            f"cancelled: experiment {slug!r} was cancelled",
            experiment.cancelled_at,
        )
    return experiment
