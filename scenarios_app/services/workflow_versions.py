"""Saving a workflow as a new version of a stored one: the content is put like any workflow and
the "derived from" edge is recorded with it, in one transaction."""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import transaction

from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import is_hash
from scenarios_app.models import CognitionWorkflow, WorkflowDerivation
from scenarios_app.services._store import Resolver


class DeriveResult(TypedDict):
    hash: str
    was_new: bool
    new_components: dict[str, int]
    derived_from: str | None  # the parent, when the saved content differs from it
    was_new_edge: bool


def cognition_workflow_derive(
    *, content: Any, parent_hash: str, operator: str = "", note: str = ""
) -> DeriveResult:
    """Put ``content`` as a workflow and record that it was derived from ``parent_hash`` ("" for
    none). Saving the parent unchanged records nothing: a version is not derived from itself."""
    if parent_hash and not is_hash(parent_hash):
        raise invalid(
            "invalid_hash", "derived_from", f"{parent_hash[:80]!r} is not a lowercase sha256 hex"
        )
    resolver = Resolver()
    with transaction.atomic(durable=True):
        workflow_hash, was_new = resolver.put_workflow(content)
        derived_from = parent_hash if parent_hash and parent_hash != workflow_hash else None
        was_new_edge = False
        if derived_from is not None:
            if not CognitionWorkflow.objects.filter(pk=derived_from).exists():
                raise NotFoundError(
                    "not_found",
                    f"derived_from: no stored cognition_workflow has hash {derived_from}",
                    {"field": "derived_from"},
                )
            _, was_new_edge = WorkflowDerivation.objects.get_or_create(
                child_id=workflow_hash,
                parent_id=derived_from,
                defaults={"operator": operator[:150], "note": note},
            )
    return {
        "hash": workflow_hash,
        "was_new": was_new,
        "new_components": dict(resolver.new_components()),
        "derived_from": derived_from,
        "was_new_edge": was_new_edge,
    }
