"""An experiment's measurements grouped for its results, in numpy (``experiment_results``): one
query's rows as arrays, then per metric each arm's values by turn and each world's value.

The groupings keep the order the per-row Python loop they replace had, so every figure computed
from them is the same to the last bit: an arm's values of one turn in the order their worlds
first appear among the rows (then row order), a world's values by turn then row order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chukwa_core.metric_values import aggregate


@dataclass(frozen=True)
class MetricRows:
    """One metric's measurements in the order the database returned them."""

    world: np.ndarray  # int64 world ids
    turn: np.ndarray  # int64 turn numbers
    value: np.ndarray  # float64; 0 where the metric erred
    erred: np.ndarray  # bool: no value (the metric erred on that turn)


def rows_by_metric(
    rows: Sequence[tuple[int, int, int, bool, float]], metrics: int
) -> list[MetricRows]:
    """``rows`` of (metric's index, world id, turn, erred, value or 0), split by metric."""
    table = np.array(rows, dtype=float).reshape(-1, 5)
    index = table[:, 0].astype(np.int64)
    split = []
    for metric in range(metrics):
        mine = table[index == metric]
        split.append(
            MetricRows(
                mine[:, 1].astype(np.int64),
                mine[:, 2].astype(np.int64),
                mine[:, 4].copy(),
                mine[:, 3] != 0,
            )
        )
    return split


def _segments(*keys: np.ndarray) -> np.ndarray:
    """The start of every run of equal keys in sorted arrays, and their end (len) last."""
    if len(keys[0]) == 0:
        return np.array([0], dtype=np.int64)
    changed = np.zeros(len(keys[0]) - 1, dtype=bool)
    for key in keys:
        changed |= key[1:] != key[:-1]
    return np.concatenate(([0], np.flatnonzero(changed) + 1, [len(keys[0])]))


def arm_codes(rows: MetricRows, arm_of: Mapping[int, str], arms: Sequence[str]) -> np.ndarray:
    """Each row's arm as its index in ``arms``; -1 for an arm the design does not list."""
    ids = np.array(sorted(arm_of), dtype=np.int64)
    position = {arm: i for i, arm in enumerate(arms)}
    codes = np.array([position.get(arm_of[int(i)], -1) for i in ids], dtype=np.int64)
    if len(rows.world) == 0:
        return np.zeros(0, dtype=np.int64)
    return codes[np.searchsorted(ids, rows.world)]


def by_turn(
    rows: MetricRows, arm: np.ndarray, arms: Sequence[str]
) -> dict[str, dict[int, list[float]]]:
    """Each arm's values (errors left out) by turn, the worlds in the order they first appear
    among the rows, each world's values in row order."""
    found: dict[str, dict[int, list[float]]] = {name: {} for name in arms}
    if len(rows.world) == 0:
        return found
    _, first, inverse = np.unique(rows.world, return_index=True, return_inverse=True)
    order = np.argsort(first[inverse], kind="stable")
    order = order[~rows.erred[order] & (arm[order] >= 0)]
    order = order[np.lexsort((np.arange(len(order)), rows.turn[order], arm[order]))]
    turns, arms_of, values = rows.turn[order], arm[order], rows.value[order]
    bounds = _segments(arms_of, turns)
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        found[arms[int(arms_of[start])]][int(turns[start])] = values[start:end].tolist()
    return found


@dataclass(frozen=True)
class WorldTurns:
    """A world's measurements over the turns it was to run."""

    turns: int  # distinct turns measured
    erred: bool  # the metric erred on one of them
    values: list[float]  # by turn, then row order (meaningless when erred)


def world_turns(rows: MetricRows, run: range) -> dict[int, WorldTurns]:
    """Per world that has a row on a turn of ``run`` (consecutive turns)."""
    inside = np.flatnonzero((rows.turn >= run.start) & (rows.turn < run.stop))
    order = inside[np.lexsort((inside, rows.turn[inside], rows.world[inside]))]
    worlds, turns = rows.world[order], rows.turn[order]
    values, erred = rows.value[order], rows.erred[order]
    found: dict[int, WorldTurns] = {}
    if len(order) == 0:
        return found
    world_bounds = _segments(worlds)
    turn_starts = _segments(worlds, turns)[:-1]
    distinct = np.diff(np.searchsorted(turn_starts, world_bounds))
    any_erred = np.logical_or.reduceat(erred, world_bounds[:-1])
    listed = values.tolist()  # an erred world's placeholders are never aggregated
    starts, ends = world_bounds[:-1].tolist(), world_bounds[1:].tolist()
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        found[int(worlds[start])] = WorldTurns(
            int(distinct[i]), bool(any_erred[i]), listed[start:end]
        )
    return found


def world_value(
    world: Mapping[str, Any],
    measured: WorldTurns | None,
    run: range,
    last_turn: int,
    aggregate_kind: str,
) -> tuple[float | None, str | None]:
    """A world's value, or why it has none: only a world that ran every planned turn with every
    turn measured without error has a value (a survey's turn pools one value per agent)."""
    if world["current_turn"] < last_turn:
        return None, "world_running" if world["pending"] else "world_incomplete"
    if measured is not None and measured.erred:
        return None, "metric_error"
    if (0 if measured is None else measured.turns) < len(run):
        return None, "not_measured"
    return aggregate(aggregate_kind, [] if measured is None else measured.values), None
