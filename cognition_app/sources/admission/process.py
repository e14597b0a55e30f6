"""The source's ``limits.concurrency`` within one worker process: that many slots per source
hash, taken before the cluster-wide lease (``cluster.py``) so that a process's own calls queue
here, in memory, instead of each asking Redis every step. It can never bind tighter than the
cluster-wide limit (the same n), and its waits are recorded as the ``concurrency`` limit's. An
interactive turn's call waiting here is served before the process's other calls
(``priority.Slots``).

One set of slots per source hash: a source's content, hence its limit, never changes under its
hash. A source stored before ``limits.concurrency`` was its one concurrency setting may still say
``max_concurrency``: its calls are refused naming the new spelling (put refuses it), never run
unbounded.
"""

from __future__ import annotations

import threading
from functools import partial

from cognition_app.failures import SourceFailure
from cognition_app.sources.admission.base import (
    WAIT_STEP_SECONDS,
    CallRequest,
    Held,
    Refused,
    Wait,
)
from cognition_app.sources.admission.priority import Slots

_lock = threading.Lock()
_slots: dict[str, Slots] = {}


class ProcessConcurrency:
    name = "concurrency"

    def take(self, request: CallRequest) -> Held | Wait | Refused:
        if "max_concurrency" in request.interface:
            return Refused(
                SourceFailure(
                    "config",
                    "interface.max_concurrency is no longer read: a source's one concurrency "
                    "setting is interface.limits.concurrency; put the source again with "
                    '"limits": {"concurrency": n}',
                )
            )
        limit = request.limits.get("concurrency")
        if not limit:
            return Held()
        with _lock:
            slots = _slots.get(request.source_hash)
            if slots is None:
                slots = _slots[request.source_hash] = Slots(limit)
        # blocks up to a step itself (a freed slot is taken at once, not a step later)
        if slots.take(request.token, request.who, request.interactive, WAIT_STEP_SECONDS):
            return Held(give_back=partial(slots.give_back, request.token))
        reason = slots.waiting_for(request.interactive)
        return Wait("concurrency", retry_in=0, reason=f"the source's slot: {reason}")


LIMIT = ProcessConcurrency()
