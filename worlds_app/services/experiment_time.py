"""How long an experiment takes, in seconds: the estimate's ``seconds`` before it runs and the
live ETA while it runs, one function (``time_of``) over the model in
``chukwa_core/experiment_time.py`` (docs/experiments.md, "Time estimate").

Its inputs are read, never assumed:
- each model's **latency** is the median wall time of its most recent successful recorded calls
  (the endpoint variable and model the source names, ``RECENT_CALLS`` of them); until one is
  recorded, the source's declared ``latency_ms`` if it has one;
- the **concurrency** is the tightest of what admission enforces: the deployment's bound on the
  endpoint (``<P>_MAX_CONCURRENCY``), each source's ``limits.concurrency``, and how many worlds
  of one experiment run at once (``CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT``), never more than the
  worlds there are;
- the **calls** each world still makes, source by source (the caller says).
Before any call of a model is recorded (and with no declared latency), ``seconds`` is None and
the basis says which model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, Max

from chukwa_core.experiment_time import TimeEstimate, seconds_text, wall_seconds
from chukwa_core.ids import bound_concurrency_env_name
from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationKind, InvocationStatus, LlmCall, SourceInvocation
from cognition_app.sources.admission.endpoint import endpoint_limit
from scenarios_app.models import ResponseSource

RECENT_CALLS = 50


@dataclass(frozen=True)
class Latency:
    median: float  # seconds
    calls: int  # how many it was observed over; 0 when declared (the source's latency_ms)


# The calls whose time the model spends: generations and judges that were sent (not a
# conformance check, short by design; not a call answered from the record, no time at the model).
TIMED_CALLS: dict[str, Any] = {
    "invocation__kind__in": (InvocationKind.LLM_GENERATION, InvocationKind.JUDGE),
    "invocation__reused_from__isnull": True,
}


def observed_latency(*, url_env: str, model: str) -> Latency | None:
    """The median duration of the model's last ``RECENT_CALLS`` successful generations through
    the endpoint ``url_env`` names (sent, not reused); None when none is recorded."""
    rows = (
        LlmCall.objects.filter(
            base_url_env=url_env,
            requested_model=model,
            status=InvocationStatus.SUCCEEDED,
            ended_at__isnull=False,
            **TIMED_CALLS,
        )
        .order_by("-started_at")
        .values_list("started_at", "ended_at")[:RECENT_CALLS]
    )
    durations = [(ended - started).total_seconds() for started, ended in rows if ended is not None]
    if not durations:
        return None
    return Latency(median=max(statistics.median(durations), 0.0), calls=len(durations))


@dataclass(frozen=True)
class Rounds:
    """How many generations one subject's turn of a node makes (a tool loop's rounds and every
    retry), observed over its most recent turns."""

    mean: float
    turns: int


def generations_per_turn(*, workflow_hash: str, node_id: str) -> Rounds | None:
    """The mean number of generations a subject's turn of the node made over its last
    ``RECENT_CALLS`` recorded turns; None when none is recorded."""
    rows = (
        SourceInvocation.objects.filter(
            workflow_hash=workflow_hash,
            node_id=node_id,
            kind=InvocationKind.LLM_GENERATION,
            attempt__isnull=False,
        )
        .values("attempt_id", "subject_id")
        .annotate(n=Count("id"), last=Max("started_at"))
        .order_by("-last")
        .values_list("n", flat=True)[:RECENT_CALLS]
    )
    counts = list(rows)
    if not counts:
        return None
    return Rounds(mean=statistics.fmean(counts), turns=len(counts))


def _interfaces(source_hashes: set[str]) -> dict[str, dict[str, Any]]:
    rows = ResponseSource.objects.filter(pk__in=source_hashes).values_list("pk", "content")
    return {pk: dict(dict(content or {}).get("interface", {})) for pk, content in rows}


def _parallel(interfaces: Sequence[Mapping[str, Any]], worlds: int) -> tuple[int, str]:
    """How many calls (so worlds) run at once, and what binds it."""
    in_flight = int(settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT)
    bounds: list[tuple[int, str]] = [
        (max(worlds, 1), f"{worlds} world{'s' if worlds != 1 else ''}"),
        (in_flight, f"CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT={in_flight}"),
    ]
    for iface in interfaces:
        limit = (iface.get("limits") or {}).get("concurrency")
        if isinstance(limit, int) and limit >= 1:
            bounds.append((limit, f"the source's limits.concurrency={limit}"))
        url_env = str(iface.get("base_url_env", ""))
        bound = endpoint_limit(url_env) if url_env else None
        if bound is not None:
            bounds.append((bound, f"{bound_concurrency_env_name(url_env)}={bound}"))
    return min(bounds, key=lambda bound: bound[0])


def time_of(worlds: Sequence[Mapping[str, float]], *, calls_basis: str = "") -> TimeEstimate:
    """The wall time of ``worlds``, each given as the calls it still makes per source hash
    (its turns in sequence), run side by side as the limits allow; ``calls_basis`` says where
    the calls' count comes from."""
    busy = [world for world in worlds if any(calls > 0 for calls in world.values())]
    if not busy:
        return TimeEstimate(
            0, "the design makes no model call (rule policies only): no model time to wait for"
        )
    interfaces = _interfaces({source for world in busy for source in world})
    latencies: dict[str, Latency] = {}
    seen: dict[tuple[str, str], str] = {}
    for source in sorted({source for world in busy for source in world}):
        iface = interfaces.get(source, {})
        url_env, model = str(iface.get("base_url_env", "")), str(iface.get("model", ""))
        latency = observed_latency(url_env=url_env, model=model)
        if latency is not None:
            text = (
                f"observed median {seconds_text(latency.median)} over {latency.calls} "
                f"call{'s' if latency.calls != 1 else ''} of {model}"
            )
        elif isinstance(iface.get("latency_ms"), int):
            latency = Latency(median=iface["latency_ms"] / 1000, calls=0)
            text = (
                f"declared latency_ms {iface['latency_ms']} of {model} (no call of it recorded yet)"
            )
        else:
            return TimeEstimate(
                None,
                f"no call of {model or '?'} ({url_env or '?'}) has been recorded yet and its "
                "source declares no latency_ms, so its latency is unknown: run a turn with it "
                "first",
            )
        latencies[source] = latency
        seen.setdefault((url_env, model), text)
    try:
        parallel, binding = _parallel(list(interfaces.values()), len(busy))
    except SourceFailure as exc:
        return TimeEstimate(None, f"the concurrency allowed is unknown: {exc.message}")
    per_world = [
        sum(calls * latencies[source].median for source, calls in world.items()) for world in busy
    ]
    calls = sum(sum(world.values()) for world in busy)
    seconds = math.ceil(wall_seconds(per_world, parallel))
    basis = (
        f"{'; '.join(seen.values())}; {parallel} at a time ({binding}); "
        f"{math.ceil(calls)} calls over {len(busy)} world{'s' if len(busy) != 1 else ''}, "
        "each world's turns in sequence" + (f"; {calls_basis}" if calls_basis else "")
    )
    return TimeEstimate(seconds, basis)
