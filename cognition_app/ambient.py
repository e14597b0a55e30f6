"""Ambient context sources: called because the workflow says so, never the model.

``once_per_turn`` sources run once per distinct workflow before any subject; ``before_subject_
workflow`` sources run for each subject that can see them, just before its nodes. Results are
validated, traced and injected into a context tree under their ``inject_as`` pointer; they never
change the world.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chukwa_core.pointers import pointer_get, unescape
from cognition_app import sources
from cognition_app.sources import CallContext, SourceFailure


@dataclass(frozen=True)
class AmbientResult:
    workflow_hash: str
    source: Mapping[str, Any]
    value: Any
    invocation_id: Any
    for_subject: str = ""  # set for before_subject_workflow results


def inject(tree: dict[str, Any], pointer: str, value: Any) -> None:
    """Put ``value`` at ``pointer`` (``/ambient/…``) in ``{"ambient": …}``, creating objects."""
    parts = [unescape(p) for p in pointer.split("/")[1:]]
    current = tree
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            current[part] = nxt
        current = nxt
    current[parts[-1]] = copy.deepcopy(value)


def resolve_template(template: Any, context: Mapping[str, Any], where: str) -> Any:
    """Replace every {"$from": pointer} with the value at that pointer; a missing path fails."""
    if isinstance(template, dict):
        if set(template) == {"$from"}:
            found, value = pointer_get(context, template["$from"])
            if not found:
                raise SourceFailure(
                    "request_template",
                    f"{where}: $from {template['$from']!r} has no value in this turn",
                )
            return copy.deepcopy(value)
        return {k: resolve_template(v, context, f"{where}.{k}") for k, v in template.items()}
    if isinstance(template, list):
        return [resolve_template(v, context, f"{where}[{i}]") for i, v in enumerate(template)]
    return template


def visible_to(source: Mapping[str, Any], subject: Mapping[str, Any], for_subject: str) -> bool:
    vis = source["visible_to"]
    if vis in ("world", "all_subjects"):
        return True
    if vis == "acting_subject":
        return for_subject == subject["id"]
    if "environment_label" in vis:
        return subject["environment"] == vis["environment_label"]
    return subject["id"] == vis["entity_id"]


def runs_for_subject(source: Mapping[str, Any], subject: Mapping[str, Any]) -> bool:
    """A before_subject_workflow source runs for a subject that can see it."""
    return visible_to(source, subject, subject["id"])


def invoke_ambient(
    *,
    source: Mapping[str, Any],
    workflow_hash: str,
    request_context: Mapping[str, Any],
    make_ctx: Callable[..., CallContext],
    subject_id: str = "",
) -> AmbientResult:
    where = f"ambient source {source['id']!r} request_template"
    body = resolve_template(source["request_template"], request_context, where)
    result = sources.invoke_http_json(
        source_hash=source["source_ref"]["hash"],
        body=body,
        ctx=make_ctx(
            workflow_hash=workflow_hash, ambient_source_id=source["id"], subject_id=subject_id
        ),
        kind="ambient_context",
        result_schema_hash=source.get("result_schema_ref", {}).get("hash", ""),
    )
    return AmbientResult(
        workflow_hash, source, result.value, result.invocation_id, for_subject=subject_id
    )


def visible_tree(results: list[AmbientResult], subject: Mapping[str, Any]) -> dict[str, Any]:
    """The ambient results this subject may see, as the tree under ``/ambient``."""
    tree: dict[str, Any] = {}
    for result in results:
        if result.for_subject and result.for_subject != subject["id"]:
            continue
        if visible_to(result.source, subject, result.for_subject):
            inject(tree, result.source["inject_as"], result.value)
    return tree.get("ambient", {})
