"""An experiment's measurements grouped for its results, in numpy (``experiment_results``): one
query's rows as arrays, then per metric each arm's values by turn and each world's value.

The rows are put in one order, whatever plan PostgreSQL chose: by world, then turn, then the
row's id (the order it was written; several rows share a turn only for a survey, one per
agent). Every grouping keeps it, so every figure computed from them is the same to the last
bit from one reading to the next: an arm's values of one turn by world, a world's values by
turn. (The order is the one the world-id index scan used before gave these groupings.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from django.db import connection

from chukwa_core.metric_values import aggregate

# Every measurement of the worlds, metrics and turns asked for, each column packed by
# PostgreSQL into one binary string (its own binary form of each value, big-endian): one row
# travels instead of one per measurement, and numpy reads each column as an array.
MEASUREMENTS_SQL = (
    "SELECT string_agg(int2send((array_position(%s::text[], metric_id::text) - 1)::int2), "
    "''::bytea), string_agg(int8send(world_id), ''::bytea), "
    "string_agg(int4send(turn_number), ''::bytea), string_agg(boolsend(value IS NULL), ''::bytea), "
    "string_agg(float8send(coalesce(value, 0)), ''::bytea), string_agg(int8send(id), ''::bytea) "
    "FROM worlds_app_measurement WHERE world_id = ANY(%s) AND metric_id = ANY(%s) "
    "AND turn_number >= %s AND turn_number <= %s"
)
# The columns' names and numpy types, in the statement's order.
_COLUMNS = (
    ("metric", ">i2"),
    ("world", ">i8"),
    ("turn", ">i4"),
    ("erred", "u1"),
    ("value", ">f8"),
    ("id", ">i8"),
)


@dataclass(frozen=True)
class MetricRows:
    """One metric's measurements, by world, then turn, then id."""

    world: np.ndarray  # int64 world ids
    turn: np.ndarray  # int64 turn numbers
    value: np.ndarray  # float64; 0 where the metric erred
    erred: np.ndarray  # bool: no value (the metric erred on that turn)


def read_rows(hashes: Sequence[str], world_ids: Sequence[int], turns: range) -> list[MetricRows]:
    """The measurements of ``world_ids`` on ``turns`` of each metric of ``hashes``, in one
    statement (read in binary: the packed columns as bytes)."""
    connection.ensure_connection()
    # psycopg's errors raised as Django's (an outage is then a 503, as on every other read)
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            MEASUREMENTS_SQL,
            [list(hashes), list(world_ids), list(hashes), turns.start, turns.stop - 1],
            binary=True,
        )
        packed = cursor.fetchone()
    assert packed is not None  # an aggregate's one row
    columns = {
        name: np.frombuffer(data or b"", dtype=kind).astype(kind.replace(">", "="))
        for (name, kind), data in zip(_COLUMNS, packed, strict=True)
    }
    return split_rows(columns, len(hashes))


def split_rows(columns: Mapping[str, np.ndarray], metrics: int) -> list[MetricRows]:
    """The columns (``metric``: the metric's index, ``world``, ``turn``, ``erred``, ``value``,
    ``id``) sorted and split by metric."""
    order = np.lexsort((columns["id"], columns["turn"], columns["world"], columns["metric"]))
    metric = columns["metric"][order]
    bounds = np.searchsorted(metric, np.arange(metrics + 1))
    world = columns["world"][order].astype(np.int64)
    turn = columns["turn"][order].astype(np.int64)
    value = columns["value"][order].astype(np.float64)
    erred = columns["erred"][order] != 0
    return [
        MetricRows(world[start:end], turn[start:end], value[start:end], erred[start:end])
        for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    ]


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
    """Each arm's values (errors left out) by turn, in row order (by world)."""
    found: dict[str, dict[int, list[float]]] = {name: {} for name in arms}
    if len(rows.world) == 0:
        return found
    order = np.flatnonzero(~rows.erred & (arm >= 0))
    order = order[np.lexsort((order, rows.turn[order], arm[order]))]
    turns, arms_of, values = rows.turn[order], arm[order], rows.value[order]
    bounds = _segments(arms_of, turns)
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        found[arms[int(arms_of[start])]][int(turns[start])] = values[start:end].tolist()
    return found


@dataclass(frozen=True)
class WorldTurns:
    """The measurements over the turns each world was to run, of the worlds that have one."""

    worlds: np.ndarray  # int64 world ids, ascending
    turns: np.ndarray  # distinct turns measured, by world
    erred: np.ndarray  # bool: the metric erred on one of them
    bounds: np.ndarray  # world i's values are values[bounds[i]:bounds[i + 1]]
    values: list[float]  # by world, then turn, then row (meaningless for an erred world)

    def find(self, world_ids: np.ndarray) -> np.ndarray:
        """Each world's index here, -1 for one without a measurement."""
        if len(self.worlds) == 0:
            return np.full(len(world_ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.worlds, world_ids), len(self.worlds) - 1)
        return np.where(self.worlds[at] == world_ids, at, -1)


def world_turns(rows: MetricRows, run: range) -> WorldTurns:
    """Per world that has a row on a turn of ``run`` (consecutive turns)."""
    inside = (rows.turn >= run.start) & (rows.turn < run.stop)
    worlds, turns = rows.world[inside], rows.turn[inside]
    bounds = _segments(worlds)
    if len(worlds) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return WorldTurns(empty, empty, np.zeros(0, dtype=bool), bounds, [])
    turn_starts = _segments(worlds, turns)[:-1]
    return WorldTurns(
        worlds[bounds[:-1]],
        np.diff(np.searchsorted(turn_starts, bounds)),
        np.logical_or.reduceat(rows.erred[inside], bounds[:-1]),
        bounds,
        rows.value[inside].tolist(),  # an erred world's placeholders are never aggregated
    )


def world_values(
    worlds: Sequence[Mapping[str, Any]],
    measured: WorldTurns,
    run: range,
    last_turn: int,
    aggregate_kind: str,
) -> list[tuple[float | None, str | None]]:
    """Each world's value, or why it has none: only a world that ran every planned turn with
    every turn measured without error has a value (a survey's turn pools one value per
    agent)."""
    found = measured.find(np.array([world["id"] for world in worlds], dtype=np.int64))
    index, turns, erred = found.tolist(), measured.turns.tolist(), measured.erred.tolist()
    bounds, values, planned = measured.bounds.tolist(), measured.values, len(run)
    out: list[tuple[float | None, str | None]] = []
    for world, i in zip(worlds, index, strict=True):
        if world["current_turn"] < last_turn:
            out.append((None, "world_running" if world["pending"] else "world_incomplete"))
        elif i >= 0 and erred[i]:
            out.append((None, "metric_error"))
        elif (0 if i < 0 else turns[i]) < planned:
            out.append((None, "not_measured"))
        else:
            mine = values[bounds[i] : bounds[i + 1]] if i >= 0 else []
            out.append((aggregate(aggregate_kind, mine), None))
    return out
