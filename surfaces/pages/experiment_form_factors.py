"""The launch form's factorial half (docs/designs.md): instead of arms, a base scenario, factors
with two or more levels each, and optionally a half fraction. The first level of a factor is the
base as it stands (no fork); every other level gives its fork as the JSON that
``POST /api/scenarios/fork/`` takes without its parent. The design's own rules check the rest,
so an error names ``factors[i].levels[j].fork…`` exactly as the API's does, and it is shown next
to that level on the form."""

from __future__ import annotations

import json
import re
from typing import Any

from django.http import QueryDict

from chukwa_core.errors import invalid

MIN_FACTORS = 2
MAX_FACTORS = 6
MIN_LEVELS = 2
MAX_LEVELS = 6
FRACTIONS = ("1/2",)  # offered by the form; the design refuses others, naming `fraction`
FACTOR_FIELD = re.compile(r"^factors\[(\d+)\](?:\.(name)|\.levels\[(\d+)\](?:\.(label|fork))?)?")


def _blank_level() -> dict[str, str]:
    return {"label": "", "fork": ""}


def _blank_factor() -> dict[str, Any]:
    return {"name": "", "levels": [_blank_level() for _ in range(MIN_LEVELS)]}


def factors_form(data: QueryDict) -> dict[str, Any]:
    """What the factorial half of the form holds as typed: ``factor_name`` per factor row, and
    ``factor_<i>_label`` / ``factor_<i>_fork`` per level of row i."""
    names = data.getlist("factor_name")
    rows = []
    for i, name in enumerate(names[:MAX_FACTORS]):
        labels = data.getlist(f"factor_{i}_label")
        forks = data.getlist(f"factor_{i}_fork")
        count = max(len(labels), len(forks), MIN_LEVELS)
        levels = [
            {
                "label": (labels[j] if j < len(labels) else "").strip(),
                "fork": (forks[j] if j < len(forks) else "").strip(),
            }
            for j in range(min(count, MAX_LEVELS))
        ]
        rows.append({"name": name.strip(), "levels": levels})
    while len(rows) < MIN_FACTORS:
        rows.append(_blank_factor())
    return {
        "design_kind": "factors" if data.get("design_kind") == "factors" else "arms",
        "base": data.get("base", "").strip(),
        "fraction": data.get("fraction", "").strip(),  # the design's rules check it
        "factors": rows,
    }


def apply_action(form: dict[str, Any], action: str) -> bool:
    """Add or remove a factor or a level (``add_factor``, ``remove_factor_<i>``,
    ``add_level_<i>``, ``remove_level_<i>_<j>``); whether the action was one of these."""
    factors: list[dict[str, Any]] = form["factors"]
    if action == "add_factor":
        if len(factors) < MAX_FACTORS:
            factors.append(_blank_factor())
        return True
    match = re.fullmatch(r"remove_factor_(\d+)", action)
    if match:
        index = int(match.group(1))
        if index < len(factors) and len(factors) > MIN_FACTORS:
            del factors[index]
        return True
    match = re.fullmatch(r"add_level_(\d+)", action)
    if match:
        index = int(match.group(1))
        if index < len(factors) and len(factors[index]["levels"]) < MAX_LEVELS:
            factors[index]["levels"].append(_blank_level())
        return True
    match = re.fullmatch(r"remove_level_(\d+)_(\d+)", action)
    if match:
        index, level = int(match.group(1)), int(match.group(2))
        if index < len(factors):
            levels = factors[index]["levels"]
            if 0 < level < len(levels) and len(levels) > MIN_LEVELS:
                del levels[level]
        return True
    return False


def factors_design(form: dict[str, Any]) -> dict[str, Any]:
    """The API's ``base``, ``factors`` and ``fraction`` from the form: a level's fork parsed from
    its JSON (a form error naming ``factors[i].levels[j].fork`` when it is not JSON), empty
    fields left out so the design's rules name what is missing."""
    design: dict[str, Any] = {"base": {"hash": form["base"]} if form["base"] else {}}
    factors = []
    for i, row in enumerate(form["factors"]):
        factor: dict[str, Any] = {"name": row["name"]}
        levels = []
        for j, typed in enumerate(row["levels"]):
            level: dict[str, Any] = {"label": typed["label"]}
            if typed["fork"]:
                where = f"factors[{i}].levels[{j}].fork"
                try:
                    level["fork"] = json.loads(typed["fork"])
                except ValueError as exc:
                    raise invalid("invalid_factors", where, f"is not JSON: {exc}") from None
            levels.append(level)
        factor["levels"] = levels
        factors.append(factor)
    design["factors"] = factors
    if form["fraction"]:
        design["fraction"] = form["fraction"]
    return design


def factor_key(field: str) -> str | None:
    """Where on the form an error about the factors is shown: ``factor-1-level-0-fork`` for
    ``factors[1].levels[0].fork.changes…``, ``factor-0-name``, ``factor-2`` for the factor as a
    whole; None when the field is not a factor's."""
    match = FACTOR_FIELD.match(field)
    if not match:
        return None
    factor, name, level, part = match.groups()
    if name:
        return f"factor-{factor}-name"
    if level is not None:
        return f"factor-{factor}-level-{level}" + (f"-{part}" if part else "")
    return f"factor-{factor}"
