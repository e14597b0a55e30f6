"""Populations (docs/populations.md): agents drawn over named axes with a known coverage.

A population's content names its axes (categorical with weights, or numeric ranges with an
optional marginal table to match), a size, a sampler (``sobol``: scrambled Sobol points from
``scipy.stats.qmc``; ``random``: numpy's PCG64), a seed and an entity template. Drawing is a
pure function of the content: the same content gives the same points, the same agents, and so
the same entity and scenario hashes. Each agent's point in the unit cube is mapped to axis values
by the inverse of each axis's distribution (cumulative weights, a range, or its marginal table).

Pure: no Django.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import qmc

from chukwa_core.component_validation import check_keys, require_object, type_name
from chukwa_core.errors import invalid
from chukwa_core.ids import is_hash, is_label
from chukwa_core.statistics.libraries import library

SAMPLERS = ("sobol", "random")
MAX_SIZE = 10_000
MAX_AXES = 20
MAX_SEED = 2**53
TEMPLATE_FIELDS = ("id", "name", "state", "goal", "memory")
COVERAGE_METHOD = "centered L2-discrepancy of the unit-cube points (scipy.stats.qmc.discrepancy, method CD); lower is more even"
UNIFORM_BINS = 4
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
CODE = "invalid_population"
MAX_BIOGRAPHY = 4000
MAX_BIOGRAPHY_PROMPT = 4000


@dataclass(frozen=True)
class Axis:
    name: str
    categories: tuple[tuple[str, float], ...] = ()  # (value, weight) in the given order
    low: float = 0.0
    high: float = 0.0
    integer: bool = False
    marginal: tuple[tuple[float, float, float], ...] = ()  # (low, high, share)

    @property
    def categorical(self) -> bool:
        return bool(self.categories)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(CODE, field, f"must be a finite number, got {type_name(value)}")
    return float(value)


def _axis(raw: Any, field: str) -> Axis:
    axis = require_object(raw, field, CODE)
    name = axis.get("name")
    if not isinstance(name, str) or not is_label(name):
        raise invalid(CODE, f"{field}.name", "must be a label (a-z, 0-9, _ and -)")
    if "categories" in axis:
        check_keys(axis, field, required=("name", "categories"), code=CODE)
        items = axis["categories"]
        if not isinstance(items, list) or not items:
            raise invalid(CODE, f"{field}.categories", "must be a non-empty array")
        found: list[tuple[str, float]] = []
        for i, item in enumerate(items):
            at = f"{field}.categories[{i}]"
            check_keys(require_object(item, at, CODE), at, required=("value", "weight"), code=CODE)
            value, weight = item["value"], _number(item["weight"], f"{at}.weight")
            if not isinstance(value, str) or not value.strip():
                raise invalid(CODE, f"{at}.value", "must be non-empty text")
            if weight <= 0:
                raise invalid(CODE, f"{at}.weight", "must be greater than 0")
            if value in (v for v, _ in found):
                raise invalid(CODE, f"{at}.value", f"{value!r} is listed twice")
            found.append((value, weight))
        return Axis(name=name, categories=tuple(found))
    check_keys(axis, field, required=("name", "range"), optional=("integer", "marginal"), code=CODE)
    bounds = axis["range"]
    if not isinstance(bounds, list) or len(bounds) != 2:
        raise invalid(CODE, f"{field}.range", "must be [low, high]")
    low, high = (_number(b, f"{field}.range[{i}]") for i, b in enumerate(bounds))
    if not low < high:
        raise invalid(CODE, f"{field}.range", "low must be less than high")
    integer = axis.get("integer", False)
    if not isinstance(integer, bool):
        raise invalid(CODE, f"{field}.integer", "must be true or false")
    bins: list[tuple[float, float, float]] = []
    if "marginal" in axis:
        table = axis["marginal"]
        if not isinstance(table, list) or not table:
            raise invalid(CODE, f"{field}.marginal", "must be a non-empty array of bins")
        edge = low
        for i, item in enumerate(table):
            at = f"{field}.marginal[{i}]"
            check_keys(
                require_object(item, at, CODE), at, required=("low", "high", "share"), code=CODE
            )
            b_low, b_high = _number(item["low"], f"{at}.low"), _number(item["high"], f"{at}.high")
            share = _number(item["share"], f"{at}.share")
            if b_low != edge or not b_low < b_high:
                raise invalid(CODE, at, f"bins must run without gaps from {low} to {high}")
            if share < 0:
                raise invalid(CODE, f"{at}.share", "must be at least 0")
            bins.append((b_low, b_high, share))
            edge = b_high
        if edge != high:
            raise invalid(CODE, f"{field}.marginal", f"the last bin must end at {high}")
        if abs(sum(s for _, _, s in bins) - 1) > 1e-9:
            raise invalid(CODE, f"{field}.marginal", "the shares must add up to 1")
    return Axis(name=name, low=low, high=high, integer=integer, marginal=tuple(bins))


def _template(raw: Any, field: str, axes: Sequence[Axis], *, biographies: bool) -> None:
    template = require_object(raw, field, CODE)
    check_keys(template, field, required=TEMPLATE_FIELDS, code=CODE)
    names = {a.name for a in axes}
    for key in TEMPLATE_FIELDS:
        text = template[key]
        if not isinstance(text, str):
            raise invalid(CODE, f"{field}.{key}", f"must be text, got {type_name(text)}")
        for found in _PLACEHOLDER.findall(text):
            if found == "index" or (found.startswith("axes.") and found[5:] in names):
                continue
            if found == "biography":
                if biographies:
                    continue
                raise invalid(
                    "biography_unsupported",
                    f"{field}.{key}",
                    "{{biography}} needs a population with biographies: write them with "
                    "POST /api/populations/<hash>/biographies/ (an LLM source, one call per "
                    "agent), which stores a new version that may use {{biography}}",
                )
            raise invalid(
                CODE,
                f"{field}.{key}",
                f"unknown placeholder {{{{{found}}}}}; use {{{{index}}}} or "
                f"{{{{axes.<name>}}}} with one of: {', '.join(sorted(names))}",
            )
    if "{{" not in template["id"]:
        raise invalid(CODE, f"{field}.id", "must contain {{index}} or an axis, to be unique")


def placeholders_problem(text: str, content: Mapping[str, Any]) -> str | None:
    """Why ``text`` (a biography prompt) cannot be rendered for the population's agents: an
    unknown placeholder (only ``{{index}}`` and ``{{axes.<name>}}``); None when it can."""
    names = {a["name"] for a in content["axes"]}
    for found in _PLACEHOLDER.findall(text):
        if found == "index" or (found.startswith("axes.") and found[5:] in names):
            continue
        return (
            f"unknown placeholder {{{{{found}}}}}; use {{{{index}}}} or {{{{axes.<name>}}}} "
            f"with one of: {', '.join(sorted(names))}"
        )
    return None


def validate_population(content: Any, field: str = "content") -> dict[str, Any]:
    """The content, checked (a 400 naming the field otherwise); returned as it is hashed."""
    body = require_object(content, field, CODE)
    check_keys(
        body,
        field,
        required=("version", "label", "size", "sampler", "seed", "axes", "entity_template"),
        optional=("biographies",),
        code=CODE,
    )
    if body["version"] != 1 or isinstance(body["version"], bool):
        raise invalid(CODE, f"{field}.version", "must be 1")
    if not is_label(body["label"]):
        raise invalid(CODE, f"{field}.label", "must be a label (a-z, 0-9, _ and -)")
    size = body["size"]
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise invalid(CODE, f"{field}.size", f"must be an integer from 1 to {MAX_SIZE}")
    if body["sampler"] not in SAMPLERS:
        raise invalid(CODE, f"{field}.sampler", f"must be one of {', '.join(SAMPLERS)}")
    seed = body["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED:
        raise invalid(CODE, f"{field}.seed", "must be an integer, 0 ≤ seed < 2^53")
    raw_axes = body["axes"]
    if not isinstance(raw_axes, list) or not 1 <= len(raw_axes) <= MAX_AXES:
        raise invalid(CODE, f"{field}.axes", f"must be an array of 1 to {MAX_AXES} axes")
    axes = [_axis(a, f"{field}.axes[{i}]") for i, a in enumerate(raw_axes)]
    seen: set[str] = set()
    for i, axis in enumerate(axes):
        if axis.name in seen:
            raise invalid(CODE, f"{field}.axes[{i}].name", f"{axis.name!r} is named twice")
        seen.add(axis.name)
    if "biographies" in body:
        _biographies(body["biographies"], f"{field}.biographies", size)
    _template(
        body["entity_template"],
        f"{field}.entity_template",
        axes,
        biographies="biographies" in body,
    )
    return dict(body)


def _biographies(raw: Any, field: str, size: int) -> None:
    """``{"source": {"hash": H}, "prompt": text, "texts": [one per agent]}``: what an LLM
    source wrote for each agent (``POST /api/populations/<hash>/biographies/``), kept in the
    content so the version's hash covers them and assembly never asks a model."""
    body = require_object(raw, field, CODE)
    check_keys(body, field, required=("source", "prompt", "texts"), code=CODE)
    source = require_object(body["source"], f"{field}.source", CODE)
    check_keys(source, f"{field}.source", required=("hash",), code=CODE)
    if not is_hash(source["hash"]):
        raise invalid(CODE, f"{field}.source.hash", "must be a 64-hex hash")
    prompt = body["prompt"]
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > MAX_BIOGRAPHY_PROMPT:
        raise invalid(
            CODE, f"{field}.prompt", f"must be non-empty text of at most {MAX_BIOGRAPHY_PROMPT}"
        )
    texts = body["texts"]
    if not isinstance(texts, list) or len(texts) != size:
        raise invalid(CODE, f"{field}.texts", f"must list one biography per agent ({size})")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_BIOGRAPHY:
            raise invalid(
                CODE,
                f"{field}.texts[{i}]",
                f"must be non-empty text of at most {MAX_BIOGRAPHY} characters",
            )


def biography_of(content: Mapping[str, Any], index: int) -> str | None:
    """Agent ``index``'s (1…size) written biography, or None when the content has none."""
    found = content.get("biographies")
    return None if found is None else str(found["texts"][index - 1])


def axes_of(content: Mapping[str, Any]) -> list[Axis]:
    return [_axis(a, f"axes[{i}]") for i, a in enumerate(content["axes"])]


def unit_points(content: Mapping[str, Any]) -> np.ndarray:
    """The sample in the unit cube, one row per agent, one column per axis."""
    size, dims, seed = content["size"], len(content["axes"]), content["seed"]
    if content["sampler"] == "random":
        return np.random.default_rng(seed).random((size, dims))
    sobol = qmc.Sobol(d=dims, scramble=True, rng=np.random.default_rng(seed))
    with warnings.catch_warnings():
        # Sobol's balance holds for powers of 2; any size is allowed, its coverage measured.
        warnings.filterwarnings("ignore", message=".*balance properties.*")
        return sobol.random(size)


def _continuous(axis: Axis, u: np.ndarray) -> np.ndarray:
    if not axis.marginal:
        return axis.low + u * (axis.high - axis.low)
    edges = [axis.low] + [high for _, high, _ in axis.marginal]
    cumulative = np.concatenate([[0.0], np.cumsum([s for _, _, s in axis.marginal])])
    cumulative[-1] = 1.0
    return np.interp(u, cumulative, edges)


def axis_values(axis: Axis, u: np.ndarray) -> list[Any]:
    """Each agent's value of the axis from its unit coordinate (inverse distribution)."""
    if axis.categorical:
        weights = np.array([w for _, w in axis.categories])
        bounds = np.cumsum(weights) / weights.sum()
        picks = np.minimum(np.searchsorted(bounds, u, side="right"), len(bounds) - 1)
        return [axis.categories[int(i)][0] for i in picks]
    values = _continuous(axis, u)
    if axis.integer:
        spread = (
            _continuous(axis, u) if axis.marginal else axis.low + u * (axis.high + 1 - axis.low)
        )
        return [int(min(math.floor(v), axis.high)) for v in spread]
    return [round(float(v), 3) for v in values]


def _text(value: Any) -> str:
    return (
        value
        if isinstance(value, str)
        else (str(value) if isinstance(value, int) else f"{value:g}")
    )


def render(
    template: Mapping[str, str],
    index: int,
    values: Mapping[str, Any],
    biography: str | None = None,
) -> dict[str, str]:
    """The template's fields for one agent (validated: ``{{biography}}`` only appears when the
    population has biographies, so ``biography`` is given)."""

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "index":
            return str(index)
        if key == "biography":
            return biography or ""
        return _text(values[key[5:]])

    return {key: _PLACEHOLDER.sub(one, template[key]) for key in TEMPLATE_FIELDS}


def draw(content: Mapping[str, Any]) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The unit points and each agent's axis values, agent 1 first."""
    points = unit_points(content)
    axes = axes_of(content)
    columns = {axis.name: axis_values(axis, points[:, j]) for j, axis in enumerate(axes)}
    rows = [{name: columns[name][i] for name in columns} for i in range(len(points))]
    return points, rows


def agent_entities(
    content: Mapping[str, Any], *, environment: str, cognition_profile: str
) -> list[dict[str, Any]]:
    """The population's agents as entity content (ids not yet normalized), agent 1 first."""
    _, rows = draw(content)
    out = []
    for index, values in enumerate(rows, start=1):
        text = render(content["entity_template"], index, values, biography_of(content, index))
        out.append(
            {
                "id": text["id"],
                "name": text["name"],
                "state": text["state"],
                "environment": environment,
                "kind": {
                    "agent": {
                        "goal": text["goal"],
                        "memory": text["memory"],
                        "cognition_profile": cognition_profile,
                    }
                },
            }
        )
    return out


def coverage(points: np.ndarray) -> dict[str, Any]:
    """How evenly the sample covers the unit cube: the named discrepancy, from scipy."""
    value = float(qmc.discrepancy(points, method="CD")) if len(points) else None
    return {
        "measure": "centered_l2_discrepancy",
        "value": value,
        "method": COVERAGE_METHOD,
        "library": library("scipy"),
    }


def marginals(
    content: Mapping[str, Any], points: np.ndarray, rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each axis's shares against its target: categories against their weights, a numeric
    axis's marginal bins against their shares (without a table, four equal bins, a quarter
    each, the range's uniform target)."""
    out = []
    n = len(rows)
    for j, axis in enumerate(axes_of(content)):
        if axis.categorical:
            total = sum(w for _, w in axis.categories)
            cells = [
                {
                    "bin": value,
                    "target": weight / total,
                    "observed": sum(r[axis.name] == value for r in rows) / n,
                }
                for value, weight in axis.categories
            ]
        else:
            values = _continuous(axis, points[:, j])
            bins = axis.marginal or tuple(
                (
                    axis.low + k * (axis.high - axis.low) / UNIFORM_BINS,
                    axis.low + (k + 1) * (axis.high - axis.low) / UNIFORM_BINS,
                    1 / UNIFORM_BINS,
                )
                for k in range(UNIFORM_BINS)
            )
            cells = []
            for k, (low, high, share) in enumerate(bins):
                last = k == len(bins) - 1
                inside = (values >= low) & ((values <= high) if last else (values < high))
                cells.append(
                    {
                        "bin": f"{low:g}–{high:g}",
                        "target": share,
                        "observed": float(inside.sum()) / n,
                    }
                )
        worst = max(abs(c["observed"] - c["target"]) for c in cells)
        out.append({"axis": axis.name, "cells": cells, "max_gap": round(worst, 12)})
    return out
