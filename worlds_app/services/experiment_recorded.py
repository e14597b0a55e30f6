"""What of a planned experiment is already recorded (docs/costs.md, "What the estimate counts as
recorded"): for the estimate, before anything runs.

Under ``reuse: "exact"`` a world sends exactly what an earlier world sent as long as everything
it is given is the same: the scenario (its hash), the seed, the simulation start, the branch
point and the arm's interventions. Each request is answered from the record, so the next request
is the same again, turn after turn. A planned world has such a **twin** when the design fixes
its seed and its start (``seed``, and ``start_time`` or ``branch_from``: a start of "now" differs
from every earlier one) and an earlier experiment's world of the same scenario, seed, start,
branch point and interventions committed turns. The twin's succeeded model calls of the
turns both run (its agents' and the judges' of the design's metrics) are what the planned world
will not pay for. This assumes the sources other than models answer as they did (a tool that
reads the clock or a live service may not): the estimate says so and keeps its upper bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce

from chukwa_core.experiment_design import ExperimentDesign, PlannedIntervention
from chukwa_core.seeds import replicate_seed
from cognition_app.models import InvocationKind, InvocationStatus, LlmCall
from worlds_app.models import AttemptStatus, Experiment, Turn, World
from worlds_app.services.branches import BranchPoint


class Recorded(TypedDict):
    worlds: int  # planned worlds with a twin
    turns: int  # their turns already run by the twins
    calls: int  # the twins' succeeded model calls of those turns (agents' and judges')
    cost: str | None  # what those calls cost (or saved) when made; None when one had no price
    basis: str


@dataclass(frozen=True)
class _Twin:
    world_id: int
    turns: int  # the planned world's turns the twin already committed


def _interventions(items: tuple[PlannedIntervention, ...]) -> list[tuple[int, Any, str]]:
    return sorted((i.turn, dict(i.patch), i.note) for i in items)


def _twins(
    design: ExperimentDesign, start: datetime | None, point: BranchPoint | None
) -> list[_Twin]:
    """Each planned world's twin, when it has one (the one that ran furthest)."""
    first, last = design.first_turn, design.last_turn
    seeds = [replicate_seed(design.seed, r) for r in range(1, design.replicates + 1)]
    keys = Q()
    for arm in design.arms:
        keys |= Q(scenario_id=arm.scenario_hash, seed__in=seeds)
    rows = list(
        World.objects.filter(
            experiment__isnull=False, replay_source__isnull=True, current_turn__gt=first
        )
        .filter(
            Q(branched_from_slug=point.parent.slug, branched_from_turn=point.turn.number)
            if point is not None
            else Q(branched_from_slug="")
        )
        .filter(keys)
        .order_by("-current_turn", "pk")
        .values("pk", "scenario_id", "seed", "arm", "current_turn", "experiment_id")
    )
    designs = {
        pk: ExperimentDesign.from_json(stored)
        for pk, stored in Experiment.objects.filter(
            pk__in={r["experiment_id"] for r in rows}
        ).values_list("pk", "design")
    }
    starts: Mapping[int, datetime] = {}
    if point is None and rows:
        starts = dict(
            Turn.objects.filter(world_id__in=[r["pk"] for r in rows], number=0).values_list(
                "world_id", "simulation_time"
            )
        )
    by_key: dict[tuple[str, int | None], list[tuple[int, int, list[tuple[int, Any, str]]]]] = {}
    for row in rows:
        if point is None and starts.get(row["pk"]) != start:
            continue
        earlier = designs[row["experiment_id"]]
        if row["arm"] not in earlier.arm_labels:
            continue
        planned = _interventions(earlier.arm(row["arm"]).interventions)
        by_key.setdefault((row["scenario_id"], row["seed"]), []).append(
            (row["pk"], row["current_turn"], planned)
        )
    twins = []
    for arm in design.arms:
        mine = _interventions(arm.interventions)
        for seed in seeds:
            for world_id, current, theirs in by_key.get((arm.scenario_hash, seed), []):
                if theirs == mine:
                    twins.append(_Twin(world_id, min(current, last) - first))
                    break
    return twins


def recorded_of(
    design: ExperimentDesign,
    *,
    seed_given: bool,
    start: datetime | None,
    point: BranchPoint | None,
    metric_labels: list[str],
) -> Recorded:
    """What of ``design`` is already recorded (module docstring); ``start``: the design's
    ``start_time`` (None: "now", no twin possible unless it branches)."""
    none = "nothing: "
    why = ""
    if design.reuse != "exact":
        why = 'the design sends every request (reuse "off")'
    elif not seed_given:
        why = "no seed given, so each world's seed is new"
    elif start is None and point is None:
        why = "no start_time given, so the worlds start now, unlike any earlier world"
    elif design.replay_from is not None:
        why = "a replay answers from the experiment it replays"
    if why:
        return {"worlds": 0, "turns": 0, "calls": 0, "cost": "0", "basis": none + why}
    twins = _twins(design, start, point)
    judges = [f"metric:{label}" for label in metric_labels]
    agents = Q(
        invocation__kind=InvocationKind.LLM_GENERATION,
        invocation__attempt__status=AttemptStatus.COMMITTED,
        invocation__attempted_turn__gt=design.first_turn,
    )
    # the judges measure the first turn too (the baseline)
    judged = Q(invocation__kind=InvocationKind.JUDGE, invocation__node_id__in=judges)
    # per twin world and turn: its calls, their cost (a call answered from the record itself
    # cost 0 and saved what its original cost) and how many had no price
    per_turn = (
        LlmCall.objects.filter(
            agents | judged,
            invocation__world_id__in={t.world_id for t in twins},
            invocation__attempted_turn__lte=design.last_turn,
            invocation__status=InvocationStatus.SUCCEEDED,
        )
        .order_by()
        .values_list("invocation__world_id", "invocation__attempted_turn")
        .annotate(
            calls=Count("pk"),
            spent=Sum(Coalesce("cost_saved", "cost")),
            unpriced=Count(
                "pk",
                filter=Q(tokens_reused__isnull=True, cost__isnull=True)
                | Q(tokens_reused__isnull=False, cost_saved__isnull=True),
            ),
        )
    )
    found: dict[int, list[tuple[int, int, Decimal, int]]] = {}
    for world_id, turn, n, spent, unpriced in per_turn:
        found.setdefault(world_id, []).append((turn, n, spent or Decimal(0), unpriced))
    calls, total, unknown = 0, Decimal(0), False
    for twin in twins:  # a twin shared by two planned worlds answers both
        for turn, n, spent, unpriced in found.get(twin.world_id, []):
            if turn <= design.first_turn + twin.turns:
                calls, total, unknown = calls + n, total + spent, unknown or unpriced > 0
    cost = None if unknown else total
    return {
        "worlds": len(twins),
        "turns": sum(t.turns for t in twins),
        "calls": calls,
        "cost": None if cost is None else format(cost.quantize(Decimal("1e-6")), "f"),
        "basis": (
            f"{len(twins)} of the planned worlds have a twin already run (same scenario, "
            'seed, start, branch point and interventions): under reuse "exact" their '
            "recorded model calls are answered from the record, if the sources other than "
            "models answer as before; the upper bound above does not subtract them"
        ),
    }
