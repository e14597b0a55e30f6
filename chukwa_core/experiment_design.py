"""An experiment's design as one frozen, typed value (docs/experiments.md, docs/architecture.md).

The design is parsed once — ``worlds_app.services.experiment_design.design_of`` checks a
request's rules and resolves every reference — into an ``ExperimentDesign``; everything else (the
experiment's reads and index, pages, CLI, MCP, the estimate, dispatch) reads this value and its
derived facts (first and last turn, measured turns, world slugs, planned counts, progress),
never the stored JSON by key. ``to_json``/``from_json`` are the one stored form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from chukwa_core.factorial import FactorialDesign, factorial_design

RUNNING, COMPLETED, FAILED, CANCELLED = "running", "completed", "failed", "cancelled"
STATUSES = (RUNNING, COMPLETED, FAILED, CANCELLED)

# The fields of a design as a request gives them (the API's input, the form, the CLI file):
# their one list, read by the design's parser and checked against the API serializer's fields.
INPUT_REQUIRED = ("slug", "replicates", "turns", "metrics")
INPUT_OPTIONAL = (
    "arms",  # exactly one of arms, or factors over a base (docs/designs.md)
    "base",
    "factors",
    "fraction",
    "stopping",
    "name",
    "description",
    "control",
    "seed",
    "start_time",
    "budget",
    "branch_from",
    "replay_from",
    "primary",
    "reuse",
    "mode",
)
# An experiment's ``mode`` (docs/costs.md, "Batch mode"): every call sent as it comes, or the
# worlds' LLM calls gathered into provider batches in lockstep ticks.
ONLINE, BATCH = "online", "batch"
EXPERIMENT_MODES = (ONLINE, BATCH)
ARM_REQUIRED = ("label", "scenario_ref")
ARM_OPTIONAL = ("interventions",)
BUDGET_LIMITS = ("max_cost_total", "max_tokens_total")


def world_slug(experiment: str, arm: str, replicate: int) -> str:
    """The slug of replicate ``replicate`` (1…R) of ``arm``: ``<experiment>--<arm>--<i>``."""
    return f"{experiment}--{arm}--{replicate}"


@dataclass(frozen=True)
class PlannedIntervention:
    """An operator's patch joining turn ``turn`` of every world of an arm."""

    turn: int
    patch: Mapping[str, Any]
    note: str = ""


@dataclass(frozen=True)
class Arm:
    label: str
    scenario_hash: str
    interventions: tuple[PlannedIntervention, ...] = ()


@dataclass(frozen=True)
class Budget:
    """One total over all the experiment's worlds and judges; cost a decimal string."""

    max_cost_total: str | None
    max_tokens_total: int | None


@dataclass(frozen=True)
class BranchFrom:
    world: str
    turn: int


@dataclass(frozen=True)
class ReplayFrom:
    experiment: str
    mode: str


@dataclass(frozen=True)
class Factorial:
    """Arms made from ``factors`` over ``base`` (docs/designs.md): the factors as validated
    (a level's ``fork`` the store's fork request without its parent), the fraction if any."""

    base_hash: str
    factors: Any  # the request's list, validated by chukwa_core.factorial.parse_factors
    fraction: str | None

    @property
    def design(self) -> FactorialDesign:
        return factorial_design(self.factors, self.fraction)

    def to_json(self) -> dict[str, Any]:
        design = self.design
        fraction = design.fraction
        return {
            "base": {"hash": self.base_hash},
            "factors": self.factors,
            "fraction": self.fraction,
            "resolution": None if fraction is None else fraction.resolution,
            "defining_relation": None
            if fraction is None
            else f"I = {'+' if fraction.sign > 0 else '-'}"
            + "".join(design.letters[n] for n in fraction.defining_word),
            "aliases": []
            if fraction is None
            else [
                [("-" if sign < 0 else "+") + ":".join(word) for sign, word in
                 zip(s.signs, s.words, strict=True)]
                for s in fraction.alias_sets
            ],
            "text": design.text(),
            "label_rule": design.label_rule,
            "arm_levels": {
                arm.label: dict(zip(design.names, arm.level_labels, strict=True))
                for arm in design.arms
            },
        }  # fmt: skip


@dataclass(frozen=True)
class Stopping:
    """Stopping early (docs/designs.md): after the first ``start`` replicates, then every
    ``every`` more up to ``max_replicates``, the anytime-valid paired test on ``metric`` (a
    hash) between ``treatment`` and the control at the last turn; stop when it rejects. A
    request gives the ``INPUT_*`` fields; ``start`` is the design's replicates then."""

    INPUT_REQUIRED: ClassVar[tuple[str, ...]] = ("metric", "alpha", "max_replicates", "every")
    INPUT_OPTIONAL: ClassVar[tuple[str, ...]] = ("treatment",)

    metric: str
    alpha: float
    max_replicates: int
    every: int
    start: int
    treatment: str

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "alpha": self.alpha,
            "max_replicates": self.max_replicates,
            "every": self.every,
            "start": self.start,
            "treatment": self.treatment,
        }


@dataclass(frozen=True)
class WorldProgress:
    """What a world's attempts say, as progress needs it."""

    current_turn: int
    pending: bool  # an attempt queued or running


@dataclass(frozen=True)
class Progress:
    status: str
    worlds: int
    turns_committed: int
    turns_planned: int
    measurements_done: int
    measurements_planned: int
    failed_worlds: int


@dataclass(frozen=True)
class ExperimentDesign:
    slug: str
    name: str
    description: str
    arms: tuple[Arm, ...]
    control: str
    replicates: int
    turns: int
    metrics: tuple[str, ...]  # metric hashes
    seed: int
    start_time: str | None = None
    budget: Budget | None = None
    branch_from: BranchFrom | None = None
    replay_from: ReplayFrom | None = None
    primary: str | None = None  # the primary metric's hash (its comparisons are flagged)
    # every world's ``reuse`` (docs/costs.md): "exact" (the default of a new experiment) | "off"
    reuse: str = "exact"
    # "online" (every call sent as it comes) | "batch" (lockstep ticks of provider batches)
    mode: str = ONLINE
    factorial: Factorial | None = None
    stopping: Stopping | None = None
    _labels: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_labels", tuple(a.label for a in self.arms))

    # -- derived facts ---------------------------------------------------------------------
    @property
    def first_turn(self) -> int:
        """The turn every world starts from: 0, or the branch's turn (the baseline)."""
        return self.branch_from.turn if self.branch_from is not None else 0

    @property
    def last_turn(self) -> int:
        return self.first_turn + self.turns

    @property
    def run_turns(self) -> range:
        """The turns each world runs (after the baseline): first_turn+1 … last_turn."""
        return range(self.first_turn + 1, self.last_turn + 1)

    @property
    def measured_turns(self) -> range:
        """The turns measured: the baseline and every turn run."""
        return range(self.first_turn, self.last_turn + 1)

    @property
    def arm_labels(self) -> tuple[str, ...]:
        return self._labels

    @property
    def treatment_arms(self) -> tuple[str, ...]:
        return tuple(label for label in self._labels if label != self.control)

    def arm(self, label: str) -> Arm:
        for arm in self.arms:
            if arm.label == label:
                return arm
        raise KeyError(label)

    @property
    def worlds_planned(self) -> int:
        return len(self.arms) * self.replicates

    @property
    def turns_planned(self) -> int:
        return self.worlds_planned * self.turns

    @property
    def measurements_planned(self) -> int:
        return self.worlds_planned * len(self.measured_turns) * len(self.metrics)

    def world_slug(self, arm: str, replicate: int) -> str:
        return world_slug(self.slug, arm, replicate)

    def world_slugs(self, replicates: Iterable[int] | None = None) -> list[str]:
        chosen = list(replicates) if replicates is not None else range(1, self.replicates + 1)
        return [self.world_slug(a.label, i) for a in self.arms for i in chosen]

    def world_finished(self, current_turn: int) -> bool:
        return current_turn >= self.last_turn

    def progress(
        self,
        worlds: Iterable[WorldProgress],
        *,
        measured: int,
        cancelled: bool,
        stopping_open: bool = False,
    ) -> Progress:
        """Status and progress from the worlds' attempts: ``running`` while any world has an
        attempt queued or running; else ``failed`` when some world stopped short of its last
        turn (the others went on), else ``completed``; ``cancelled`` once cancelled;
        ``running`` too while a stopping rule has not ended (``stopping_open``). Turns are
        counted from the first turn (a branch's turns before it are not the experiment's)."""
        rows = list(worlds)
        pending = any(w.pending for w in rows)
        failed = sum(1 for w in rows if not w.pending and w.current_turn < self.last_turn)
        if cancelled:
            status = CANCELLED
        elif pending or stopping_open:
            status = RUNNING
        else:
            status = FAILED if failed else COMPLETED
        return Progress(
            status=status,
            worlds=len(rows),
            turns_committed=sum(
                max(0, min(w.current_turn, self.last_turn) - self.first_turn) for w in rows
            ),
            turns_planned=len(rows) * self.turns,
            measurements_done=measured,
            measurements_planned=len(rows) * len(self.measured_turns) * len(self.metrics),
            failed_worlds=failed,
        )

    # -- changes after creation ------------------------------------------------------------
    def with_replicates(self, replicates: int) -> ExperimentDesign:
        return replace(self, replicates=replicates)

    def with_metrics(self, metrics: Iterable[str]) -> ExperimentDesign:
        added = tuple(m for m in dict.fromkeys(metrics) if m not in self.metrics)
        return replace(self, metrics=(*self.metrics, *added))

    # -- the stored form -------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The stored design (and the API's ``design``): every reference a hash."""
        found: dict[str, Any] = {
            "slug": self.slug,
            "name": self.name,
            "description": self.description,
            "arms": [
                {
                    "label": arm.label,
                    "scenario_ref": {"hash": arm.scenario_hash},
                    "interventions": [
                        {"turn": i.turn, "patch": dict(i.patch), "note": i.note}
                        for i in arm.interventions
                    ],
                }
                for arm in self.arms
            ],
            "control": self.control,
            "replicates": self.replicates,
            "turns": self.turns,
            "metrics": list(self.metrics),
            "seed": self.seed,
            "reuse": self.reuse,
        }
        if self.mode != ONLINE:  # designs stored before batch mode ran online
            found["mode"] = self.mode
        if self.start_time is not None:
            found["start_time"] = self.start_time
        if self.budget is not None:
            found["budget"] = {
                "max_cost_total": self.budget.max_cost_total,
                "max_tokens_total": self.budget.max_tokens_total,
            }
        if self.branch_from is not None:
            found["branch_from"] = {"world": self.branch_from.world, "turn": self.branch_from.turn}
            found["first_turn"] = self.first_turn
        if self.replay_from is not None:
            found["replay_from"] = {
                "experiment": self.replay_from.experiment,
                "mode": self.replay_from.mode,
            }
        if self.primary is not None:
            found["primary"] = self.primary
        if self.factorial is not None:
            found["factorial"] = self.factorial.to_json()
        if self.stopping is not None:
            found["stopping"] = self.stopping.to_json()
        return found

    def public_json(self) -> dict[str, Any]:
        """The design as reads show it (the API, a page's ``?format=json``): the stored form with
        every optional part present (null when not given) and ``first_turn``."""
        optional = {"start_time": None, "budget": None, "branch_from": None, "replay_from": None}
        return {
            **optional,
            "primary": None,
            "factorial": None,
            "stopping": None,
            "mode": ONLINE,
            **self.to_json(),
            "first_turn": self.first_turn,
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> ExperimentDesign:
        """The design as stored by ``to_json`` (validated when it was created)."""
        budget = stored.get("budget")
        branch = stored.get("branch_from")
        replay = stored.get("replay_from")
        factorial = stored.get("factorial")
        stopping = stored.get("stopping")
        return cls(
            slug=stored["slug"],
            name=stored.get("name") or stored["slug"],
            description=stored.get("description", ""),
            arms=tuple(
                Arm(
                    label=arm["label"],
                    scenario_hash=arm["scenario_ref"]["hash"],
                    interventions=tuple(
                        PlannedIntervention(i["turn"], i["patch"], i.get("note", ""))
                        for i in arm.get("interventions", [])
                    ),
                )
                for arm in stored["arms"]
            ),
            control=stored["control"],
            replicates=stored["replicates"],
            turns=stored["turns"],
            metrics=tuple(stored["metrics"]),
            seed=stored["seed"],
            start_time=stored.get("start_time"),
            budget=None
            if budget is None
            else Budget(budget.get("max_cost_total"), budget.get("max_tokens_total")),
            branch_from=None if branch is None else BranchFrom(branch["world"], branch["turn"]),
            replay_from=None
            if replay is None
            else ReplayFrom(replay["experiment"], replay["mode"]),
            primary=stored.get("primary"),
            # designs stored before reuse existed ran every call live
            reuse=stored.get("reuse", "off"),
            mode=stored.get("mode", ONLINE),
            factorial=None
            if factorial is None
            else Factorial(factorial["base"]["hash"], factorial["factors"], factorial["fraction"]),
            stopping=None if stopping is None else Stopping(**stopping),
        )
