"""A factorial design's interaction plot and a stopping rule's path, as inline SVG
(docs/designs.md). Pure: no Django, no JavaScript; every text written is escaped; the SVGs
scale to their container (a viewBox, ``width: 100%``), so they fit a 390 px screen.

- Interaction plot (one per metric): the first factor's levels along x, one line per level of
  the second factor (the means of its cells, averaged over any other factor's levels). Parallel
  lines: no interaction; lines that cross or converge: the second factor changes the first's
  effect.
- Stopping path: the e-value at each look (log scale) against the boundary 1/alpha; the rule
  stops at the first look on or above it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from chukwa_core.experiment_results_types import FactorialResult, StoppingLook

W, H = 360, 200
LEFT, RIGHT, TOP, BOTTOM = 52, 90, 14, 34
COLOURS = ("#2563eb", "#dc2626", "#059669", "#9333ea", "#d97706", "#0891b2")


def _text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def _frame(label: str, body: list[str]) -> str:
    return (
        f'<svg class="design-plot" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {W} {H}" preserveAspectRatio="xMinYMin meet" '
        'style="width:100%;max-width:480px;height:auto">'
        f"<title>{escape(label)}</title>" + "".join(body) + "</svg>"
    )


def _axes(
    low: float,
    high: float,
    y: Callable[[float], float],
    shown: Callable[[float], str] = _text,
) -> list[str]:
    parts = [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="#888"/>',
    ]
    for value in (low, (low + high) / 2, high):
        at = y(value)
        parts.append(
            f'<text x="{LEFT - 4}" y="{at + 4:.1f}" font-size="10" text-anchor="end">'
            f"{escape(shown(value))}</text>"
        )
    return parts


def interaction_svg(fit: FactorialResult) -> str:
    """The first two factors' cell means (other factors averaged over)."""
    if len(fit.factors) < 2:
        return ""
    first: list[str] = []
    second: list[str] = []
    for cell in fit.cells:
        if cell.levels[0] not in first:
            first.append(cell.levels[0])
        if cell.levels[1] not in second:
            second.append(cell.levels[1])
    means: dict[tuple[str, str], list[float]] = {}
    for cell in fit.cells:
        if cell.mean is not None:
            means.setdefault((cell.levels[0], cell.levels[1]), []).append(cell.mean)
    points = {key: sum(v) / len(v) for key, v in means.items()}
    if not points:
        return ""
    low, high = min(0.0, *points.values()), max(points.values())
    if high == low:
        high = low + 1
    span_x = (W - LEFT - RIGHT) / max(1, len(first) - 1)

    def x(i: int) -> float:
        return LEFT + 10 + i * (span_x - 20 / max(1, len(first) - 1))

    def y(v: float) -> float:
        return TOP + (high - v) / (high - low) * (H - TOP - BOTTOM)

    body = _axes(low, high, y)
    for i, level in enumerate(first):
        body.append(
            f'<text x="{x(i):.1f}" y="{H - BOTTOM + 14}" font-size="10" text-anchor="middle">'
            f"{escape(level)}</text>"
        )
    body.append(
        f'<text x="{(LEFT + W - RIGHT) / 2:.1f}" y="{H - 4}" font-size="11" '
        f'text-anchor="middle">{escape(fit.factors[0])}</text>'
    )
    for j, level in enumerate(second):
        colour = COLOURS[j % len(COLOURS)]
        line = [(x(i), y(points[(a, level)])) for i, a in enumerate(first) if (a, level) in points]
        if len(line) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in line)
            body.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for (px, py), a in zip(line, [a for a in first if (a, level) in points], strict=True):
            value = points[(a, level)]
            body.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{colour}"><title>'
                f"{escape(f'{fit.factors[0]}={a}, {fit.factors[1]}={level}: {_text(value)}')}"
                "</title></circle>"
            )
        body.append(
            f'<text x="{W - RIGHT + 8}" y="{TOP + 12 + 14 * j}" font-size="10" fill="{colour}">'
            f"{escape(f'{fit.factors[1]} {level}')}</text>"
        )
    label = (
        f"interaction plot of {fit.label}: {fit.factors[0]} along x, one line per level of "
        f"{fit.factors[1]}"
    )
    return _frame(label, body)


def stopping_svg(looks: Sequence[StoppingLook]) -> str:
    """log10 of each look's e-value against log10 of the boundary."""
    if not looks:
        return ""
    boundary = math.log10(looks[0].boundary)
    values = [look.log_e_value / math.log(10) for look in looks]
    low, high = min(0.0, *values), max(boundary * 1.15, *values)
    first, last = looks[0].replicates, max(looks[-1].replicates, looks[0].replicates + 1)

    def x(r: int) -> float:
        return LEFT + 10 + (r - first) / (last - first) * (W - LEFT - RIGHT - 20)

    def y(v: float) -> float:
        return TOP + (high - v) / (high - low) * (H - TOP - BOTTOM)

    body = _axes(low, high, y, lambda v: f"e={_text(float(f'{10**v:.2g}'))}")
    body.append(
        f'<line x1="{LEFT}" y1="{y(boundary):.1f}" x2="{W - RIGHT}" y2="{y(boundary):.1f}" '
        'stroke="#dc2626" stroke-dasharray="5,3"/>'
        f'<text x="{W - RIGHT + 4}" y="{y(boundary) + 4:.1f}" font-size="10" fill="#dc2626">'
        f"boundary {escape(_text(looks[0].boundary))}</text>"
    )
    path = " ".join(f"{x(k.replicates):.1f},{y(v):.1f}" for k, v in zip(looks, values, strict=True))
    body.append(f'<polyline points="{path}" fill="none" stroke="#2563eb" stroke-width="2"/>')
    for look, value in zip(looks, values, strict=True):
        body.append(
            f'<circle cx="{x(look.replicates):.1f}" cy="{y(value):.1f}" r="4" fill="#2563eb">'
            f"<title>{escape(f'{look.replicates} replicates: e = {look.e_value:.3g} ({look.decision})')}"
            "</title></circle>"
            f'<text x="{x(look.replicates):.1f}" y="{H - BOTTOM + 14}" font-size="10" '
            f'text-anchor="middle">{look.replicates}</text>'
        )
    body.append(
        f'<text x="{(LEFT + W - RIGHT) / 2:.1f}" y="{H - 4}" font-size="11" '
        'text-anchor="middle">replicates (e-value on a log scale)</text>'
    )
    return _frame("the stopping rule's e-value at each look against its boundary", body)
