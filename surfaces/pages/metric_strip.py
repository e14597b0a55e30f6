"""A metric's per-turn series (``measurement_selectors.world_metric_series``) drawn as an inline
SVG strip: one cell per turn (a survey's: one per turn and agent asked, the agent named in its
tooltip), a bar as high as the value within the series' range, an error a red
cell marked with a cross, the baseline (turn 0, a branch's turns up to its branch point) paler; each cell
links to its turn and names its value in a tooltip.

Pure: no Django, no JavaScript; every text and attribute written is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

HEIGHT = 30
MAX_WIDTH = 420
GAP = 1


def value_text(value: float | None) -> str:
    """A value as a page writes it: whole numbers without a decimal point."""
    if value is None:
        return "—"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"


def metric_strip_svg(points: Sequence[Mapping[str, Any]], *, href: Callable[[int], str]) -> str:
    """``href(n)``: where turn n's cell links to."""
    if not points:
        return ""
    cell = max(3, min(14, MAX_WIDTH // len(points)))
    width = cell * len(points)
    values = [p["value"] for p in points if p["value"] is not None]
    low = min([0.0, *values])
    high = max([low, *values])
    span = high - low
    cells: list[str] = []
    for index, point in enumerate(points):
        x = index * cell
        turn = point["turn"]
        link = escape(href(turn))
        who = f" · {point['subject']}" if point.get("subject") else ""
        if point["value"] is None:
            title = f"turn {turn}{who}: {point['error']} — {point['message']}"
            shape = (
                f'<rect class="err" x="{x}" y="0" width="{cell - GAP}" height="{HEIGHT}"/>'
                f'<text x="{x + (cell - GAP) / 2:g}" y="{HEIGHT / 2 + 4:g}">×</text>'
                if cell >= 8
                else f'<rect class="err" x="{x}" y="0" width="{cell - GAP}" height="{HEIGHT}"/>'
            )
        else:
            share = (point["value"] - low) / span if span else 0.5
            bar = max(2.0, share * (HEIGHT - 2))
            title = f"turn {turn}{who}: {value_text(point['value'])}"
            shape = (
                f'<rect class="bg" x="{x}" y="0" width="{cell - GAP}" height="{HEIGHT}"/>'
                f'<rect class="v" x="{x}" y="{HEIGHT - bar:.1f}" width="{cell - GAP}" '
                f'height="{bar:.1f}"/>'
            )
        if point["baseline"]:
            title += " (baseline)"
        css = ' class="baseline"' if point["baseline"] else ""
        cells.append(f'<a href="{link}"{css}><title>{escape(title)}</title>{shape}</a>')
    label = escape(f"one cell per turn, {points[0]['turn']} to {points[-1]['turn']}")
    return (
        f'<svg class="metric-strip" role="img" aria-label="{label}" width="{width}" '
        f'height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}">' + "".join(cells) + "</svg>"
    )
