"""The results of an experiment as typed values (docs/experiments.md, "Results, honestly"):
``worlds_app.experiment_results.experiment_results`` builds them; the API's serializers are
derived from these classes (``surfaces/api/typed_output.py``), and the page and the CLI table
read their attributes. A statistic added here is therefore in the API, its OpenAPI document and
MCP at once; only what shows it (a column of the page or the table) is written by hand.

A field's help text (``help`` in its metadata) becomes its description in the document; a
string that is a label or a hash says so by its type (``chukwa_core.ids.Label``, ``Hash``).

Pure: no Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chukwa_core.ids import Hash, Label


def doc(help_text: str) -> dict[str, Any]:
    """A field's metadata with its description in the API's document:
    ``field(metadata=doc("…"))``."""
    return {"help": help_text}


@dataclass(frozen=True)
class ResultMetric:
    """The metric a result is about, with the type and range its statistics respect."""

    hash: Hash
    label: Label
    aggregate: str = field(metadata=doc("how a world's per-turn values become its value"))
    type: str = field(
        metadata=doc("a world's value: binary, count, ordinal or continuous (after the aggregate)")
    )
    type_label: str = field(metadata=doc('the type as read: "binary (0 or 1)", "ordinal 1–5"'))
    type_basis: str = field(metadata=doc("declared by the metric, or how it was inferred"))
    range_low: float | None = field(metadata=doc("null: unbounded below"))
    range_high: float | None = field(metadata=doc("null: unbounded above"))
    turn_type_label: str = field(metadata=doc("one turn's value, before the aggregate"))
    primary: bool = field(metadata=doc("the design's primary metric"))
    added_after_creation: bool = field(
        metadata=doc("added to the experiment after it was created (not pre-registered)")
    )


@dataclass(frozen=True)
class TurnPoint:
    """One arm's values at one turn: the worlds measured then, their mean and a pointwise 95%
    interval inside the metric's range (null when there is no interval to show)."""

    turn: int
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class WorldValue:
    """One world's value of a metric."""

    replicate: int
    world: Label
    value: float | None = field(metadata=doc("null: missing (missing_reason says why)"))
    missing_reason: str | None = field(
        metadata=doc(
            "world_incomplete (stopped short of its last turn), world_running, metric_error "
            "(the metric erred on one of its turns), not_measured (a turn not measured yet)"
        )
    )


@dataclass(frozen=True)
class Missing:
    """How many worlds have no value, by reason."""

    world_incomplete: int
    world_running: int
    metric_error: int
    not_measured: int


@dataclass(frozen=True)
class ArmResult:
    """One arm's summary of a metric: its worlds' values, their mean and a 95% interval that
    never leaves the metric's range."""

    arm: Label
    n: int = field(metadata=doc("worlds with a value"))
    n_missing: int = field(metadata=doc("worlds without one (missing gives the reasons)"))
    missing: Missing
    mean: float | None
    sd: float | None
    ci_low: float | None = field(metadata=doc("null unless ci_status is shown"))
    ci_high: float | None
    ci_status: str = field(metadata=doc("shown, uninformative or unavailable"))
    ci_reason: str | None
    ci_method: str
    ci_library: str
    per_turn: tuple[TurnPoint, ...] = field(
        metadata=doc("from the baseline (turn 0, or a branch's turn) to the last planned turn")
    )
    worlds: tuple[WorldValue, ...] = field(metadata=doc("in replicate order"))


@dataclass(frozen=True)
class EffectSizeValue:
    name: str
    value: float | None
    method: str


@dataclass(frozen=True)
class Effect:
    """A treatment arm against control over complete pairs (replicate i of each arm shares a
    seed): the difference with its interval, the type's test, effect sizes, Holm's adjusted p."""

    arm: Label
    control: Label
    n_pairs: int = field(metadata=doc("replicates with a value in both arms"))
    n_dropped: int = field(metadata=doc("replicates with a value in one arm only"))
    control_mean: float | None = field(metadata=doc("control's mean over the complete pairs"))
    treatment_mean: float | None = field(metadata=doc("the arm's mean over the complete pairs"))
    difference: float | None = field(metadata=doc("treatment minus control, complete pairs"))
    ci_low: float | None = field(metadata=doc("null unless ci_status is shown"))
    ci_high: float | None
    ci_status: str = field(
        metadata=doc(
            "shown; withheld (it would contradict the row's p); uninformative (no variation); "
            "unavailable (too few pairs)"
        )
    )
    ci_reason: str | None
    ci_method: str
    ci_library: str
    p_value: float | None = field(metadata=doc("two-sided, as the test computed it"))
    p_display: str = field(metadata=doc('as shown: "0.031", "< 0.0001" at a resampling floor'))
    p_holm: float | None = field(
        metadata=doc("Holm-adjusted over every (arm, metric) comparison of the experiment")
    )
    p_method: str
    p_library: str
    p_exact: bool = field(metadata=doc("false: Monte Carlo (resamples, seed, its standard error)"))
    p_resamples: int | None
    p_seed: int | None
    p_monte_carlo_se: float | None
    can_reach_significance: bool = field(
        metadata=doc("false: with this many pairs the test cannot give p < 0.05 whatever the data")
    )
    note: str | None = field(metadata=doc("what a reader should know about this row"))
    effect_sizes: tuple[EffectSizeValue, ...]
    primary: bool = field(metadata=doc("a comparison of the design's primary metric"))
    added_after_creation: bool = field(
        metadata=doc("computed with replicates or a metric added after the experiment was created")
    )


@dataclass(frozen=True)
class TurnRow:
    """One turn of a metric's per-turn table: each arm's point, in the arms' order."""

    turn: int
    points: tuple[TurnPoint, ...]


@dataclass(frozen=True)
class PeopleDistance:
    """One arm's worlds against the people's values of the same metric (two independent
    samples: the worlds' values, the people's)."""

    arm: Label
    n_worlds: int = field(metadata=doc("worlds of the arm with a value"))
    n_people: int = field(metadata=doc("people's values of the metric"))
    worlds_mean: float | None
    people_mean: float | None
    difference: float | None = field(metadata=doc("the worlds' mean minus the people's"))
    ci_low: float | None = field(metadata=doc("95% interval of the difference (Welch)"))
    ci_high: float | None
    ci_method: str
    ks_statistic: float | None = field(metadata=doc("two-sample Kolmogorov–Smirnov D"))
    ks_p: float | None = field(metadata=doc("its two-sided p"))
    ks_method: str
    wasserstein: float | None = field(metadata=doc("Wasserstein (earth mover's) distance"))
    wasserstein_ci_low: float | None = field(
        metadata=doc(
            "95% bootstrap interval of the distance as measured; it never covers 0 (the plug-in "
            "distance is biased up), so test sameness with wasserstein_p"
        )
    )
    wasserstein_ci_high: float | None
    wasserstein_method: str
    wasserstein_p: float | None = field(
        metadata=doc("permutation p of 'worlds and people come from one distribution'")
    )
    wasserstein_p_method: str
    library: str
    note: str | None = field(metadata=doc("why a figure is missing, when one is"))


@dataclass(frozen=True)
class PeopleReference:
    """The people's values of one metric (uploaded to the experiment) and each arm's distance
    from them."""

    n: int
    mean: float | None
    sd: float | None
    distances: tuple[PeopleDistance, ...] = field(metadata=doc("one per arm, in the arms' order"))


@dataclass(frozen=True)
class MetricResult:
    """One metric: every arm's summary and every treatment arm's effect against control."""

    metric: ResultMetric
    arms: tuple[ArmResult, ...]
    effects: tuple[Effect, ...] = field(
        metadata=doc("one per treatment arm; none with a single arm")
    )
    per_turn_ci_method: str = field(metadata=doc("the per-turn intervals: pointwise, this method"))
    people: PeopleReference | None = field(
        default=None, metadata=doc("null: no people's values of this metric were uploaded")
    )

    @property
    def turn_rows(self) -> tuple[TurnRow, ...]:
        """The per-turn points turn by turn (a table's rows, one column per arm)."""
        turns = sorted({p.turn for arm in self.arms for p in arm.per_turn})
        return tuple(
            TurnRow(n, tuple(p for arm in self.arms for p in arm.per_turn if p.turn == n))
            for n in turns
        )

    @property
    def has_values(self) -> bool:
        return any(p.mean is not None for arm in self.arms for p in arm.per_turn)


@dataclass(frozen=True)
class HistoryEntry:
    """A change made after the experiment was created (what was decided after looking)."""

    at: str = field(metadata=doc("when, ISO 8601"))
    change: str = field(metadata=doc("replicates or metrics"))
    detail: str
    by: str


@dataclass(frozen=True)
class Software:
    chukwa: str
    python: str
    numpy: str
    scipy: str
    statsmodels: str


@dataclass(frozen=True)
class FactorialEffect:
    """A main effect or interaction of a factorial design (effect coding: a two-level factor's
    first level -1, its second +1): the regression's coefficient, and for two-level terms the
    high-minus-low contrast (twice it), each with a 95% interval."""

    term: str = field(metadata=doc('"thirst", or an interaction "thirst:fountain"'))
    order: int = field(metadata=doc("1 a main effect, 2 a two-factor interaction, …"))
    coefficient: float | None
    ci_low: float | None = field(metadata=doc("the coefficient's; null unless ci_status shown"))
    ci_high: float | None
    contrast: float | None = field(
        metadata=doc("high minus low (2·coefficient), two-level terms only")
    )
    contrast_ci_low: float | None
    contrast_ci_high: float | None
    p_value: float | None = field(metadata=doc("two-sided, t on replicates - 1 df"))
    ci_status: str = field(metadata=doc("shown or unavailable"))
    ci_reason: str | None
    aliases: tuple[str, ...] = field(
        metadata=doc("a fraction: the signed effects this one cannot be told apart from")
    )


@dataclass(frozen=True)
class FactorialCell:
    """One arm of a factorial design: its levels (in the factors' order) and its mean."""

    arm: Label
    levels: tuple[str, ...]
    n: int
    mean: float | None


@dataclass(frozen=True)
class FactorialResult:
    """One metric's main effects and interactions, from one regression of the worlds' values on
    the effect-coded factors with standard errors clustered by replicate."""

    metric: Hash
    label: Label
    factors: tuple[str, ...]
    scale: str = field(metadata=doc('what a coefficient is on: "mean" or "log-odds"'))
    method: str
    library: str
    n_worlds: int
    n_replicates: int = field(metadata=doc("clusters (G); intervals use t on G - 1 df"))
    intercept: float | None
    effects: tuple[FactorialEffect, ...] = field(metadata=doc("lowest order first"))
    cells: tuple[FactorialCell, ...] = field(metadata=doc("the interaction plot's points"))
    note: str | None


@dataclass(frozen=True)
class StoppingLook:
    """One look of a stopping rule: after ``replicates`` replicates, the e-value against its
    boundary 1/alpha and what was decided."""

    replicates: int
    pairs: int = field(metadata=doc("complete pairs among them"))
    e_value: float
    log_e_value: float
    boundary: float = field(metadata=doc("1/alpha: reject at e ≥ boundary"))
    decision: str = field(metadata=doc("rejected, continue or max_reached"))


@dataclass(frozen=True)
class StoppingResult:
    """The stopping rule's path: every look taken so far, and why the experiment ended."""

    test: str = field(metadata=doc("the anytime-valid paired test, named"))
    null: str
    metric: Hash
    treatment: Label
    alpha: float
    every: int
    max_replicates: int
    looks: tuple[StoppingLook, ...]
    reason: str | None = field(
        metadata=doc("stopped_early or max_replicates; null while the rule goes on")
    )


@dataclass(frozen=True)
class ExperimentResults:
    """An experiment's results: one entry per metric of its design, in the design's order."""

    experiment: Label
    control: Label
    results: tuple[MetricResult, ...]
    registered_hash: str = field(
        metadata=doc("the hash of the design as created (its pre-registration), frozen")
    )
    history: tuple[HistoryEntry, ...] = field(
        metadata=doc("replicates and metrics added after creation, in order")
    )
    multiplicity: str = field(metadata=doc("how p_holm was adjusted, over which comparisons"))
    missing_data: str = field(metadata=doc("the rule that makes a world's value missing"))
    methods: str = field(metadata=doc("a paragraph naming the design and every method, to paste"))
    software: Software
    design_text: str | None = field(
        default=None,
        metadata=doc("a factorial design: its arms, fraction, resolution and aliases as text"),
    )
    factorial: tuple[FactorialResult, ...] = field(
        default=(), metadata=doc("a factorial design: one per metric, in the design's order")
    )
    stopping: StoppingResult | None = field(
        default=None, metadata=doc("a stopping rule: its looks and the reason it ended")
    )
