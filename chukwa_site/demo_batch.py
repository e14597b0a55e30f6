"""The demo's park experiment in batch mode (``./bin/demo --experiment park --batch``;
docs/costs.md, "Batch mode (experiments)"): the park's walker asks its model through the
provider's Batch API, here the embedded model's Files/Batches endpoints, so the run shows
lockstep ticks offline.

The plain ``park`` fixture is left as it is: the batch run forks it into ``park_batch``, whose
walker's LLM source declares ``interface.batch`` (a source is content-addressed, so the fork's
source is a new one and the plain demo's calls never go through a batch). While the experiment
runs, a thread samples every :data:`SAMPLE_SECONDS` how many of its attempts hold a worker while
one of its provider batches is pending; at the end :func:`summary` prints the ticks, the requests
sent in batches, those worker-seconds and the cost online against batch.
"""

from __future__ import annotations

import copy
import threading
from decimal import Decimal

from django.db import connection

BATCH = {"api": "openai", "completion_window": "24h"}
# Polls of the provider batches in the demo: the product's default (10 s) would add up to 10 s
# of idle waiting to every tick of a batch the embedded model answers within seconds.
DEMO_POLL_SECONDS = "2"
SAMPLE_SECONDS = 0.5


def park_batch_scenario() -> str:
    """The hash of ``park_batch``: ``park`` whose walker's LLM source declares ``batch``
    (stored again on every run: content-addressed, so nothing new after the first)."""
    from scenarios_app.fixture_files import load_fixture
    from scenarios_app.services import scenario_fork

    walker = copy.deepcopy(load_fixture("park")["cognition_profiles"]["walker"])
    for node in walker["inline"]["workflow"]["inline"]["nodes"]:
        source = node.get("llm_source_ref", {}).get("inline")
        if source is not None:
            source["interface"]["batch"] = dict(BATCH)
    return scenario_fork(
        data={
            "primary_parent": {"name": "park"},
            "changes": {"cognition_profile_upserts": {"walker": walker}},
            "name": "park_batch",
            "operator": "demo",
            "note": "demo: the walker's model answers through the provider's Batch API",
        }
    )["scenario_hash"]


class HeldWhilePending(threading.Thread):
    """Samples the experiment ``slug``: the attempts running while one of its provider batches
    is pending, times the sampling period, summed (``seconds``)."""

    def __init__(self, slug: str) -> None:
        super().__init__(name="demo-batch-sampler", daemon=True)
        self.slug = slug
        self.seconds = 0.0
        self.samples = 0
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        from cognition_app.models import ProviderBatch
        from worlds_app.models import Experiment, TurnAttempt
        from worlds_app.services.batch_mode import batch_owner

        try:
            while not self._stop_event.wait(SAMPLE_SECONDS):
                experiment = Experiment.objects.filter(slug=self.slug).first()
                if experiment is None:
                    continue
                pending = ProviderBatch.objects.filter(
                    requests__owner=batch_owner(experiment.pk), ended_at=None
                ).exists()
                if not pending:
                    continue
                self.samples += 1
                running = TurnAttempt.objects.filter(
                    world__experiment=experiment, status="running"
                ).count()
                self.seconds += running * SAMPLE_SECONDS
        finally:
            connection.close()


def _amount(value: Decimal | None) -> str:
    return "unknown" if value is None else format(value.normalize(), "f")


def summary(slug: str, held: HeldWhilePending) -> list[str]:
    """What the batch run did: ticks, requests sent in batches, batched calls, worker-seconds
    held while batches were pending, and the batched calls' cost online against batch (each
    "unknown" when a call has no price row or, for batch, no batch prices)."""
    from cognition_app.costs import price_at, usage_cost
    from cognition_app.models import BatchRequest, LlmCall
    from worlds_app.models import Experiment
    from worlds_app.services.batch_mode import batch_owner, batch_progress

    experiment = Experiment.objects.get(slug=slug)
    progress = batch_progress(experiment.pk)
    requests = BatchRequest.objects.filter(owner=batch_owner(experiment.pk)).exclude(batch=None)
    calls = list(LlmCall.objects.filter(invocation__world__experiment=experiment, batched=True))
    online: Decimal | None = Decimal(0)
    batch: Decimal | None = Decimal(0)
    for call in calls:
        price = price_at(url_env=call.base_url_env, model=call.requested_model, at=call.started_at)
        if price is None or call.prompt_tokens is None or call.completion_tokens is None:
            online = None
        elif online is not None:
            online += usage_cost(
                price,
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                cached_tokens=call.cached_tokens or 0,
            )
        batch = None if call.cost is None or batch is None else batch + call.cost
    why = (
        " (unknown: no price row for the model; see docs/costs.md, Prices)"
        if online is None
        else " (unknown: its price row has no batch prices; see docs/costs.md, Prices)"
        if batch is None
        else ""
    )
    return [
        f"ticks (provider batches): {progress['ticks']}",
        f"requests sent in batches: {requests.count()} "
        f"({requests.values('batch_id').distinct().count()} batches, "
        f"{requests.filter(status='completed').count()} answered)",
        f"model calls answered from a batch: {len(calls)}",
        f"worker-seconds held while a batch was pending: {held.seconds:g} "
        f"(running attempts sampled every {SAMPLE_SECONDS:g} s over {held.samples} samples "
        f"with a batch pending)",
        f"cost of the batched calls: online {_amount(online)}, batch {_amount(batch)}{why}",
    ]
