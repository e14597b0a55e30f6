"""The one validation of an experiment's design (docs/experiments.md): a request's body — from
the API (whose serializer has checked its shape), the launch form, ``run_experiment`` or the
estimate — becomes an ``ExperimentDesign`` with every rule checked and every reference resolved
to a hash, or a 400 naming the field. Nothing is written."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.experiment_design import (
    ARM_OPTIONAL,
    ARM_REQUIRED,
    BUDGET_LIMITS,
    EXPERIMENT_MODES,
    INPUT_OPTIONAL,
    INPUT_REQUIRED,
    ONLINE,
    Arm,
    BranchFrom,
    Budget,
    ExperimentDesign,
    Factorial,
    PlannedIntervention,
    ReplayFrom,
    world_slug,
)
from chukwa_core.ids import label_problem
from chukwa_core.seeds import experiment_seed, seed_problem
from worlds_app.models import Experiment, World
from worlds_app.services.attempts import MAX_BATCH
from worlds_app.services.branches import branch_point
from worlds_app.services.budgets import parse_budget
from worlds_app.services.factorial_arms import factorial_arms, factorial_of, stopping_of
from worlds_app.services.measurements import resolve_metric_refs
from worlds_app.services.world_inputs import (
    intervention_fields,
    no_start_time_on_branch,
    short_text,
    whole_number,
)
from worlds_app.services.worlds import (
    parse_start_time,
    replay_ref,
    reuse_mode,
    scenario_hash_from_ref,
)

MAX_WORLDS = 10_000
MAX_TURNS = MAX_BATCH  # one batch of turns per world
SLUG_MAX = 64
RESERVED_SLUGS = ("estimate",)  # /api/experiments/estimate/


def design_of(data: Any) -> ExperimentDesign:
    """The validated design, every reference resolved to a hash (400 naming the field)."""
    body = require_object(data, "body", "invalid_input")
    check_keys(body, "", required=INPUT_REQUIRED, optional=INPUT_OPTIONAL, code="invalid_input")
    slug = body["slug"]
    problem = label_problem(slug)
    if problem is not None:
        raise invalid("invalid_slug", "slug", f"{slug!r} {problem}")
    if slug in RESERVED_SLUGS:
        raise invalid("invalid_slug", "slug", f"{slug!r} is reserved (a path of the API)")
    replicates = whole_number(body["replicates"], "replicates", 1, MAX_WORLDS, "invalid_replicates")
    turns = whole_number(body["turns"], "turns", 1, MAX_TURNS, "invalid_turns")
    branch: BranchFrom | None = None
    if body.get("branch_from") is not None:
        point = branch_point(body["branch_from"])
        branch = BranchFrom(point.parent.slug, point.turn.number)
        no_start_time_on_branch(body.get("start_time"))
    first_turn = branch.turn if branch is not None else 0
    factorial: Factorial | None = None
    if body.get("factors") is not None:
        for name in ("arms", "control"):
            if name in body:
                raise invalid(
                    "invalid_factors", name, f"give factors or {name}, not both (docs/designs.md)"
                )
        if body.get("base") is None:
            raise invalid("invalid_factors", "base", "factors need a base scenario")
        factorial = factorial_of(body, _scenario(body["base"], "base"))
        arms = factorial_arms(factorial, write=False)
        check_world_count(len(arms), replicates, "replicates")
        check_slug_length(slug, [a.label for a in arms], replicates, "factors")
    else:
        for name in ("base", "fraction"):
            if name in body:
                raise invalid("invalid_factors", name, f"{name} goes with factors")
        if "arms" not in body:
            raise invalid("invalid_input", "arms", "give arms, or factors over a base")
        arms = _arms(body["arms"], slug, replicates, first_turn, turns)
    control = body.get("control") or arms[0].label
    if control not in {a.label for a in arms}:
        raise invalid("invalid_control", "control", f"{control!r} is not one of the arms")
    metrics = resolve_metric_refs(body["metrics"], "metrics")
    primary = _primary(body.get("primary"), [m["hash"] for m in metrics])
    stopping = None
    if body.get("stopping") is not None:
        stopping = stopping_of(
            body["stopping"],
            metrics=[m["hash"] for m in metrics],
            resolve=lambda ref, field: resolve_metric_refs([ref], field)[0]["hash"],
            replicates=replicates,
            arms=arms,
            control=control,
        )
        check_world_count(len(arms), stopping.max_replicates, "stopping.max_replicates")
        check_slug_length(
            slug, [a.label for a in arms], stopping.max_replicates, "stopping.max_replicates"
        )
    seed = body.get("seed")
    if seed is not None and (problem := seed_problem(seed)) is not None:
        raise invalid("invalid_seed", "seed", problem)
    mode = _mode(body.get("mode", ONLINE), replays=body.get("replay_from") is not None)
    replay = None
    if body.get("replay_from") is not None:
        replay, replayed_seed = _replay_from(body["replay_from"], arms, replicates)
        if seed is not None and seed != replayed_seed:
            raise invalid(
                "invalid_seed",
                "seed",
                f"a replay draws what experiment {replay.experiment!r} drew: its seed is "
                f"{replayed_seed}, not {seed}; leave seed out",
            )
        seed = replayed_seed
    if seed is None:
        seed = experiment_seed(slug)
    start_time: str | None = None
    if body.get("start_time") is not None:
        parse_start_time(body["start_time"])  # a 400 before anything is written or estimated
        start_time = body["start_time"]
    elif branch is None and replay is None:
        # one start for every world: paired worlds see the same simulation time
        start_time = timezone.now().isoformat()
    return ExperimentDesign(
        slug=slug,
        name=short_text(body.get("name"), "name", 200) or slug,
        description=short_text(body.get("description"), "description", 10_000),
        arms=tuple(arms),
        control=control,
        replicates=replicates,
        turns=turns,
        metrics=tuple(m["hash"] for m in metrics),
        seed=seed,
        start_time=start_time,
        budget=_budget(body["budget"]) if body.get("budget") is not None else None,
        branch_from=branch,
        replay_from=replay,
        primary=primary,
        reuse=reuse_mode(body["reuse"], "reuse") if "reuse" in body else "exact",
        mode=mode,
        factorial=factorial,
        stopping=stopping,
    )


def _mode(value: Any, *, replays: bool) -> str:
    """``mode``: "online" or "batch" (docs/costs.md, "Batch mode"). A batch-mode world resumes by
    replaying its own attempt's calls, so it cannot also replay another experiment's."""
    if value not in EXPERIMENT_MODES:
        raise invalid(
            "invalid_mode",
            "mode",
            f"must be one of {', '.join(map(repr, EXPERIMENT_MODES))}, got {value!r}",
        )
    if value != ONLINE and replays:
        raise invalid(
            "invalid_mode",
            "mode",
            "a batch-mode experiment cannot replay another (replay_from): leave one out",
        )
    assert isinstance(value, str)
    return value


def _arms(arms_in: Any, slug: str, replicates: int, first_turn: int, turns: int) -> list[Arm]:
    if not isinstance(arms_in, list) or not arms_in:
        raise invalid("invalid_arms", "arms", "must be a non-empty array of arms")
    check_world_count(len(arms_in), replicates, "replicates")
    arms: list[Arm] = []
    for index, arm_in in enumerate(arms_in):
        arms.append(
            _arm(
                arm_in,
                f"arms[{index}]",
                arms,
                slug,
                replicates,
                range(first_turn + 1, first_turn + turns + 1),
            )
        )
    return arms


def _primary(value: Any, metrics: list[str]) -> str | None:
    """The primary metric: a metric ref (as in ``metrics``) naming one of the design's."""
    if value is None:
        return None
    try:
        (found,) = resolve_metric_refs([value], "primary")
    except ChukwaError as exc:  # named as the field itself, not as a list's first item
        raise invalid(exc.code, "primary", exc.message.split(": ", 1)[-1]) from None
    if found["hash"] not in metrics:
        raise invalid(
            "invalid_primary", "primary", "must be one of the design's metrics (as in metrics)"
        )
    return str(found["hash"])


def check_world_count(arms: int, replicates: int, field: str) -> None:
    if arms * replicates > MAX_WORLDS:
        raise invalid(
            "too_many_worlds",
            field,
            f"{arms} arms by {replicates} replicates is {arms * replicates} worlds; "
            f"at most {MAX_WORLDS}",
        )


def check_slug_length(experiment: str, labels: list[str], replicates: int, field: str) -> None:
    longest = max((world_slug(experiment, label, replicates) for label in labels), key=len)
    if len(longest) > SLUG_MAX:
        raise invalid(
            "slug_too_long",
            field,
            f"world slug {longest!r} would be longer than {SLUG_MAX} characters",
        )


def _arm(
    value: Any, where: str, earlier: list[Arm], slug: str, replicates: int, turns: range
) -> Arm:
    arm = require_object(value, where, "invalid_arms")
    check_keys(arm, where, required=ARM_REQUIRED, optional=ARM_OPTIONAL, code="invalid_input")
    label = arm["label"]
    problem = label_problem(label)
    if problem is not None:
        raise invalid("invalid_label", f"{where}.label", f"{label!r} {problem}")
    if any(a.label == label for a in earlier):
        raise invalid("duplicate_arm", f"{where}.label", f"arm {label!r} is named twice")
    check_slug_length(slug, [label], replicates, f"{where}.label")
    scenario_hash = _scenario(arm["scenario_ref"], f"{where}.scenario_ref")
    planned = arm.get("interventions", [])
    field = f"{where}.interventions"
    if not isinstance(planned, list):
        raise invalid("invalid_interventions", field, "must be an array")
    interventions = []
    for index, item in enumerate(planned):
        found = intervention_fields(item, f"{field}[{index}]", turn_required=True, turns=turns)
        assert found.turn is not None
        interventions.append(PlannedIntervention(found.turn, found.patch, found.note))
    return Arm(label, scenario_hash, tuple(interventions))


def _replay_from(value: Any, arms: list[Arm], replicates: int) -> tuple[ReplayFrom, int]:
    """``{"experiment": slug, "mode": replay_strict | replay_then_live}``: an experiment with a
    world for every arm and replicate of this design (each new world replays its pair)."""
    slug, mode = replay_ref(value, "experiment")
    old = Experiment.objects.filter(slug=slug).first()
    if old is None:
        raise invalid("invalid_replay_from", "replay_from.experiment", f"no experiment {slug!r}")
    have = set(World.objects.filter(experiment=old).values_list("arm", "replicate"))
    for arm in arms:
        for replicate in range(1, replicates + 1):
            if (arm.label, replicate) not in have:
                raise invalid(
                    "invalid_replay_from",
                    "replay_from.experiment",
                    f"experiment {slug!r} has no world for arm {arm.label!r}, replicate "
                    f"{replicate}: every world of a replay replays its pair",
                )
    return ReplayFrom(slug, mode), old.seed


def _budget(value: Any) -> Budget:
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
    return Budget(
        max_cost_total=None if cost is None else format(cost.normalize(), "f"),
        max_tokens_total=limits["max_tokens_total"],
    )


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
