"""Replay: serving a source call from a recorded succeeded invocation of another world.

A call is matched by its request key: sha256 of the canonical JSON of the source hash
and the request as sent, minus credentials and per-call ids (the ``X-Chukwa-*`` headers, the
invocation id) and minus where it is sent (the URL comes from the environment, not the request).
The k-th use of a key in the replaying world is served by the k-th recording of that key in the
source world, recordings ordered by (attempted turn, seq): ambient sources that ask the same
thing every turn (the turn travels in a header) get each turn's own answer back.

Which rows count on either side is the worlds layer's decision, passed down as querysets (this
layer knows nothing of attempts' outcomes): the source world's recordings and the replaying
world's earlier uses both come from committed attempts only, so that a failed attempt neither
offers a reply the committed history never saw nor consumes one its retry needs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from django.db.models import QuerySet

from chukwa_core.hashing import canonical_json_bytes
from cognition_app.failures import SourceFailure
from cognition_app.models import InvocationStatus, SourceInvocation
from cognition_app.recording import CallRecord
from cognition_app.sources.context import CallContext

REPLAY_THEN_LIVE = "replay_then_live"
REPLAY_STRICT = "replay_strict"
REPLAY_MODES = (REPLAY_THEN_LIVE, REPLAY_STRICT)


def request_key(source_hash: str, request: Mapping[str, Any]) -> str:
    """The request key of a call: ``request`` is what is sent, without credentials, per-call ids
    or the URL (which the source names by variable, hashed into ``source_hash``)."""
    return request_key_of(source_hash, canonical_json_bytes(request))


def request_key_of(source_hash: str, canonical_request: bytes) -> str:
    """The request key from the request's RFC 8785 bytes (``canonical_json_bytes``; a
    generation makes them once, to be both sent and hashed): sha256 of the canonical JSON of
    ``{"source_hash": …, "request": …}``. An object's canonical form is its members sorted,
    each value in its own canonical form, so these are its bytes ("request" sorts first)."""
    wrapped = b'{"request":%s,"source_hash":%s}' % (
        canonical_request,
        canonical_json_bytes(source_hash),
    )
    return hashlib.sha256(wrapped).hexdigest()


@dataclass
class Replay:
    """One attempt's view of its world's replay source; thread-safe (concurrent subjects)."""

    source_world_slug: str
    strict: bool
    recorded: QuerySet[SourceInvocation]  # the source world's recordings that count
    used: QuerySet[SourceInvocation]  # this world's earlier uses that count (not this attempt)
    _uses: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str) -> SourceInvocation | None:
        """The recording that serves this use of ``key``, or None. Every call counts as a use,
        served or not, exactly as it counts in the source world (a call is counted once, however
        many tries it took)."""
        with self._lock:
            if key not in self._uses:
                # succeeded uses only, as recordings are: a committed attempt may hold the
                # failed tries of a call its source's retry policy tried again
                self._uses[key] = self.used.filter(
                    request_key=key, status=InvocationStatus.SUCCEEDED
                ).count()
            k = self._uses[key]
            self._uses[key] = k + 1
        found = list(
            self.recorded.filter(request_key=key, status=InvocationStatus.SUCCEEDED)
            .select_related("llm_call")
            .order_by("attempted_turn", "seq")[k : k + 1]
        )
        return found[0] if found else None


def open_replayed(
    ctx: CallContext,
    *,
    kind: str,
    source_hash: str,
    source: Mapping[str, Any],
    request: Any,
    key: str,
    record: SourceInvocation,
    input_schema_hash: str = "",
    output_schema_hash: str = "",
) -> CallRecord:
    """The record (not written yet) of a call served from ``record``."""
    return CallRecord.new(
        ctx,
        kind=kind,
        source_hash=source_hash,
        source=source,
        request=request,
        request_key=key,
        input_schema_hash=input_schema_hash,
        output_schema_hash=output_schema_hash,
        replayed_from=record.pk,
    )


def fail_miss(
    ctx: CallContext,
    *,
    kind: str,
    source_hash: str,
    source: Mapping[str, Any],
    request: Any,
    key: str,
    what: str,
) -> NoReturn:
    """``replay_strict`` and no recording: a failed invocation, no byte sent."""
    replay = ctx.replay
    assert replay is not None
    message = (
        f"replay_strict: no recorded succeeded invocation of world {replay.source_world_slug!r} "
        f"left for request key {key} ({what}, source {source.get('label', '')!r} "
        f"{source_hash[:12]})"
    )
    call = CallRecord.new(
        ctx, kind=kind, source_hash=source_hash, source=source, request=request, request_key=key
    )
    raise call.refused(SourceFailure("replay_miss", message))
