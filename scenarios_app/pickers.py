"""What the editor's pickers offer, so an operator chooses instead of pasting hashes: the stored
components a workflow may reference (by the kind each reference needs), the stored workflows to
start from, the scenarios to fork and each scenario's profile labels; the metrics an experiment
measures with. A bounded number of the
newest rows of each kind, a handful of queries whatever the store's size."""

from __future__ import annotations

from typing import Any

from chukwa_core.ids import is_hash
from chukwa_core.patch_schema import world_patch_schema_hash
from scenarios_app.models import (
    CognitionWorkflow,
    JsonSchema,
    Metric,
    ResponseSource,
    Scenario,
    ScenarioCognitionProfile,
    ScenarioName,
)

MAX_CHOICES = 200
LLM_INTERFACES = frozenset({"llm_chat_completions"})


def _schema_label(content: Any) -> str:
    if not isinstance(content, dict):
        return "schema"
    for key in ("title", "$id", "description"):
        if isinstance(content.get(key), str) and content[key]:
            return content[key][:80]
    kind = content.get("type")
    props = content.get("properties")
    if isinstance(props, dict) and props:
        return f"{kind or 'object'} with " + ", ".join(sorted(props)[:4])
    return str(kind or "schema")


def component_choices() -> dict[str, list[dict[str, str]]]:
    """References by the kind each ``*_ref`` needs: ``llm_source_ref`` an LLM source, a tool's
    or an ambient source's ``source_ref`` an HTTP/MCP source, ``*_schema_ref`` a JSON schema."""
    llm: list[dict[str, str]] = []
    tools: list[dict[str, str]] = []
    for hash_, label, interface in ResponseSource.objects.order_by("-created_at").values_list(
        "hash", "label", "interface"
    )[:MAX_CHOICES]:
        item = {"hash": hash_, "label": label, "detail": interface}
        (llm if interface in LLM_INTERFACES else tools).append(item)
    patch_hash = world_patch_schema_hash()
    schemas = [
        {
            "hash": hash_,
            "label": "WorldPatch (the kernel's)" if hash_ == patch_hash else _schema_label(content),
            "detail": "json_schema",
        }
        for hash_, content in JsonSchema.objects.order_by("-created_at").values_list(
            "hash", "content"
        )[:MAX_CHOICES]
    ]
    schemas.sort(key=lambda s: s["hash"] != patch_hash)  # the WorldPatch schema first
    return {"llm_sources": llm, "tool_sources": tools, "schemas": schemas}


def workflow_choices() -> list[dict[str, Any]]:
    """The newest stored workflows, each with its nodes, the profile labels that bind it and the
    scenarios that use it."""
    rows = list(
        CognitionWorkflow.objects.order_by("-created_at", "hash").values(
            "hash", "content", "created_at"
        )[:MAX_CHOICES]
    )
    labels: dict[str, set[str]] = {}
    scenarios: dict[str, set[str]] = {}
    for workflow_hash, label, scenario_slug in ScenarioCognitionProfile.objects.filter(
        profile__workflow_id__in=[r["hash"] for r in rows]
    ).values_list("profile__workflow_id", "label", "scenario__scenario_slug"):
        labels.setdefault(workflow_hash, set()).add(label)
        scenarios.setdefault(workflow_hash, set()).add(scenario_slug)
    choices = []
    for row in rows:
        content = row["content"] if isinstance(row["content"], dict) else {}
        nodes = [n for n in content.get("nodes", []) if isinstance(n, dict)]
        choices.append(
            {
                "hash": row["hash"],
                "created_at": row["created_at"],
                "nodes": " → ".join(f"{n.get('id')} ({n.get('type')})" for n in nodes),
                "profiles": ", ".join(sorted(labels.get(row["hash"], ()))),
                # workflows that differ by a prompt read alike by their nodes: the scenarios
                # that use each one and its hash tell them apart
                "scenarios": ", ".join(sorted(scenarios.get(row["hash"], ()))[:3]),
            }
        )
    return choices


def scenario_choices() -> list[dict[str, str]]:
    """Named scenarios first (by name), then the newest scenarios."""
    named = [
        {"hash": hash_, "label": f"{name} ({slug})"}
        for name, hash_, slug in ScenarioName.objects.filter(scenario__isnull=False)
        .order_by("name")
        .values_list("name", "scenario_id", "scenario__scenario_slug")[:MAX_CHOICES]
    ]
    seen = {c["hash"] for c in named}
    recent = [
        {"hash": hash_, "label": f"{slug} · {hash_[:12]} · {created:%Y-%m-%d %H:%M}"}
        for hash_, slug, created in Scenario.objects.order_by("-created_at").values_list(
            "hash", "scenario_slug", "created_at"
        )[:MAX_CHOICES]
        if hash_ not in seen
    ]
    return named + recent


def workflow_binding(workflow_hash: str, scenario_hash: str = "") -> dict[str, str]:
    """The scenario and profile label that run a workflow: in ``scenario_hash`` when given, else
    in the newest scenario that has one; empty strings when none does."""
    if not is_hash(workflow_hash):
        return {"scenario": "", "label": ""}
    bindings = ScenarioCognitionProfile.objects.filter(profile__workflow_id=workflow_hash)
    if scenario_hash:
        bindings = bindings.filter(scenario_id=scenario_hash)
    row = (
        bindings.order_by("-scenario__created_at", "label")
        .values_list("scenario_id", "label")
        .first()
    )
    return {"scenario": row[0], "label": row[1]} if row else {"scenario": "", "label": ""}


def profile_labels(scenario_hash: str) -> list[str]:
    if not scenario_hash:
        return []
    return list(
        ScenarioCognitionProfile.objects.filter(scenario_id=scenario_hash)
        .order_by("label")
        .values_list("label", flat=True)
    )


def metric_choices() -> list[dict[str, str]]:
    """The newest stored metrics, by label: what an experiment can measure."""
    rows = Metric.objects.order_by("-created_at").values_list(
        "hash", "label", "kind", "content__aggregate"
    )[:MAX_CHOICES]
    return sorted(
        (
            {"hash": hash_, "label": label, "detail": f"{kind} · {aggregate}"}
            for hash_, label, kind, aggregate in rows
        ),
        key=lambda m: (m["label"], m["hash"]),
    )
