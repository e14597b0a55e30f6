"""Reading a population (docs/populations.md): its draw, the coverage of its axes (a named
discrepancy from scipy), each axis's marginal against its target, and its agents."""

from __future__ import annotations

from typing import Any

from chukwa_core.population import TEMPLATE_FIELDS, coverage, draw, marginals, render
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
        text = render(template, index, axis_values)
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
