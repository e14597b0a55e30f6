"""The experiment estimate's answer (``POST /api/experiments/estimate/``; docs/experiments.md,
"Estimate and budget"), field by field for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from surfaces.api.contract import described
from surfaces.api.experiment_power import PowerEstimateSerializer

EXPERIMENT_BUDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "max_cost_total": {"type": "string", "nullable": True, "description": "a decimal"},
        "max_tokens_total": {"type": "integer", "nullable": True, "minimum": 1},
    },
    "additionalProperties": False,
}


class EstimateSerializer(serializers.Serializer):
    class Calls(serializers.Serializer):
        agents = serializers.IntegerField()
        judges = serializers.IntegerField()
        total = serializers.IntegerField()

        class Meta:
            ref_name = "ExperimentEstimateCalls"

    class Tokens(serializers.Serializer):
        prompt = serializers.IntegerField(help_text="estimated (characters / 4)")
        completion = serializers.IntegerField(help_text="an upper bound")
        total = serializers.IntegerField()

        class Meta:
            ref_name = "ExperimentEstimateTokens"

    worlds = serializers.IntegerField()
    turns_per_world = serializers.IntegerField()
    calls = Calls(help_text="the most LLM calls it could make, retries included")
    tokens = Tokens()
    cost = serializers.DecimalField(
        max_digits=30,
        decimal_places=6,
        allow_null=True,
        help_text="at the prices in force now; null when a call has no price",
    )

    class JudgeCost(serializers.Serializer):
        online = serializers.DecimalField(
            max_digits=30,
            decimal_places=6,
            allow_null=True,
            help_text="the judge calls at the online prices (part of cost); null when one has "
            "no price",
        )
        batch = serializers.DecimalField(
            max_digits=30,
            decimal_places=6,
            allow_null=True,
            help_text="the judge calls with those of sources declaring interface.batch sent "
            "through the provider's Batch API, at the batch prices; null when no judge source "
            "declares batch, or a price row has no batch prices (unknown, never the online "
            "price)",
        )
        batch_declared = serializers.BooleanField(
            help_text="some judge source declares interface.batch"
        )

        class Meta:
            ref_name = "ExperimentEstimateJudgeCost"

    judge_cost = JudgeCost(help_text="the judge calls priced online and in batches, side by side")

    class BatchCost(serializers.Serializer):
        mode = serializers.CharField(help_text='the design\'s mode: "online" or "batch"')
        online = serializers.DecimalField(
            max_digits=30,
            decimal_places=6,
            allow_null=True,
            help_text="every call at the online prices (the same as cost)",
        )
        batch = serializers.DecimalField(
            max_digits=30,
            decimal_places=6,
            allow_null=True,
            help_text="the design as its mode sends it: the calls that go into provider batches "
            "(a judge's whose source declares interface.batch; in batch mode an agent's too) at "
            "the batch prices, the others at the online prices; null when no call goes into a "
            "batch, or a price is unknown (a batch call's price row with no batch prices: "
            "never the online price)",
        )
        batch_declared = serializers.BooleanField(
            help_text="some of the design's calls go into provider batches"
        )
        calls_batched = serializers.IntegerField(
            help_text="how many of calls.total go into provider batches"
        )

        class Meta:
            ref_name = "ExperimentEstimateBatchCost"

    batch_cost = BatchCost(
        help_text="the whole design priced online and as its mode sends it, side by side"
    )
    unpriced = serializers.ListField(child=serializers.CharField())
    unbounded = serializers.ListField(
        child=serializers.CharField(), help_text="sources with no max_tokens: no bound"
    )
    budget = described(EXPERIMENT_BUDGET_SCHEMA, allow_null=True)
    within_budget = serializers.BooleanField(
        allow_null=True, help_text="null: no budget, or unknown (unpriced or unbounded)"
    )
    method = serializers.CharField()
    power = PowerEstimateSerializer(
        allow_null=True, help_text="the replicates needed for the power asked; null: not asked"
    )
    seconds = serializers.IntegerField(
        allow_null=True,
        help_text="the expected wall time: the models' observed median latency, the "
        "concurrency the limits allow, each world's turns in sequence; null when a model's "
        "latency is unknown (no call of it recorded yet), and in batch mode (set by the "
        "provider's completion window and the ticks, as seconds_basis says)",
    )
    seconds_basis = serializers.CharField(
        help_text="what seconds rests on (latencies, calls, concurrency), or why it is null"
    )

    class Recorded(serializers.Serializer):
        worlds = serializers.IntegerField(
            help_text="planned worlds with a twin already run (same scenario, seed, start, "
            "branch point and interventions)"
        )
        turns = serializers.IntegerField(help_text="their turns the twins already ran")
        calls = serializers.IntegerField(
            help_text="the twins' succeeded model calls of those turns, agents' and judges'"
        )
        cost = serializers.DecimalField(
            max_digits=30,
            decimal_places=6,
            allow_null=True,
            help_text="what those calls cost when made; null when one had no price",
        )
        basis = serializers.CharField(help_text="why these count, or why nothing can")

        class Meta:
            ref_name = "ExperimentEstimateRecorded"

    recorded = Recorded(
        help_text='what reuse "exact" answers from the record (not subtracted from the bound)'
    )

    class Meta:
        ref_name = "ExperimentEstimate"
