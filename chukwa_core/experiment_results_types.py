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
    """The metric a result is about."""

    hash: Hash
    label: Label
    aggregate: str = field(metadata=doc("how a world's per-turn values become its value"))


@dataclass(frozen=True)
class TurnPoint:
    """One arm's values at one turn: the worlds measured then, their mean and 95% CI."""

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
    value: float | None = field(
        metadata=doc("null: the world failed, or the metric erred on every turn it ran")
    )


@dataclass(frozen=True)
class ArmResult:
    """One arm's summary of a metric: its worlds' values, their mean and 95% CI."""

    arm: Label
    n: int = field(metadata=doc("worlds with a value"))
    n_missing: int = field(
        metadata=doc("failed worlds, and worlds whose metric erred on every turn")
    )
    mean: float | None
    sd: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str
    per_turn: tuple[TurnPoint, ...] = field(
        metadata=doc("from the baseline (turn 0, or a branch's turn) to the last planned turn")
    )
    worlds: tuple[WorldValue, ...] = field(metadata=doc("in replicate order"))


@dataclass(frozen=True)
class Effect:
    """A treatment arm against control: the paired difference, replicate by replicate."""

    arm: Label
    control: Label
    n_pairs: int = field(metadata=doc("replicates with a value in both arms"))
    difference: float | None = field(metadata=doc("the mean of treatment minus control"))
    ci_low: float | None
    ci_high: float | None
    ci_method: str
    p_value: float | None = field(metadata=doc("two-sided"))
    p_method: str


@dataclass(frozen=True)
class TurnRow:
    """One turn of a metric's per-turn table: each arm's point, in the arms' order."""

    turn: int
    points: tuple[TurnPoint, ...]


@dataclass(frozen=True)
class MetricResult:
    """One metric: every arm's summary and every treatment arm's effect against control."""

    metric: ResultMetric
    arms: tuple[ArmResult, ...]
    effects: tuple[Effect, ...] = field(
        metadata=doc("one per treatment arm; none with a single arm")
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
class ExperimentResults:
    """An experiment's results: one entry per metric of its design, in the design's order."""

    experiment: Label
    control: Label
    results: tuple[MetricResult, ...]
