"""Experiments (docs/experiments.md): one request makes arms by replicates ordinary worlds
``<slug>--<arm>--<i>``, replicate i seeded alike in every arm (paired), with the arm's
interventions, ``turns`` turns queued on each, and every world measured with the experiment's
metrics at turn 0 and as each turn commits.

The design is validated, and every reference resolved, before anything is written; the worlds,
their interventions and their turns are then written in one transaction (a 400 or 409 found
while writing — a world slug taken, a start time out of range — writes nothing either).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import ChukwaError, ConflictError, NotFoundError, invalid
from chukwa_core.ids import label_problem
from chukwa_core.patching import PatchRejected, check_patch_shape
from chukwa_core.seeds import experiment_seed, replicate_seed, seed_problem
from scenarios_app.services._store import reject_nul
from worlds_app.models import Experiment, Intervention, Turn, TurnAttempt, World
from worlds_app.selectors import require_slug
from worlds_app.services.attempts import MAX_BATCH
from worlds_app.services.branches import branch_point
from worlds_app.services.budgets import parse_budget
from worlds_app.services.cancelling import cancel_queued
from worlds_app.services.dispatch import admit_on_commit, measure_on_commit
from worlds_app.services.interventions import MAX_NOTE_CHARS
from worlds_app.services.measurements import resolve_metric_refs
from worlds_app.services.worlds import (
    new_world_rows,
    parse_start_time,
    replay_ref,
    scenario_hash_from_ref,
    world_start,
)

MAX_WORLDS = 1000
MAX_TURNS = MAX_BATCH  # one batch of turns per world
SLUG_MAX = 64
RESERVED_SLUGS = ("estimate",)  # /api/experiments/estimate/
CREATE_REQUIRED = ("slug", "arms", "replicates", "turns", "metrics")
CREATE_OPTIONAL = (
    "name",
    "description",
    "control",
    "seed",
    "start_time",
    "budget",
    "branch_from",
    "replay_from",
)
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


def _interventions(value: Any, field: str, first: int, last: int) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise invalid("invalid_interventions", field, "must be an array")
    found = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        body = require_object(item, where, "invalid_interventions")
        check_keys(
            body, where, required=("turn", "patch"), optional=("note",), code="invalid_input"
        )
        turn = _count(body["turn"], f"{where}.turn", first, last, "invalid_turn")
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
    branch: dict[str, Any] | None = None
    first_turn = 0
    if body.get("branch_from") is not None:
        point = branch_point(body["branch_from"])
        first_turn = point.turn.number
        branch = {"world": point.parent.slug, "turn": first_turn}
        if body.get("start_time") is not None:
            raise invalid(
                "invalid_start_time",
                "start_time",
                "a branch starts at its parent's simulation time; leave start_time out",
            )
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
                    arm.get("interventions", []),
                    f"{where}.interventions",
                    first_turn + 1,
                    first_turn + turns,
                ),
            }
        )
    control = body.get("control") or arms[0]["label"]
    if control not in {a["label"] for a in arms}:
        raise invalid("invalid_control", "control", f"{control!r} is not one of the arms")
    metrics = resolve_metric_refs(body["metrics"], "metrics")
    seed = body.get("seed")
    if seed is not None and (problem := seed_problem(seed)) is not None:
        raise invalid("invalid_seed", "seed", problem)
    replay = None
    if body.get("replay_from") is not None:
        replay, replayed_seed = _replay_from(body["replay_from"], arms, replicates)
        if seed is not None and seed != replayed_seed:
            raise invalid(
                "invalid_seed",
                "seed",
                f"a replay draws what experiment {replay['experiment']!r} drew: its seed is "
                f"{replayed_seed}, not {seed}; leave seed out",
            )
        seed = replayed_seed
    if seed is None:
        seed = experiment_seed(slug)
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
        parse_start_time(body["start_time"])  # a 400 before anything is written or estimated
        design["start_time"] = body["start_time"]
    elif branch is None and replay is None:
        # one start for every world: paired worlds see the same simulation time
        design["start_time"] = timezone.now().isoformat()
    if body.get("budget") is not None:
        design["budget"] = _budget(body["budget"])
    if branch is not None:
        design["branch_from"] = branch
        design["first_turn"] = first_turn
    if replay is not None:
        design["replay_from"] = replay
    return design


def _replay_from(
    value: Any, arms: list[dict[str, Any]], replicates: int
) -> tuple[dict[str, str], int]:
    """``{"experiment": slug, "mode": replay_strict | replay_then_live}``: an experiment with a
    world for every arm and replicate of this design (each new world replays its pair)."""
    slug, mode = replay_ref(value, "experiment")
    old = Experiment.objects.filter(slug=slug).first()
    if old is None:
        raise invalid("invalid_replay_from", "replay_from.experiment", f"no experiment {slug!r}")
    have = set(World.objects.filter(experiment=old).values_list("arm", "replicate"))
    for arm in arms:
        for replicate in range(1, replicates + 1):
            if (arm["label"], replicate) not in have:
                raise invalid(
                    "invalid_replay_from",
                    "replay_from.experiment",
                    f"experiment {slug!r} has no world for arm {arm['label']!r}, replicate "
                    f"{replicate}: every world of a replay replays its pair",
                )
    return {"experiment": slug, "mode": mode}, old.seed


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
    turns in one transaction; after it commits, turn 0 of every world is measured and the
    first worlds the fairness bound admits are dispatched."""
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
    """Replicates ``replicates`` of every arm, in the caller's transaction and in bulk: each
    arm's start (scenario copy, first state) computed once; the worlds, their first turns,
    interventions and queued turns written a few statements for all; once it commits, the
    worlds the fairness bound admits are dispatched (the rest as admitted worlds finish) and
    every world is measured at its first turn (the baseline)."""
    design = experiment.design
    replayed = design.get("replay_from")
    point = branch_point(design["branch_from"]) if "branch_from" in design else None
    slugs = [world_slug(experiment.slug, a["label"], i) for a in design["arms"] for i in replicates]
    taken = World.objects.filter(slug__in=slugs).values_list("slug", flat=True).first()
    if taken is not None:
        raise ConflictError(
            "world_exists", f"slug: a world {taken!r} already exists", {"field": "slug"}
        )
    pairs: dict[str, World] = {}
    pair_times: dict[int, datetime] = {}
    if replayed is not None:
        pair_slugs = [
            world_slug(replayed["experiment"], a["label"], i)
            for a in design["arms"]
            for i in replicates
        ]
        pairs = {w.slug: w for w in World.objects.filter(slug__in=pair_slugs)}
        for slug in pair_slugs:
            if slug not in pairs:
                raise invalid("invalid_replay_from", "replay_from.experiment", f"no world {slug!r}")
        pair_times = dict(
            Turn.objects.filter(world__in=list(pairs.values()))
            .order_by("world_id", "number")
            .distinct("world_id")
            .values_list("world_id", "simulation_time")
        )
    start = parse_start_time(design.get("start_time")) if point is None else None
    rows: list[tuple[World, Turn]] = []
    interventions: list[tuple[World, dict[str, Any]]] = []
    for arm in design["arms"]:
        scenario_hash = arm["scenario_ref"]["hash"]
        shared = world_start(scenario_hash, {"hash": scenario_hash}, start or _now(), point)
        own_start = replayed is not None and "start_time" not in design and point is None
        for replicate in replicates:
            fields: dict[str, Any] = {}
            begin = shared
            if replayed is not None:
                pair = pairs[world_slug(replayed["experiment"], arm["label"], replicate)]
                fields = {
                    "replay_source": pair,
                    "replay_from": {"world": pair.slug, "mode": replayed["mode"]},
                }
                if own_start:  # the pair's own start: the same simulation time in prompts
                    begin = shared.starting_at(pair_times[pair.pk])
            world, turn = new_world_rows(
                begin,
                slug=world_slug(experiment.slug, arm["label"], replicate),
                name=f"{design['name']}: {arm['label']} #{replicate}",
                seed=replicate_seed(design["seed"], replicate),
                experiment=experiment,
                arm=arm["label"],
                replicate=replicate,
                next_attempt_seq=1 + design["turns"],
                # the counter a turn reads before it looks for its intervention
                # (interventions.intervention_create keeps it one by one; here in bulk)
                pending_interventions=len(arm["interventions"]),
                **fields,
            )
            rows.append((world, turn))
            interventions.extend((world, item) for item in arm["interventions"])
    try:
        with transaction.atomic():
            World.objects.bulk_create([world for world, _ in rows])
    except IntegrityError:  # a create racing on one of the slugs: the constraint decides
        raise ConflictError(
            "world_exists",
            "slug: one of the experiment's world slugs was just taken",
            {"field": "slug"},
        ) from None
    for world, turn in rows:
        turn.world = world
    Turn.objects.bulk_create([turn for _, turn in rows])
    Intervention.objects.bulk_create(
        [
            Intervention(
                world=world,
                turn=item["turn"],
                patch=item["patch"],
                note=item["note"],
                created_by=created_by,
            )
            for world, item in interventions
        ]
    )
    turns = design["turns"]
    attempts: list[TurnAttempt] = []
    for world, _ in rows:
        batch_id = uuid.uuid4()
        attempts.extend(
            TurnAttempt(
                world=world,
                seq=1 + i,
                batch_id=batch_id,
                batch_index=i,
                batch_size=turns,
                requested_by=created_by,
            )
            for i in range(turns)
        )
    TurnAttempt.objects.bulk_create(attempts, batch_size=5000)
    world_ids = [world.pk for world, _ in rows]
    # The first CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT worlds are dispatched after commit; each
    # of the rest when an admitted world is done (dispatch.experiment_admit).
    admit_on_commit(experiment.pk)
    measure_on_commit(world_ids, experiment.pk)  # the first turn, the baseline


def _now() -> datetime:
    return timezone.now()


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
        measure_on_commit(
            list(World.objects.filter(experiment=experiment).values_list("pk", flat=True)),
            experiment.pk,
        )
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
