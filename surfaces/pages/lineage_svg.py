"""A scenario lineage (``selectors.scenario_lineage``) drawn as an inline SVG.

Pure: no Django, no JavaScript. Layered layout: each node's column is its generation (the
longest parent chain inside the lineage), so every edge points left to right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from typing import Any

NODE_W = 230
NODE_H = 70
COL_GAP = 90
ROW_GAP = 24
PAD = 20


def _default_href(scenario_hash: str) -> str:
    return f"/scenarios/{scenario_hash}/"


def _clip(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _generations(nodes: list[Mapping[str, Any]], edges: list[Mapping[str, Any]]) -> dict[str, int]:
    gen = {n["hash"]: 0 for n in nodes}
    links = [(e["parent"], e["child"]) for e in edges if e["parent"] in gen and e["child"] in gen]
    # Longest-path relaxation; lineage is a DAG, so len(nodes) rounds always settle it.
    for _ in range(len(nodes)):
        changed = False
        for parent, child in links:
            if gen[child] < gen[parent] + 1:
                gen[child] = gen[parent] + 1
                changed = True
        if not changed:
            break
    return gen


def lineage_svg(lineage: Mapping[str, Any], *, href: Callable[[str], str] = _default_href) -> str:
    """``{"root", "nodes": [{hash, scenario_slug, names, …}], "edges": [{parent, child, role}]}``
    → an ``<svg>`` string with one linked ``<g class="node">`` per scenario and one
    ``<g class="edge">`` per parent link."""
    nodes: list[Mapping[str, Any]] = list(lineage.get("nodes", []))
    edges: list[Mapping[str, Any]] = list(lineage.get("edges", []))
    root = lineage.get("root")
    gen = _generations(nodes, edges)
    columns: dict[int, list[str]] = {}
    for node in nodes:  # nodes arrive oldest first, which keeps rows stable
        columns.setdefault(gen[node["hash"]], []).append(node["hash"])
    pos: dict[str, tuple[int, int]] = {}
    for col, hashes in columns.items():
        for row, h in enumerate(hashes):
            pos[h] = (PAD + col * (NODE_W + COL_GAP), PAD + row * (NODE_H + ROW_GAP))
    n_cols = max(columns, default=0) + 1
    n_rows = max((len(v) for v in columns.values()), default=1)
    width = PAD * 2 + n_cols * NODE_W + (n_cols - 1) * COL_GAP
    height = PAD * 2 + n_rows * NODE_H + (n_rows - 1) * ROW_GAP

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="ui-monospace,Menlo,Consolas,monospace" font-size="12">',
        "<title>Scenario lineage</title>",
        '<defs><marker id="lineage-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#8a93a8"/></marker></defs>',
    ]
    for edge in edges:
        if edge["parent"] not in pos or edge["child"] not in pos:
            continue
        px, py = pos[edge["parent"]]
        cx, cy = pos[edge["child"]]
        x1, y1 = px + NODE_W, py + NODE_H // 2
        x2, y2 = cx, cy + NODE_H // 2
        mid = (x1 + x2) // 2
        role = escape(str(edge.get("role", "")))
        parts.append(
            f'<g class="edge" data-parent="{escape(edge["parent"])}" '
            f'data-child="{escape(edge["child"])}">'
            f'<path d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" fill="none" '
            f'stroke="#8a93a8" stroke-width="1.5" marker-end="url(#lineage-arrow)"/>'
            f'<text x="{mid}" y="{(y1 + y2) // 2 - 4}" text-anchor="middle" fill="#5b6478" '
            f'font-size="11">{role}</text></g>'
        )
    for node in nodes:
        h = str(node["hash"])
        x, y = pos[h]
        is_root = h == root
        names = ", ".join(str(n) for n in node.get("names", []))
        fill, stroke = ("#eef2ff", "#2f5bd3") if is_root else ("#ffffff", "#c9cfdd")
        parts.append(
            f'<g class="node{" root" if is_root else ""}" data-hash="{escape(h)}">'
            f'<a href="{escape(href(h))}"><title>{escape(h)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{2 if is_root else 1}"/>'
            f'<text x="{x + 12}" y="{y + 22}" font-weight="700" fill="#1d2330" '
            f'font-family="system-ui,sans-serif" font-size="13">'
            f"{escape(_clip(str(node.get('scenario_slug', '')), 28))}</text>"
            f'<text x="{x + 12}" y="{y + 41}" fill="#2f5bd3">{escape(h[:12])}…</text>'
            f'<text x="{x + 12}" y="{y + 58}" fill="#5b6478">'
            f"{escape(_clip(names, 30)) if names else '—'}</text>"
            f"</a></g>"
        )
    parts.append("</svg>")
    return "".join(parts)
