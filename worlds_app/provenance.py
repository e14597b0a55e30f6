"""The provenance of one value of a world (an entity's state or memory, an environment's text):
every change to it, newest first and paged, with what decided each — an LLM call (and the tool
calls on the way to it), a rule, or an operator's intervention."""

from __future__ import annotations

from typing import Any

from django.db.models import Case, F, Q, TextField, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Length, Substr

from cognition_app.models import InvocationKind, SourceInvocation
from worlds_app.models import AttemptEvent, Intervention, PatchTransition

HISTORY_PER_PAGE = 40


def value_history(
    *, slug: str, kinds: tuple[str, ...], target_id: str, offset: int
) -> tuple[int, list[dict[str, Any]]]:
    """One page of the changes to one value, newest first, with what decided each: an LLM call
    or a rule. A memory append carries only its appended line, never the whole memory twice
    (the database cuts it, so a long memory is not even read)."""
    qs = PatchTransition.objects.filter(
        world__slug=slug, target_kind__in=kinds, target_id=target_id
    )
    is_memory = Q(target_kind="entity_memory")
    rows: list[dict[str, Any]] = [
        dict(r)
        for r in qs.order_by("-turn_number", "-patch_seq", "-effect_index")
        .annotate(
            shown_before=Case(
                When(is_memory, then=Value("")), default=F("before"), output_field=TextField()
            ),
            shown_after=Case(
                When(is_memory & Q(before=""), then=F("after")),
                When(is_memory, then=Substr("after", Length("before") + 2)),
                default=F("after"),
                output_field=TextField(),
            ),
        )
        .values(
            "turn_number",
            "patch_seq",
            "effect_index",
            "subject_id",
            "node_id",
            "op",
            "target_kind",
            "shown_before",
            "shown_after",
            "attempt_id",
            "llm_call_id",
            "invocation_id",
            "intervention_id",
        )[offset : offset + HISTORY_PER_PAGE]
    ]
    operators = {
        i["id"]: i
        for i in Intervention.objects.filter(
            id__in={r["intervention_id"] for r in rows if r["intervention_id"]}
        ).values("id", "created_by", "note")
    }
    rule_attempts = {r["attempt_id"] for r in rows if not r["llm_call_id"]}
    monologues: dict[tuple[Any, str, str], dict[str, Any]] = {}
    for attempt_id, subject, node, rule, intent in AttemptEvent.objects.filter(
        attempt_id__in=rule_attempts, kind="inner_monologue"
    ).values_list(
        "attempt_id", "subject_id", "node_id", KT("payload__matched_rule"), KT("payload__intent")
    ):
        monologues[(attempt_id, subject, node)] = {"matched_rule": rule, "intent": intent}
    narrations: dict[tuple[Any, int | None], str] = {
        (a, seq): narration or ""
        for a, seq, narration in AttemptEvent.objects.filter(
            attempt_id__in={r["attempt_id"] for r in rows}, kind="world_patch_applied"
        ).values_list("attempt_id", "patch_seq", KT("payload__patch__narration"))
    }
    chains = _tool_chains(rows)
    for row in rows:
        before, after = row.pop("shown_before"), row.pop("shown_after")
        if row["target_kind"] == "entity_memory":
            row["appended"] = after
        else:
            row["before"], row["after"] = before, after
        row["narration"] = narrations.get((row["attempt_id"], row["patch_seq"]), "")
        monologue = monologues.get((row["attempt_id"], row["subject_id"], row["node_id"]))
        intervention = operators.get(row["intervention_id"])
        row["decided_by"] = (
            {
                "operator": intervention["created_by"],
                "note": intervention["note"],
                "intervention_id": intervention["id"],
            }
            if intervention is not None
            else {
                "llm_call_id": row["llm_call_id"],
                # the tools the deciding generation's node called on the way to it
                "tool_calls": chains.get(row["invocation_id"], []),
            }
            if row["llm_call_id"]
            else {
                "rule_policy": True,
                "matched_rule": monologue.get("matched_rule") if monologue else None,
                "intent": monologue.get("intent") if monologue else None,
            }
        )
    return qs.count(), rows


def _tool_chains(rows: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    """For each deciding generation on the page (by invocation id), the tool calls its subject's
    node made in the same attempt before it, in order: two queries for the page."""
    generations = {
        g["id"]: g
        for g in SourceInvocation.objects.filter(
            id__in={r["invocation_id"] for r in rows if r["invocation_id"]}
        ).values("id", "attempt_id", "subject_id", "node_id", "seq")
    }
    if not generations:
        return {}
    tools = (
        SourceInvocation.objects.filter(
            attempt_id__in={g["attempt_id"] for g in generations.values()},
            kind=InvocationKind.MODEL_ELECTED_TOOL,
        )
        .order_by("seq")
        .values("id", "attempt_id", "subject_id", "node_id", "seq", "tool_name", "status")
    )
    chains: dict[Any, list[dict[str, Any]]] = {}
    for generation_id, g in generations.items():
        chains[generation_id] = [
            dict(t)
            for t in tools
            if (t["attempt_id"], t["subject_id"], t["node_id"])
            == (g["attempt_id"], g["subject_id"], g["node_id"])
            and t["seq"] < g["seq"]
        ]
    return chains
