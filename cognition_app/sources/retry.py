"""A source's ``retry`` policy: a call that failed in transport is tried again, each try traced as
a row of its own.

Only transport failures are tried again (a timeout, a refused or dropped connection, HTTP 5xx or
429 — a 429, the endpoint asking to slow down, up to :data:`RATE_LIMITED_TRIES` times even
without a policy): never a model-content failure (``cognition_app.llm_nodes`` has its own lane for those),
never another 4xx, a budget refusal, a cancel or a configuration error, and never a call served
from a recording (a strict replay never goes live). Each try opens its own rows before any byte
is sent, passes every limit again (``cognition_app.sources.admission``: a call waiting between
tries holds no slot, and a rate window counts each try), reserves and settles its own budget,
and has its own ``timeout_ms``; a later try's row names the first try's (``retry_of``). Between tries the call waits ``backoff_ms``, doubled after
each try, or longer when the endpoint's ``Retry-After`` asks so (capped by one ``timeout_ms``);
a stop of the attempt ends the wait at once.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from cognition_app.failures import SourceFailure
from cognition_app.recording import CallRecord
from cognition_app.sources.context import CallContext

T = TypeVar("T")

# The failure classes a try ends with when the exchange, not the request, went wrong.
TRANSIENT_CLASSES = frozenset({"transport", "server_error"})
# The longest wait between two tries, whatever the backoff doubled to.
MAX_WAIT_SECONDS = 30.0
# A 429 (rate limited) is tried again this many times in all, whatever the source's policy,
# after its Retry-After (at least this long without one), within the attempt's window.
RATE_LIMITED_TRIES = 5
RATE_LIMITED_MIN_WAIT_SECONDS = 0.5


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int  # tries in all, the first included
    backoff_ms: int  # the wait before the second try, doubled before each later one

    @property
    def most_tries(self) -> int:
        """The most tries one call can take: its policy's, or a 429's when more (what an
        estimate's upper bound counts)."""
        return max(self.attempts, RATE_LIMITED_TRIES)

    @property
    def billed_tries(self) -> int:
        """The most tries of one call that can spend tokens: its policy's (a 429 is refused
        before anything is generated, so its extra tries cost nothing)."""
        return self.attempts

    def allowed(self, exc: SourceFailure) -> int:
        """Tries allowed in all once a try failed with ``exc``: a 429 is waited out up to
        :data:`RATE_LIMITED_TRIES` tries, whatever the policy."""
        return self.most_tries if exc.http_status == 429 else self.attempts


def retry_policy(interface: Mapping[str, Any]) -> RetryPolicy:
    """The interface's policy (validated at put); one try when it names none."""
    retry = interface.get("retry") or {}
    return RetryPolicy(attempts=retry.get("attempts", 1), backoff_ms=retry.get("backoff_ms", 0))


def is_transient(exc: SourceFailure) -> bool:
    """A failure another try could cure: a transport failure that is not a 4xx other than 429."""
    if exc.failure_class not in TRANSIENT_CLASSES:
        return False
    status = exc.http_status
    return status is None or status == 429 or not 400 <= status < 500


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds, or an HTTP date) in seconds from now; None when
    absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - timezone.now()).total_seconds())


def wait_before(policy: RetryPolicy, tries: int, exc: SourceFailure, timeout_s: float) -> float:
    """Seconds to wait before try ``tries + 1``: the backoff doubled once per earlier retry,
    or the endpoint's ``Retry-After`` when longer, never more than one ``timeout_ms``."""
    wait = min(policy.backoff_ms / 1000 * 2 ** (tries - 1), MAX_WAIT_SECONDS)
    asked = retry_after_seconds(exc.retry_after)
    if asked is not None:
        wait = max(wait, min(asked, timeout_s, MAX_WAIT_SECONDS))
    return wait


def with_retries(
    *,
    interface: Mapping[str, Any],
    ctx: CallContext,
    what: str,
    call: Callable[[CallContext], T],
) -> T:
    """``call`` (one try, opening and finishing its own rows), tried again on a transient failure
    as the source's policy allows. A try starts only if it could end within a third of the
    attempt's soft time limit of the first: retries never push an attempt into its time limit.
    When the tries are exhausted, the last failure is raised, naming every try."""
    policy = retry_policy(interface)
    if ctx.replay is not None and ctx.replay.strict:
        return call(ctx)
    timeout_s = interface["timeout_ms"] / 1000
    window_ends = time.monotonic() + settings.CHUKWA_ATTEMPT_SOFT_TIME_LIMIT / 3
    tries: list[SourceFailure] = []
    first: UUID | None = None
    while True:
        try:
            return call(ctx if first is None else dataclasses.replace(ctx, retry_of=first))
        except SourceFailure as exc:
            tries.append(exc)
            if first is None:
                first = exc.invocation_id
            if not is_transient(exc) or first is None or exc.invocation_id is None:
                raise _naming_tries(exc, tries) from None
            wait = wait_before(policy, len(tries), exc, timeout_s)
            allowed = policy.allowed(exc)
            if exc.http_status == 429:
                # the endpoint asked to slow down, not a fault: waited out, whatever the policy
                wait = max(wait, RATE_LIMITED_MIN_WAIT_SECONDS)
            if len(tries) >= allowed or time.monotonic() + wait + timeout_s > window_ends:
                raise _naming_tries(exc, tries) from None
            if ctx.cancel is not None and ctx.cancel.wait(wait):
                ctx.cancel.check(what)  # stopped while waiting: no further try
            elif ctx.cancel is None:
                time.sleep(wait)


def try_record(first: CallRecord, ctx: CallContext) -> CallRecord:
    """The record (not written yet) of a JSON source call's try: ``first`` itself for the first
    try, else a new row asking the same, with a seq and a start of its own, naming the first
    try."""
    if ctx.retry_of is None:
        return first
    inv = first.invocation
    return CallRecord.new(
        ctx,
        kind=inv.kind,
        source_hash=inv.source_hash,
        source={"label": inv.source_label},
        request=copy.deepcopy(inv.request),
        request_key=inv.request_key,
        input_schema_hash=inv.input_schema_hash,
        output_schema_hash=inv.output_schema_hash,
    )


def _naming_tries(last: SourceFailure, tries: list[SourceFailure]) -> SourceFailure:
    """The last failure, its message listing every try when there were several."""
    if len(tries) == 1:
        return last
    listed = "; ".join(
        f"try {n} ({exc.invocation_id}): {exc.failure_class}: {exc.message[:200]}"
        for n, exc in enumerate(tries, 1)
    )
    return SourceFailure(
        last.failure_class,
        f"{last.message} — after {len(tries)} tries: {listed}",
        invocation_id=last.invocation_id,
        http_status=last.http_status,
        retry_after=last.retry_after,
    )
