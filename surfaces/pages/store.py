"""Server-rendered graph browser over the scenario store (every page also answers ?format=json)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.loader import select_template
from django.utils.safestring import mark_safe

from chukwa_core.errors import NotFoundError
from chukwa_core.metric_kinds import registered_kind, turn_scale, world_scale_of
from chukwa_core.metric_types import scale_label
from chukwa_core.workflow_refs import REF_KINDS
from scenarios_app import selectors
from scenarios_app.hash_names import hash_names
from scenarios_app.population_selectors import population_coverage
from scenarios_app.selectors import COLLECTION_SEGMENTS, SCENARIO_KINDS, ComponentKind
from surfaces.pages.authoring.review import MAX_DIFF_LINES, diff_rows, flatten, parent_content
from surfaces.pages.layout import query_url
from surfaces.pages.lineage_svg import lineage_svg
from surfaces.pages.rendering import page, respond
from worlds_app import measurement_selectors
from worlds_app.services.biography_runs import biography_runs_of

SEGMENTS: dict[str, ComponentKind] = COLLECTION_SEGMENTS
SEGMENT_BY_KIND: dict[str, str] = {kind.value: segment for segment, kind in SEGMENTS.items()}
PAGE_AGENTS = 20
TITLES: dict[str, str] = {
    "json-schemas": "JSON schemas",
    "response-sources": "Response sources",
    "cognition-workflows": "Cognition workflows",
    "cognition-profiles": "Cognition profiles",
    "environments": "Environments",
    "entities": "Entities",
    "metrics": "Metrics",
    "populations": "Populations",
}


def component_url(kind: str, hash: str) -> str:
    return f"/store/{SEGMENT_BY_KIND[kind]}/{hash}/"


def _kind_for(segment: str) -> ComponentKind:
    kind = SEGMENTS.get(segment)
    if kind is None:
        raise NotFoundError(
            "unknown_kind", f"kind: no component kind {segment!r}", {"segment": segment}
        )
    return kind


def _pager(request: HttpRequest, *, count: int, limit: int, offset: int) -> dict[str, Any]:
    """Prev/next links that keep the other query parameters (filters) as they are."""

    def link(new_offset: int) -> str:
        return query_url(request, offset=str(new_offset), limit=str(limit))

    return {
        "count": count,
        "first": offset + 1 if count else 0,
        "last": min(offset + limit, count),
        "prev_url": link(max(offset - limit, 0)) if offset > 0 else None,
        "next_url": link(offset + limit) if offset + limit < count else None,
    }


def _workflow_refs(content: Any, path: str = "") -> list[dict[str, str]]:
    """Every ``*_ref`` in a stored workflow (all hashes there) with its JSON path and kind."""
    found: list[dict[str, str]] = []
    if isinstance(content, dict):
        for key, value in content.items():
            here = f"{path}/{key}"
            if key in REF_KINDS and isinstance(value, dict) and "hash" in value:
                found.append(
                    {
                        "path": here,
                        "key": key,
                        "kind": REF_KINDS[key],
                        "hash": value["hash"],
                        "url": component_url(REF_KINDS[key], value["hash"]),
                    }
                )
            elif key != "request_template":
                found.extend(_workflow_refs(value, here))
    elif isinstance(content, list):
        for i, value in enumerate(content):
            found.extend(_workflow_refs(value, f"{path}/{i}"))
    return found


def _workflow_summary(content: dict[str, Any]) -> dict[str, Any]:
    refs = _workflow_refs(content)

    def refs_under(prefix: str) -> list[dict[str, str]]:
        return [r for r in refs if r["path"].startswith(prefix + "/")]

    return {
        "version": content.get("version"),
        "execution": content.get("execution"),
        "ambient_sources": [
            {"id": s.get("id"), "run": s.get("run"), "refs": refs_under(f"/ambient_sources/{i}")}
            for i, s in enumerate(content.get("ambient_sources", []))
        ],
        "nodes": [
            {
                "id": n.get("id"),
                "type": n.get("type"),
                "tools": [t.get("name") for t in n.get("available_tools", [])],
                "refs": refs_under(f"/nodes/{i}"),
            }
            for i, n in enumerate(content.get("nodes", []))
        ],
        "refs": refs,
    }


def _touched_rows(touched: Any) -> list[dict[str, Any]]:
    """``metadata.touched_components`` flattened for display, with component links."""
    rows: list[dict[str, Any]] = []
    for item in touched if isinstance(touched, list) else []:
        kind = item.get("kind")
        row: dict[str, Any] = {"kind": kind, "op": item.get("op", "set"), "links": []}
        if kind == "scenario_field":
            row["what"] = item.get("field")
            row["old"], row["new"] = item.get("old"), item.get("new")
        elif kind in SEGMENT_BY_KIND:
            row["what"] = item.get("label")
            for side in ("old_hash", "new_hash"):
                if item.get(side):
                    row["links"].append(
                        {
                            "side": side[:3],
                            "hash": item[side],
                            "url": component_url(kind, item[side]),
                        }
                    )
        elif kind == "entities":
            row["what"] = "entity list"
            for side in ("removed", "added"):
                for h in item.get(side, []):
                    row["links"].append(
                        {"side": side, "hash": h, "url": component_url(ComponentKind.ENTITY, h)}
                    )
        rows.append(row)
    return rows


# What every metric has, shown alike whatever its kind.
_METRIC_COMMON_FIELDS = frozenset({"version", "label", "kind", "aggregate"})


def _metric_summary(metric_hash: str, content: dict[str, Any]) -> dict[str, Any]:
    """A metric's page: its kind's own fields (the kind's partial, or each field as JSON), the
    worlds it measured and its agreement with each annotation name reviewers gave numbers or
    flags to on the turns it measured."""
    source = content.get("source")
    kind = registered_kind(content["kind"])
    fields = select_template(
        [f"scenarios_app/_metric_{content['kind']}.html", "scenarios_app/_metric_fields.html"]
    )
    return {
        "kind_summary": kind.summary if kind is not None else "",
        "turn_type": scale_label(turn_scale(content)) if kind is not None else "",
        "world_type": scale_label(world_scale_of(content)) if kind is not None else "",
        "fields_template": fields.template.name,
        "own_fields": [
            (key, json.dumps(value, indent=2, ensure_ascii=False))
            for key, value in content.items()
            if key not in _METRIC_COMMON_FIELDS
        ],
        "source_url": (
            component_url(ComponentKind.RESPONSE_SOURCE, source["hash"])
            if isinstance(source, dict)
            else None
        ),
        "worlds": selectors.component_uses(kind=ComponentKind.METRIC, hash=metric_hash)["worlds"],
        "agreement": [
            asdict(measurement_selectors.metric_agreement(metric_hash=metric_hash, annotation=name))
            for name in measurement_selectors.agreement_names(metric_hash=metric_hash)
        ],
    }


# --- store -----------------------------------------------------------------------------------


@page
def store_index(request: HttpRequest) -> HttpResponse:
    counts = selectors.store_counts()
    kinds = [
        {
            "segment": segment,
            "kind": kind.value,
            "title": TITLES[segment],
            "count": counts[segment.replace("-", "_")],
            "url": f"/store/{segment}/",
        }
        for segment, kind in SEGMENTS.items()
    ]
    data = {"counts": counts, "kinds": kinds}
    return respond(request, "scenarios_app/store_index.html", data, data)


@page
def component_list_page(request: HttpRequest, segment: str) -> HttpResponse:
    kind = _kind_for(segment)
    limit, offset = selectors.parse_paging(request.GET)
    result = selectors.component_list(kind=kind, limit=limit, offset=offset)
    for row in result["results"]:
        row["url"] = component_url(kind, row["hash"])
    context = {
        "segment": segment,
        "kind": kind.value,
        "title": TITLES[segment],
        "result": result,
        "hash_names": hash_names(
            hashes=[h for row in result["results"] for h in (row["hash"], row.get("workflow_hash"))]
        ),
        "pager": _pager(request, count=result["count"], limit=limit, offset=offset),
    }
    return respond(
        request,
        "scenarios_app/component_list.html",
        context,
        {"kind": kind.value, **result},
        partial="scenarios_app/_component_table.html",
    )


@page
def component_detail_page(request: HttpRequest, segment: str, hash: str) -> HttpResponse:
    kind = _kind_for(segment)
    component = selectors.component_get(kind=kind, hash=hash)
    links: dict[str, Any] = {
        "uses": f"/store/{segment}/{hash}/uses/",
        "scenarios": f"/scenarios/?uses_{kind.value}_hash={hash}",
    }
    workflow = None
    if kind == ComponentKind.COGNITION_WORKFLOW:
        workflow = _workflow_summary(component["content"])
        component["versions"] = selectors.workflow_versions(workflow_hash=hash)
        parents = component["versions"]["derived_from"] if component["versions"] else []
        if parents:
            # what changed from the version it was derived from, word by word
            rows = diff_rows(
                flatten(parent_content(parents[0]["hash"])), flatten(component["content"])
            )
            component["diff_from_parent"] = {
                "parent": parents[0]["hash"],
                "rows": rows[:MAX_DIFF_LINES],
                "truncated": len(rows) > MAX_DIFF_LINES,
            }
    elif kind == ComponentKind.COGNITION_PROFILE:
        links["workflow"] = component_url(
            ComponentKind.COGNITION_WORKFLOW, component["workflow_hash"]
        )
    elif kind == ComponentKind.METRIC:
        component["metric"] = _metric_summary(hash, component["content"])
        links["scenarios"] = ""  # a metric is bound to no scenario
    elif kind == ComponentKind.POPULATION:
        population = population_coverage(hash=hash, agents_limit=PAGE_AGENTS)
        for agent in population["agents"]:
            agent["cells"] = [agent["values"][name] for name in population["axes"]]
        component["population"] = population
        # the latest biographies runs asked for this version (a run goes on without its page)
        component["biography_runs"] = biography_runs_of(population=hash)
        links["scenarios"] = ""  # its use is listed under "Where is this used?"
    data = {**component, "links": links}
    if workflow is not None:
        data["workflow"] = workflow
    context = {
        "segment": segment,
        "title": TITLES[segment],
        "kind_label": kind.label,
        "c": data,
        "workflow": workflow,
        "hash_names": hash_names(hashes=[hash, component.get("workflow_hash", "")]),
    }
    return respond(request, "scenarios_app/component_detail.html", context, data)


@page
def component_uses_page(request: HttpRequest, segment: str, hash: str) -> HttpResponse:
    kind = _kind_for(segment)
    uses = selectors.component_uses(kind=kind, hash=hash)
    context = {
        "segment": segment,
        "title": TITLES[segment],
        "uses": uses,
        "detail_url": component_url(kind, hash),
        "hash_names": hash_names(
            hashes=[
                hash,
                *(w["hash"] for w in uses.get("workflows", [])),
                *(
                    h
                    for p in uses.get("cognition_profiles", [])
                    for h in (p["hash"], p["workflow_hash"])
                ),
            ]
        ),
    }
    return respond(request, "scenarios_app/component_uses.html", context, uses)


# --- scenarios -------------------------------------------------------------------------------

FILTER_FIELDS = [
    ("created_after", "Created after", "2026-01-01T00:00:00Z"),
    ("created_before", "Created before", "2026-12-31T00:00:00Z"),
    *[(f"uses_{k.value}_hash", f"Uses {k.label.lower()}", "sha256") for k in SCENARIO_KINDS],
]


@page
def scenario_list_page(request: HttpRequest) -> HttpResponse:
    result = selectors.scenario_list(params=request.GET)
    filters = [
        {"key": key, "label": label, "placeholder": hint, "value": request.GET.get(key, "")}
        for key, label, hint in FILTER_FIELDS
    ]
    context = {
        "result": result,
        "filters": filters,
        "has_name": request.GET.get("has_name", ""),
        "has_parents": request.GET.get("has_parents", ""),
        "pager": _pager(
            request, count=result["count"], limit=result["limit"], offset=result["offset"]
        ),
    }
    return respond(
        request,
        "scenarios_app/scenario_list.html",
        context,
        result,
        partial="scenarios_app/_scenario_table.html",
    )


@page
def scenario_detail_page(request: HttpRequest, ref: str) -> HttpResponse:
    scenario = selectors.scenario_get(ref=ref)
    h = scenario["hash"]
    body = scenario["scenario"]
    profiles = [
        {
            "label": label,
            "hash": profile_hash,
            "url": component_url(ComponentKind.COGNITION_PROFILE, profile_hash),
            "workflow_hash": body["cognition_profiles"][label]["workflow_hash"],
            "workflow_url": component_url(
                ComponentKind.COGNITION_WORKFLOW, body["cognition_profiles"][label]["workflow_hash"]
            ),
        }
        for label, profile_hash in scenario["cognition_profiles"].items()
    ]
    environments = [
        {
            "label": label,
            "hash": env_hash,
            "url": component_url(ComponentKind.ENVIRONMENT, env_hash),
            "text": body["environments"][label],
        }
        for label, env_hash in scenario["environments"].items()
    ]
    entities = []
    for entity_hash, content in zip(scenario["entities"], body["entities"], strict=True):
        agent = content["kind"].get("agent") if isinstance(content["kind"], dict) else None
        entities.append(
            {
                "hash": entity_hash,
                "url": component_url(ComponentKind.ENTITY, entity_hash),
                "id": content["id"],
                "name": content.get("name", ""),
                "kind": "agent" if agent else "prop",
                "cognition_profile": agent.get("cognition_profile") if agent else None,
                "environment": content["environment"],
                "state": content.get("state", ""),
            }
        )
    derivations = selectors.scenario_derivations(scenario_hash=h)
    for d in derivations:
        d["touched_components"] = (d["metadata"] or {}).get("touched_components")
        d["touched_rows"] = _touched_rows(d["touched_components"])
        primary = next((p["hash"] for p in d["parents"] if p["role"] == "primary"), None)
        if primary is not None and primary != h:
            # the whole scenario against its primary parent, prompts included, word by word
            rows = diff_rows(
                flatten(selectors.scenario_get(ref=primary)["scenario"]),
                flatten(scenario["scenario"]),
            )
            d["diff"] = {"rows": rows[:MAX_DIFF_LINES], "truncated": len(rows) > MAX_DIFF_LINES}
    data = {
        "hash": h,
        "scenario_slug": scenario["scenario_slug"],
        "description": scenario["description"],
        "chronon_seconds": scenario["chronon_seconds"],
        "created_at": scenario["created_at"],
        "names": scenario["names"],
        "child_count": scenario["child_count"],
        "world_count": scenario["world_count"],
        "has_parents": scenario["has_parents"],
        "cognition_profiles": profiles,
        "environments": environments,
        "entities": entities,
        "derivations": derivations,
        "links": {"lineage": f"/scenarios/{h}/lineage/", "worlds": f"/worlds/?scenario={h}"},
    }
    names = hash_names(hashes=[p["workflow_hash"] for p in profiles])
    context = {"s": data, "hash_names": names}
    return respond(request, "scenarios_app/scenario_detail.html", context, data)


@page
def scenario_lineage_page(request: HttpRequest, ref: str) -> HttpResponse:
    lineage = selectors.scenario_lineage(ref=ref)
    slugs = {n["hash"]: n["scenario_slug"] for n in lineage["nodes"]}
    for edge in lineage["edges"]:
        edge["parent_slug"] = slugs.get(edge["parent"], "")
        edge["child_slug"] = slugs.get(edge["child"], "")
    # lineage_svg escapes every text and attribute it writes.
    context = {"lineage": lineage, "svg": mark_safe(lineage_svg(lineage))}  # noqa: S308
    return respond(request, "scenarios_app/scenario_lineage.html", context, lineage)


# --- names -----------------------------------------------------------------------------------


@page
def name_list_page(request: HttpRequest) -> HttpResponse:
    limit, offset = selectors.parse_paging(request.GET)
    data = selectors.scenario_name_list(limit=limit, offset=offset)
    count = data["count"]
    context = {"result": data, "pager": _pager(request, count=count, limit=limit, offset=offset)}
    return respond(request, "scenarios_app/name_list.html", context, data)


@page
def name_detail_page(request: HttpRequest, name: str) -> HttpResponse:
    data = selectors.scenario_name_get(name=name)
    return respond(request, "scenarios_app/name_detail.html", {"n": data}, data)
