"""The span tree of one finished attempt, rebuilt from its rows (see the package's docstring)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Span, Status, StatusCode

from cognition_app.models import InvocationKind, InvocationStatus, SourceInvocation
from cognition_app.sources import scrub, scrub_json
from scenarios_app.models import ResponseSource
from worlds_app.models import (
    AttemptEvent,
    AttemptStatus,
    EventKind,
    PatchTransition,
    Turn,
    TurnAttempt,
)
from worlds_app.telemetry.attributes import (
    AGENT,
    CHAIN,
    as_json,
    capture_content,
    invocation_span,
    without_none,
)

SCOPE = "chukwa.worlds"
FINISHED = (AttemptStatus.COMMITTED, AttemptStatus.FAILED, AttemptStatus.INTERRUPTED)
# The project a trace lands in on Phoenix (and any backend that reads OpenInference's resource
# attribute) unless OTEL_RESOURCE_ATTRIBUTES names one.
DEFAULT_PROJECT = "chukwa"


class _DerivedIds(IdGenerator):
    """Hands out the ids chosen by the builder just before it starts each span."""

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id
        self.next_span_id: int | None = None

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        span_id, self.next_span_id = self.next_span_id, None
        # 0 is the invalid span id; the fallback is never reached by the builder
        return span_id or random.getrandbits(64) or 1


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _uuid_span_id(value: UUID) -> int:
    return (value.int & 0xFFFF_FFFF_FFFF_FFFF) or 1


def _path_span_id(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _resource() -> Resource:
    """OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES as the SDK reads them; the service is
    ``chukwa`` and the OpenInference project ``chukwa`` unless they name others."""
    detected = Resource.create()
    defaults: dict[str, str] = {}
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        defaults["service.name"] = "chukwa"
    if "openinference.project.name" not in detected.attributes:
        defaults["openinference.project.name"] = DEFAULT_PROJECT
    return detected.merge(Resource(defaults)) if defaults else detected


@dataclass
class _Subject:
    """What one subject did in the attempt: its calls by node (``""``: before its workflow),
    its events, and when it was first and last seen."""

    subject_id: str
    nodes: dict[str, list[SourceInvocation]] = field(default_factory=dict)
    node_events: dict[str, list[AttemptEvent]] = field(default_factory=dict)
    patches: list[AttemptEvent] = field(default_factory=list)
    moments: list[datetime] = field(default_factory=list)


def _providers(invocations: list[SourceInvocation]) -> dict[str, str]:
    """Each LLM source's ``provider`` (optional in its interface), by source hash."""
    hashes = {
        inv.source_hash
        for inv in invocations
        if inv.kind in (InvocationKind.LLM_GENERATION, InvocationKind.CONFORMANCE_CHECK)
    }
    found: dict[str, str] = {}
    for source_hash, content in ResponseSource.objects.filter(hash__in=hashes).values_list(
        "hash", "content"
    ):
        interface = content.get("interface", {}) if isinstance(content, dict) else {}
        provider = interface.get("provider") if isinstance(interface, dict) else None
        found[source_hash] = provider if isinstance(provider, str) else ""
    return found


def _narrations(patches: list[AttemptEvent]) -> list[dict[str, Any]]:
    told = []
    for event in patches:
        payload = event.payload if isinstance(event.payload, dict) else {}
        patch = payload.get("patch", {})
        narration = patch.get("narration") if isinstance(patch, dict) else None
        # an operator's intervention has no subject: it is told as the operator's
        operator = (payload.get("intervention") or {}).get("operator", "")
        who = event.subject_id or f"operator {operator}"
        if isinstance(narration, str) and narration:
            told.append({"subject": who, "narration": scrub(narration)})
    return told


def _ok(span: Span) -> None:
    span.set_status(Status(StatusCode.OK))


def _error(span: Span, error_type: str, message: str) -> None:
    span.set_status(Status(StatusCode.ERROR, scrub(message)[:1000]))
    span.set_attribute("error.type", error_type)


def _opening(attempt: TurnAttempt) -> str:
    """The root's input: the attempt's absolute page URL and, with content capture on, the
    world as its subjects found it (the turn before: each environment's content, each entity's
    place and state, scrubbed)."""
    url = settings.CHUKWA_SITE_URL + attempt.get_absolute_url()
    if attempt.attempted_turn is None or not capture_content():
        return url  # without content capture, the page alone
    previous = attempt.attempted_turn - 1
    before = (
        Turn.objects.filter(world_id=attempt.world_id, number=previous)
        .values_list("state", flat=True)
        .first()
    )
    if not before:
        return url
    lines = [url, "", f"The world at turn {previous}:"]
    for label, content in sorted(before.get("environments", {}).items()):
        lines.append(f"- {label}: {scrub(str(content))[:300]}")
    for entity in before.get("entities", []):
        place = entity.get("environment", "")
        state = scrub(str(entity.get("state", "")))[:300]
        lines.append(f"- {entity.get('id')} ({place}): {state}")
    return "\n".join(lines)


def attempt_spans(*, attempt_id: str | UUID) -> list[ReadableSpan]:
    """The finished spans of one finished attempt's trace (empty if it is not finished)."""
    attempt = (
        TurnAttempt.objects.select_related("world__experiment")
        .filter(pk=attempt_id, status__in=FINISHED)
        .first()
    )
    if attempt is None:
        return []
    invocations = list(
        SourceInvocation.objects.filter(attempt=attempt).select_related("llm_call").order_by("seq")
    )
    events = list(AttemptEvent.objects.filter(attempt=attempt).order_by("seq"))
    transitions = list(
        PatchTransition.objects.filter(attempt=attempt)
        .order_by("patch_seq", "effect_index")
        .values_list("patch_seq", "op", "target_id")
    )
    providers = _providers(invocations)
    world = attempt.world
    slug = world.slug
    session = {"session.id": slug, "gen_ai.conversation.id": slug}
    committed = attempt.status == AttemptStatus.COMMITTED
    # The node the attempt failed in: the one its failure names, else the one whose call failed
    # last (a node between a red subject and a red call is red too).
    failed_node = next(
        (e.node_id for e in reversed(events) if e.kind == EventKind.ATTEMPT_FAILED), ""
    ) or next(
        (
            inv.node_id
            for inv in reversed(invocations)
            if inv.subject_id == attempt.failure_subject
            and inv.status != InvocationStatus.SUCCEEDED
        ),
        "",
    )

    ids = _DerivedIds(attempt.pk.int)
    collected = _Collect()
    provider = TracerProvider(resource=_resource(), id_generator=ids)
    provider.add_span_processor(collected)
    tracer = provider.get_tracer(SCOPE)

    attempt_start = attempt.started_at or attempt.queued_at
    attempt_end = attempt.ended_at or max(
        [i.ended_at for i in invocations if i.ended_at] + [attempt_start]
    )

    def end_of(inv: SourceInvocation) -> datetime:
        return inv.ended_at or attempt_end

    # Subjects in the order they first appear, from their calls and from their events (a
    # subject whose rule policy calls nothing leaves only events).
    subjects: dict[str, _Subject] = {}
    loose: list[SourceInvocation] = []
    for inv in invocations:
        if not inv.subject_id:
            loose.append(inv)
            continue
        subject = subjects.setdefault(inv.subject_id, _Subject(inv.subject_id))
        subject.nodes.setdefault(inv.node_id, []).append(inv)
        subject.moments += [inv.started_at, end_of(inv)]
    interventions: list[AttemptEvent] = []
    for event in events:
        if not event.subject_id and event.kind == EventKind.WORLD_PATCH_APPLIED:
            interventions.append(event)  # an operator's patch, applied before anyone thinks
            continue
        if not event.subject_id or event.kind in (
            EventKind.ATTEMPT_FAILED,
            EventKind.ATTEMPT_INTERRUPTED,
            EventKind.ATTEMPT_CANCELLED,
        ):
            continue
        subject = subjects.setdefault(event.subject_id, _Subject(event.subject_id))
        subject.moments.append(event.created_at)
        if event.kind == EventKind.WORLD_PATCH_APPLIED:
            subject.patches.append(event)
        elif event.node_id:
            subject.node_events.setdefault(event.node_id, []).append(event)
            subject.nodes.setdefault(event.node_id, [])

    narrations = _narrations(interventions + [p for s in subjects.values() for p in s.patches])
    ids.next_span_id = _uuid_span_id(attempt.pk)
    turn = attempt.produced_turn or attempt.attempted_turn
    failure = f"{attempt.failure_step}: {attempt.failure_reason}"
    root = tracer.start_span(
        f"{slug} turn {turn}" if turn is not None else f"{slug} attempt",
        start_time=_ns(attempt_start),
        attributes=without_none(
            {
                "openinference.span.kind": CHAIN,
                **session,
                "chukwa.world.slug": slug,
                "chukwa.attempt.id": str(attempt.pk),
                "chukwa.attempt.status": attempt.status,
                "chukwa.attempt.turn": attempt.attempted_turn,
                "chukwa.attempt.produced_turn": attempt.produced_turn,
                "chukwa.attempt.failure_step": attempt.failure_step,
                "chukwa.attempt.failure_subject": attempt.failure_subject,
                "chukwa.attempt.failure_reason": scrub(attempt.failure_reason),
                # an experiment's world says which experiment, arm and replicate it is
                "chukwa.experiment": world.experiment.slug if world.experiment else None,
                "chukwa.arm": world.arm or None,
                "chukwa.replicate": world.replicate,
                # What the turn is for a reader: its page (absolute, at CHUKWA_SITE_URL), the
                # situation it started from, and what it told (or why it failed).
                "input.value": _opening(attempt),
                "input.mime_type": "text/plain",
                "output.value": (
                    "\n\n".join(f"{n['subject']}: {n['narration']}" for n in narrations)
                    if committed
                    else scrub(failure)
                ),
                "output.mime_type": "text/plain",
            }
        ),
    )
    if committed:
        _ok(root)
    else:
        _error(root, attempt.failure_step or str(attempt.status), failure)
    root_context = trace.set_span_in_context(root)

    def emit(inv: SourceInvocation, context: Context) -> None:
        source_provider = providers.get(inv.source_hash, "")
        name, kind, attributes = invocation_span(inv, source_provider)
        ids.next_span_id = _uuid_span_id(inv.pk)
        span = tracer.start_span(
            name,
            context=context,
            kind=kind,
            start_time=_ns(inv.started_at),
            attributes={**session, **attributes},
        )
        if inv.status == InvocationStatus.SUCCEEDED:
            _ok(span)
        else:
            _error(
                span,
                inv.failure_class or str(inv.status),
                f"{inv.failure_class}: {inv.failure_message}",
            )
        span.end(end_time=_ns(end_of(inv)))

    def patch_event(span: Span, event: AttemptEvent) -> None:
        payload = event.payload if isinstance(event.payload, dict) else {}
        patch = payload.get("patch", {})
        narration = patch.get("narration") if isinstance(patch, dict) else None
        changed = [f"{op} {target}" for seq, op, target in transitions if seq == event.patch_seq]
        span.add_event(
            "world_patch_applied",
            attributes=without_none(
                {
                    "chukwa.patch.seq": event.patch_seq,
                    "chukwa.node.id": event.node_id,
                    "chukwa.patch.committed": committed,
                    "chukwa.patch.narration": scrub(narration)
                    if isinstance(narration, str)
                    else None,
                    "chukwa.patch.changes": changed or None,
                    "chukwa.patch.transition_count": payload.get("transition_count"),
                    "chukwa.patch": as_json(scrub_json(patch)) if capture_content() else None,
                }
            ),
            timestamp=_ns(event.created_at),
        )

    for event in interventions:
        patch_event(root, event)
        intervention = (event.payload or {}).get("intervention") or {}
        root.add_event(
            "intervention",
            attributes=without_none(
                {
                    "chukwa.intervention.id": intervention.get("id"),
                    "chukwa.intervention.operator": intervention.get("operator"),
                    "chukwa.intervention.note": scrub(intervention.get("note") or "") or None,
                }
            ),
            timestamp=_ns(event.created_at),
        )

    for subject in subjects.values():
        subject_id = subject.subject_id
        ids.next_span_id = _path_span_id(str(attempt.pk), subject_id)
        told = _narrations(subject.patches)
        subject_span = tracer.start_span(
            f"invoke_agent {subject_id}",
            context=root_context,
            start_time=_ns(min(subject.moments)),
            attributes=without_none(
                {
                    "openinference.span.kind": AGENT,
                    **session,
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": subject_id,
                    "agent.name": subject_id,
                    "chukwa.subject.id": subject_id,
                    "input.value": attempt.get_absolute_url(),
                    "input.mime_type": "text/plain",
                    "output.value": "\n\n".join(n["narration"] for n in told) or None,
                    "output.mime_type": "text/plain" if told else None,
                }
            ),
        )
        subject_failed = not committed and attempt.failure_subject == subject_id
        subject_context = trace.set_span_in_context(subject_span)
        for inv in subject.nodes.get("", []):  # its ambient context, read before its workflow
            emit(inv, subject_context)
        for node_id, rows in subject.nodes.items():
            if not node_id:
                continue
            node_events = subject.node_events.get(node_id, [])
            moments = [m for inv in rows for m in (inv.started_at, end_of(inv))] + [
                e.created_at for e in node_events
            ]
            workflow_hash = rows[0].workflow_hash if rows else node_events[0].workflow_hash
            ids.next_span_id = _path_span_id(str(attempt.pk), subject_id, node_id)
            node_span = tracer.start_span(
                f"node {node_id}",
                context=subject_context,
                start_time=_ns(min(moments)),
                attributes=without_none(
                    {
                        "openinference.span.kind": CHAIN,
                        **session,
                        "chukwa.subject.id": subject_id,
                        "chukwa.node.id": node_id,
                        "chukwa.workflow.hash": workflow_hash,
                        "input.value": attempt.get_absolute_url(),
                        "input.mime_type": "text/plain",
                    }
                ),
            )
            node_context = trace.set_span_in_context(node_span)
            for inv in rows:
                emit(inv, node_context)
            if subject_failed and node_id == failed_node:
                _error(node_span, attempt.failure_step or str(attempt.status), failure)
            else:
                _ok(node_span)
            node_span.end(end_time=_ns(max(moments)))
        for event in subject.patches:
            patch_event(subject_span, event)
        if subject_failed:
            _error(subject_span, attempt.failure_step or str(attempt.status), failure)
        else:
            _ok(subject_span)
        subject_span.end(end_time=_ns(max(subject.moments)))
    for inv in loose:
        emit(inv, root_context)
    root.end(end_time=_ns(attempt_end))
    provider.shutdown()
    return collected.spans
