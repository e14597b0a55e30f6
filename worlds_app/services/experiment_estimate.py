"""What an experiment could spend, priced before it runs (docs/experiments.md, "Estimate and
budget"). Nothing is written.

The bound on **calls** is exact: every agent runs its profile's workflow once per turn; an
``llm_text`` node makes at most ``max_generation_attempts`` generations, an ``llm_tool_loop`` at
most ``max_tool_calls + max_generation_attempts``; a judge at most its ``max_generation_attempts``
per measured turn (turn 0, the baseline, included); each generation may be sent as many times
as its source's retry policy allows, a 429's tries included (``RetryPolicy.most_tries``). The
bound on **completion tokens** is exact too: each generation at most the source's
``max_tokens``, on each try that can spend tokens (``RetryPolicy.billed_tries``: a 429 is refused
before anything is generated, so its tries count as calls but spend nothing). **Prompt tokens** cannot be known before the
run (the world grows as it runs): each generation is taken as its prompt template, its node's
tools and schemas and the whole initial world, characters / 4, plus, in a tool loop, the
completion cap again for every earlier round of its transcript. That is why the budget is
enforced per call as the experiment runs, and why a source with no ``max_tokens`` makes the
estimate (and any budget) unbounded.

A judge whose source declares ``interface.batch`` is sent through the provider's Batch API
(docs/costs.md, "Batch"): ``judge_cost`` prices the judge calls both ways, online and at the
price table's batch prices (unknown when its price row has none); ``cost`` stays the online
bound. ``batch_cost`` prices the whole design the same two ways: in a design with
``"mode": "batch"`` an agent's call of a source declaring ``interface.batch`` goes into a provider
batch too (``cognition_app.sources.llm``: only with a batch owner and the source's ``batch``;
any other call is sent live, at the online price). A batch-mode design's wall time is not a
latency sum: ``seconds`` is None and its basis says what sets it (docs/costs.md, "Batch mode").
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from decimal import Decimal
from typing import Any, TypedDict

from django.db import transaction
from django.utils import timezone

from chukwa_core.experiment_design import BATCH
from chukwa_core.experiment_power import PowerEstimate
from chukwa_core.metric_kinds import METRIC_KINDS
from cognition_app.budgets import TOKENS_PER_MESSAGE, completion_cap
from cognition_app.costs import price_at, worst_case_batch_cost, worst_case_cost
from cognition_app.sources.retry import retry_policy
from scenarios_app.models import ResponseSource
from scenarios_app.selectors import metric_rows
from worlds_app.services.branches import design_branch_point
from worlds_app.services.experiment_design import design_of
from worlds_app.services.experiment_power import experiment_power
from worlds_app.services.experiment_recorded import Recorded, recorded_of
from worlds_app.services.experiment_time import Rounds, generations_per_turn, time_of
from worlds_app.services.factorial_arms import factorial_arms
from worlds_app.services.measurements import unmeasured_before
from worlds_app.services.worlds import parse_start_time, world_start

METHOD = (
    "upper bound on calls and completion tokens (every generation a node or judge may make; "
    "calls count each try its source's retry policy or a 429 allows, tokens each try its retry "
    "policy allows — a 429 spends nothing — each at its source's max_tokens); prompt tokens estimated from the "
    "prompt template, the node's tools and schemas and the initial world (characters / 4); "
    "cost at the prices in force now, no prompt token assumed cached"
)


class EstimateCalls(TypedDict):
    agents: int
    judges: int
    total: int


class EstimateTokens(TypedDict):
    prompt: int
    completion: int
    total: int


class JudgeCost(TypedDict):
    online: str | None  # the judge calls at the online prices; None when one has no price
    # when a judge source declares batch: the judge calls with those sent in batches at the
    # batch prices (None when their price row has none, or a call has no price at all)
    batch: str | None
    batch_declared: bool  # some judge source declares interface.batch


class BatchCost(TypedDict):
    mode: str  # the design's mode: "online" or "batch"
    online: str | None  # every call at the online prices (= ``cost``)
    # what the design sends in its mode, the calls that go into provider batches at the batch
    # prices and the others at the online prices; None when a price is unknown (a batch call's
    # price row with no batch prices, or a call with no price at all)
    batch: str | None
    batch_declared: bool  # some of the design's calls go into provider batches
    calls_batched: int  # how many of ``calls.total`` go into provider batches


class Estimate(TypedDict):
    worlds: int
    turns_per_world: int
    calls: EstimateCalls
    tokens: EstimateTokens
    cost: str | None
    judge_cost: JudgeCost
    batch_cost: BatchCost
    unpriced: list[str]
    unbounded: list[str]
    budget: dict[str, Any] | None
    within_budget: bool | None
    method: str
    # replicates needed for a power, when the request asked (``experiment_power``)
    power: PowerEstimate | None
    # the expected wall time (``experiment_time.time_of``) and what it rests on
    seconds: int | None
    seconds_basis: str
    # the planned worlds' calls an earlier twin already recorded (``experiment_recorded``)
    recorded: Recorded


def _llm_nodes(snapshot: Mapping[str, Any]) -> Iterator[tuple[str, str, str, bool]]:
    """(profile label, workflow hash, node id, is a tool loop) of every model node an agent of
    the snapshot thinks with."""
    profiles = snapshot["cognition_profiles"]
    for entity in snapshot["entities"]:
        kind = entity.get("kind")
        agent = kind.get("agent") if isinstance(kind, dict) else None
        if not isinstance(agent, dict) or agent.get("cognition_profile") not in profiles:
            continue
        profile = profiles[agent["cognition_profile"]]
        for node in profile["workflow"].get("nodes", []):
            if node.get("type") in ("llm_text", "llm_tool_loop"):
                looping = node["type"] == "llm_tool_loop"
                yield agent["cognition_profile"], profile["workflow_hash"], node["id"], looping


class _Rounds:
    """How many generations a model node makes per agent per turn, for the time estimate: as
    observed for that workflow's node (``generations_per_turn``); for a variant not run yet, as
    observed for the same profile's node in the design's other arms (arms are variants of each
    other); else one (a tool loop may make more: the basis says so)."""

    def __init__(self, snapshots: Sequence[Mapping[str, Any]]) -> None:
        self.observed: dict[tuple[str, str], Rounds] = {}
        self.by_profile: dict[tuple[str, str], list[Rounds]] = {}
        self.used: dict[str, set[str]] = {"observed": set(), "other arms": set(), "unseen": set()}
        for snapshot in snapshots:
            for label, workflow_hash, node_id, _ in _llm_nodes(snapshot):
                key = (workflow_hash, node_id)
                if key in self.observed:
                    continue
                seen = generations_per_turn(workflow_hash=workflow_hash, node_id=node_id)
                if seen is not None:
                    self.observed[key] = seen
                    self.by_profile.setdefault((label, node_id), []).append(seen)
        self.label_of = {
            (workflow_hash, node_id): label
            for snapshot in snapshots
            for label, workflow_hash, node_id, _ in _llm_nodes(snapshot)
        }

    def of(self, workflow_hash: str, node_id: str, looping: bool) -> float:
        label = self.label_of.get((workflow_hash, node_id), "?")
        name = f"{label}/{node_id} (workflow {workflow_hash[:8]})"
        seen = self.observed.get((workflow_hash, node_id))
        if seen is not None:
            self.used["observed"].add(f"{name} {seen.mean:.2g} over {seen.turns} turns")
            return seen.mean
        others = self.by_profile.get((self.label_of.get((workflow_hash, node_id), ""), node_id))
        if others:
            turns = sum(r.turns for r in others)
            mean = sum(r.mean * r.turns for r in others) / turns
            self.used["other arms"].add(f"{name} {mean:.2g}")
            return mean
        if looping:
            self.used["unseen"].add(name)
        return 1.0

    def basis(self) -> str:
        parts = []
        if self.used["observed"]:
            parts.append(
                "generations per agent turn as observed: "
                + ", ".join(sorted(self.used["observed"]))
            )
        if self.used["other arms"]:
            parts.append(
                "for a variant not run yet, as observed in the other arms: "
                + ", ".join(sorted(self.used["other arms"]))
            )
        if self.used["unseen"]:
            parts.append(
                "one generation per turn assumed for "
                + ", ".join(sorted(self.used["unseen"]))
                + " (never run: a tool loop may make more)"
            )
        return "; ".join(parts)


class _Tally:
    """Calls, tokens and cost added up source by source."""

    def __init__(self, *, mode: str) -> None:
        self.mode = mode
        self.calls = {"agents": 0, "judges": 0}
        self.prompt = 0
        self.completion = 0
        self.cost = Decimal(0)
        # the judge calls' cost online and with batch-declaring sources at the batch prices
        # (None: unknown)
        self.judge_online: Decimal | None = Decimal(0)
        self.judge_batch: Decimal | None = Decimal(0)
        self.judge_batch_declared = False
        # the whole design as its mode sends it (``batch_cost``)
        self.design_batch: Decimal | None = Decimal(0)
        self.calls_batched = 0
        self.windows: set[str] = set()
        self.unpriced: set[str] = set()
        self.unbounded: set[str] = set()
        self._sources: dict[str, dict[str, Any]] = {}
        self._prices: dict[tuple[str, str], Any] = {}
        self._now = timezone.now()

    def interface(self, source_hash: str) -> dict[str, Any]:
        if source_hash not in self._sources:
            row = ResponseSource.objects.filter(pk=source_hash).values_list("content", flat=True)
            self._sources[source_hash] = dict(row.first() or {}).get("interface", {})
        return self._sources[source_hash]

    def add(
        self, *, who: str, source_hash: str, per_run: int, runs: int, prompt: int, growing: bool
    ) -> None:
        """``runs`` runs (a node's turn, a judge's measured turn) of at most ``per_run``
        generations of one source, each ``prompt`` tokens, plus, when the transcript grows
        round by round (a tool loop), the completion cap for every earlier round."""
        iface = self.interface(source_hash)
        policy = retry_policy(iface)
        calls = per_run * runs * policy.most_tries
        self.calls[who] += calls
        tries = policy.billed_tries
        cap = completion_cap(iface.get("params", {}))
        key = f"({iface.get('base_url_env', '?')}, {iface.get('model', '?')})"
        if cap is None:
            self.unbounded.add(key)
            cap = 0
        grown = cap * per_run * (per_run - 1) // 2 if growing else 0
        prompt_total = (prompt * per_run + grown) * runs * tries
        completion_total = cap * per_run * runs * tries
        self.prompt += prompt_total
        self.completion += completion_total
        price_key = (str(iface.get("base_url_env", "")), str(iface.get("model", "")))
        if price_key not in self._prices:
            self._prices[price_key] = price_at(
                url_env=price_key[0], model=price_key[1], at=self._now
            )
        price = self._prices[price_key]
        online = None
        if price is None:
            self.unpriced.add(key)
        else:
            online = worst_case_cost(
                price, prompt_tokens=prompt_total, completion_tokens=completion_total
            )
            self.cost += online
        batched = online
        # a judge's calls go into batches whenever its source declares batch; an agent's only
        # in batch mode (``cognition_app.sources.llm``: a batch owner and the source's batch)
        in_batch = bool(iface.get("batch")) and (who == "judges" or self.mode == BATCH)
        if in_batch:
            self.calls_batched += calls
            self.windows.add(str(iface["batch"].get("completion_window", "?")))
            batched = (
                worst_case_batch_cost(
                    price, prompt_tokens=prompt_total, completion_tokens=completion_total
                )
                if price is not None
                else None
            )
        self.design_batch = _plus(self.design_batch, batched)
        if who == "judges":
            self.judge_batch_declared = self.judge_batch_declared or in_batch
            self.judge_online = _plus(self.judge_online, online)
            self.judge_batch = _plus(self.judge_batch, batched)

    def judge_cost(self) -> JudgeCost:
        return {
            "online": _amount(self.judge_online),
            "batch": _amount(self.judge_batch) if self.judge_batch_declared else None,
            "batch_declared": self.judge_batch_declared,
        }

    def batch_cost(self, online: Decimal | None) -> BatchCost:
        declared = self.calls_batched > 0
        return {
            "mode": self.mode,
            "online": _amount(online),
            "batch": _amount(self.design_batch) if declared else None,
            "batch_declared": declared,
            "calls_batched": self.calls_batched,
        }

    def batch_basis(self, ticks: int) -> str:
        """Why a batch-mode design's ``seconds`` is None, and what sets its wall time."""
        windows = ", ".join(sorted(self.windows)) or "none: no call goes into a batch"
        return (
            "batch mode: the wall time is set by the provider's completion window "
            f"({windows}) and the ticks, not by latency — each tick sends one batch and waits "
            "until the provider ends it (within its completion window, else it expires and "
            "the call is retried in a later one), one tick per tool-loop round per agent turn; "
            f"at most {ticks} ticks per world (its batched calls, retries included), "
            "so no latency-based time is given"
        )


def _plus(total: Decimal | None, more: Decimal | None) -> Decimal | None:
    return None if total is None or more is None else total + more


def _amount(value: Decimal | None) -> str | None:
    return None if value is None else format(value.quantize(Decimal("1e-6")), "f")


def _chars(value: Any) -> int:
    return len(value) if isinstance(value, str) else len(json.dumps(value, sort_keys=True))


def _tokens(chars: int, messages: int = 2) -> int:
    return math.ceil(chars / 4) + TOKENS_PER_MESSAGE * messages


def _world_chars(snapshot: Mapping[str, Any]) -> int:
    return _chars(snapshot.get("entities", [])) + _chars(snapshot.get("environments", {}))


def experiment_estimate(*, data: Any) -> Estimate:
    """``_estimate`` with a factorial design's forks in a transaction rolled back afterwards:
    the arms' scenarios exist while they are priced, and nothing stays written."""
    with transaction.atomic():
        found = _estimate(data=data)
        transaction.set_rollback(True)
    return found


def _estimate(*, data: Any) -> Estimate:
    """The most the design could spend (calls, tokens, cost at today's prices), and whether it
    fits its budget; the design is validated as for creating it (400 naming the field). With
    ``power`` beside the design: the replicates it needs for that power (docs/experiments.md,
    "How many replicates do I need?")."""
    power_asked = data.get("power") if isinstance(data, dict) else None
    seed_given = isinstance(data, dict) and data.get("seed") is not None
    # the design fills in "now" for a start not given: only one given can match an earlier world
    start_given = isinstance(data, dict) and data.get("start_time") is not None
    if isinstance(data, dict) and "power" in data:
        data = {key: value for key, value in data.items() if key != "power"}
    design = design_of(data)
    if design.factorial is not None:  # rolled back by experiment_estimate
        factorial_arms(design.factorial, write=True)
    if design.stopping is not None:  # the worst case: the rule never stops early
        design = design.with_replicates(design.stopping.max_replicates)
    power = None if power_asked is None else experiment_power(value=power_asked, design=design)
    replicates, turns = design.replicates, design.turns
    tally = _Tally(mode=design.mode)
    point = design_branch_point(design.branch_from)
    start = parse_start_time(design.start_time)
    # the calls one world of each arm is expected to make, per source: each model node's
    # generations per agent per turn (as observed, ``_rounds``), and each judge's calls per
    # measured turn (for the time estimate)
    expected: list[dict[str, float]] = []
    # a branch's turns before its branch point are its parent's, measured once for all the
    # worlds (as the parent's): the calls still to make for those not measured yet
    shared = (
        unmeasured_before(point.parent, point.turn.number, list(design.metrics))
        if point is not None
        else {}
    )
    # each arm's start, checked as creating it would (a branch that does not fit, a start time
    # with no room for a turn: the same 400)
    snapshots = [
        world_start(arm.scenario_hash, {"hash": arm.scenario_hash}, start, point).snapshot
        for arm in design.arms
    ]
    rounds = _Rounds(snapshots)
    ticks = 0  # the most batched calls one world of an arm makes (batch mode's ticks bound)
    for snapshot in snapshots:
        batched_before = tally.calls_batched
        world_calls: dict[str, float] = {}
        world = _world_chars(snapshot)
        profiles = snapshot["cognition_profiles"]
        agents = 0
        for entity in snapshot["entities"]:
            kind = entity.get("kind")
            agent = kind.get("agent") if isinstance(kind, dict) else None
            if isinstance(agent, dict):
                agents += 1  # what a kind that asks each agent (a survey) multiplies by
            if not isinstance(agent, dict) or agent.get("cognition_profile") not in profiles:
                continue
            profile = profiles[agent["cognition_profile"]]
            workflow = profile["workflow"]
            for node in workflow.get("nodes", []):
                if node.get("type") not in ("llm_text", "llm_tool_loop"):
                    continue
                looping = node["type"] == "llm_tool_loop"
                source = node["llm_source_ref"]["hash"]
                per_turn = rounds.of(profile["workflow_hash"], node["id"], looping)
                world_calls[source] = world_calls.get(source, 0) + turns * per_turn
                tally.add(
                    who="agents",
                    source_hash=node["llm_source_ref"]["hash"],
                    per_run=node["max_generation_attempts"]
                    + (node.get("max_tool_calls", 0) if looping else 0),
                    runs=turns * replicates,
                    prompt=_tokens(_chars(node.get("prompt_template", "")) + _chars(node) + world),
                    growing=looping,
                )
        judged_turns = len(design.measured_turns)  # the baseline is measured too
        for metric in metric_rows(hashes=list(design.metrics)):
            calls = METRIC_KINDS[metric["kind"]].llm_calls(metric["content"], agents)
            if calls is None:  # a kind that calls no model (an expression)
                continue
            tally.add(
                who="judges",
                source_hash=calls.source_hash,
                per_run=calls.calls,
                runs=judged_turns * replicates + shared.pop(metric["hash"], 0),
                prompt=_tokens(calls.prompt_chars + world),
                growing=False,
            )
            world_calls[calls.source_hash] = (
                world_calls.get(calls.source_hash, 0) + calls.calls * judged_turns
            )
        expected.extend(dict(world_calls) for _ in range(replicates))
        ticks = max(ticks, math.ceil((tally.calls_batched - batched_before) / replicates))
    time = time_of(expected, calls_basis=rounds.basis())
    # batch mode: no latency-based time (docs/costs.md, "Batch mode"), unless no call goes into
    # a batch (rule policies, sources without ``batch``): then it runs as online does
    ticking = design.mode == BATCH and tally.calls_batched > 0
    seconds = None if ticking else time.seconds
    seconds_basis = tally.batch_basis(ticks) if ticking else time.basis
    if design.mode == BATCH and not ticking:
        seconds_basis = f"batch mode, but no call goes into a batch, so as online: {time.basis}"
    budget = design.budget
    total_tokens = tally.prompt + tally.completion
    cost = None if tally.unpriced else tally.cost
    within: bool | None = None
    if budget is not None and not tally.unbounded:
        checks: list[bool] = []
        if budget.max_tokens_total is not None:
            checks.append(total_tokens <= budget.max_tokens_total)
        if budget.max_cost_total is not None and cost is not None:
            checks.append(cost <= Decimal(budget.max_cost_total))
        elif budget.max_cost_total is not None:
            checks = []  # unpriced: whether it fits the cost budget is unknown
        within = all(checks) if checks else None
    labels = [m["label"] for m in metric_rows(hashes=list(design.metrics))]
    fixed_start = start if start_given else None
    recorded = recorded_of(
        design, seed_given=seed_given, start=fixed_start, point=point, metric_labels=labels
    )
    return {
        "worlds": design.worlds_planned,
        "turns_per_world": turns,
        "calls": {**tally.calls, "total": sum(tally.calls.values())},  # type: ignore[typeddict-item]
        "tokens": {"prompt": tally.prompt, "completion": tally.completion, "total": total_tokens},
        "cost": _amount(cost),
        "judge_cost": tally.judge_cost(),
        "batch_cost": tally.batch_cost(cost),
        "unpriced": sorted(tally.unpriced),
        "unbounded": sorted(tally.unbounded),
        "budget": None if budget is None else asdict(budget),
        "within_budget": within,
        "method": METHOD,
        "power": power,
        "seconds": seconds,
        "seconds_basis": seconds_basis,
        "recorded": recorded,
    }
