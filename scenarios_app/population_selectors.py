"""Reading a population (docs/populations.md): its draw, the coverage of its axes (a named
discrepancy from scipy), each axis's marginal against its target, and its agents."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from chukwa_core.hashing import population_hash
from chukwa_core.population import (
    TEMPLATE_FIELDS,
    biography_of,
    coverage,
    draw,
    marginals,
    render,
    validate_population,
)
from scenarios_app.models import ComponentKind
from scenarios_app.selectors import component_get

AGENTS_SHOWN = 200

# A population's coverage, by its hash, for the last populations read here: the hash names the
# content, so its draw and the draw's discrepancy never change, and the discrepancy is O(n²)
# (0.8 to 1.5 s at 10,000 agents, the largest size; 0.03 s for the rest of a read).
COVERAGE_KEPT = 32
_coverage_kept: OrderedDict[str, dict[str, Any]] = OrderedDict()
_coverage_lock = threading.Lock()


def _coverage_of(hash: str, points: np.ndarray) -> dict[str, Any]:
    """``coverage(points)`` of the population ``hash`` (whose draw ``points`` are), computed
    once while it is among the last ``COVERAGE_KEPT`` read in this process."""
    with _coverage_lock:
        kept = _coverage_kept.get(hash)
        if kept is not None:
            _coverage_kept.move_to_end(hash)
            return dict(kept)
    computed = coverage(points)
    with _coverage_lock:
        _coverage_kept[hash] = computed
        while len(_coverage_kept) > COVERAGE_KEPT:
            _coverage_kept.popitem(last=False)
    return dict(computed)


def population_coverage(*, hash: str, agents_limit: int = AGENTS_SHOWN) -> dict[str, Any]:
    """The population (404 when absent) with its coverage, marginals and first agents."""
    row = component_get(kind=ComponentKind.POPULATION, hash=hash)
    content = row["content"]
    points, values = draw(content)
    template = content["entity_template"]
    agents = []
    for index, axis_values in enumerate(values[:agents_limit], start=1):
        text = render(template, index, axis_values, biography_of(content, index))
        agents.append(
            {"index": index, **{k: text[k] for k in TEMPLATE_FIELDS}, "values": axis_values}
        )
    return {
        "hash": hash,
        "label": content["label"],
        "size": content["size"],
        "sampler": content["sampler"],
        "seed": content["seed"],
        "axes": [a["name"] for a in content["axes"]],
        "coverage": _coverage_of(hash, points),
        "marginals": marginals(content, points, values),
        "agents": agents,
    }


PREVIEW_AGENTS = 10


def population_preview(*, content: Any, agents_limit: int = PREVIEW_AGENTS) -> dict[str, Any]:
    """What the author page shows before storing: the content checked by the put's own
    validation (a ChukwaError naming the field), the hash it would be stored under, and its
    coverage, marginals and first agents as the API computes them for a stored one. Nothing is
    stored."""
    checked = validate_population(content)
    points, values = draw(checked)
    template = checked["entity_template"]
    agents = []
    for index, axis_values in enumerate(values[:agents_limit], start=1):
        text = render(template, index, axis_values, biography_of(checked, index))
        agents.append(
            {
                "index": index,
                **{k: text[k] for k in TEMPLATE_FIELDS},
                "values": axis_values,
                "cells": [axis_values[a["name"]] for a in checked["axes"]],
            }
        )
    hash = population_hash(checked)
    return {
        "hash": hash,
        "label": checked["label"],
        "size": checked["size"],
        "axes": [a["name"] for a in checked["axes"]],
        "coverage": _coverage_of(hash, points),
        "marginals": marginals(checked, points, values),
        "agents": agents,
    }
