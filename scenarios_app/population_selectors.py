"""Reading a population (docs/populations.md): its draw, the coverage of its axes (a named
discrepancy from scipy), each axis's marginal against its target, and its agents."""

from __future__ import annotations

from typing import Any

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
        "coverage": coverage(points),
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
    return {
        "hash": population_hash(checked),
        "label": checked["label"],
        "size": checked["size"],
        "axes": [a["name"] for a in checked["axes"]],
        "coverage": coverage(points),
        "marginals": marginals(checked, points, values),
        "agents": agents,
    }
