"""The experiment part of the fault-injection bench (bench/fault_injection.py): an experiment
whose worlds run two LLM agents on a source limited to a few concurrent requests, measured by
an expression metric and an LLM judge on the same model, within a budget; kill -9 lands on its
turns and on its judges' measure tasks like on any others. After the run, its invariants:

- every turn committed once, or interrupted and retriable (``check_invariants``, as for every
  world);
- every (world, turn, metric) measured at most once, and every committed turn measured (a
  measure message lost with a killed worker is counted as missing: its re-drive is not this
  bench's to do);
- the budget's ledger equals the calls' own rows: what it counts as spent is the sum of the
  experiment's calls' tokens, nothing is still reserved, no reservation row is left (the reaper
  settled every killed worker's, from the call rows);
- no concurrency slot lost: once nothing runs and a lease has had time to run out, no slot of
  any source is held.
"""

from __future__ import annotations

import json
import time
from typing import Any

CONCURRENCY = 3  # the experiment's model source: limits.concurrency
JUDGE_SYSTEM = "You rate how plausible a turn of a simulation is."
EXPERIMENT_SLUG = "faulty"


def is_judge(request: dict[str, Any]) -> bool:
    messages = request.get("messages") or []
    return any(m.get("role") == "system" and m.get("content") == JUDGE_SYSTEM for m in messages)


def judge_reply() -> Any:
    from tests.support.scripted_llm import Reply

    return Reply(
        text=json.dumps({"score": 3, "rationale": "it follows"}), chunk_size=8, chunk_delay_s=0.05
    )


def create_experiment(two_ants: dict[str, Any], replicates: int, budget_tokens: int) -> list[str]:
    """The experiment (2 arms by ``replicates``, 3 turns queued on each); its worlds' slugs."""
    from scenarios_app.services import metric_put, response_source_put, scenario_assemble
    from worlds_app.models import World
    from worlds_app.services.experiments import experiment_create

    body = json.loads(json.dumps(two_ants))
    for profile in body["cognition_profiles"].values():
        for node in profile["inline"]["workflow"]["inline"]["nodes"]:
            ref = node.get("llm_source_ref")
            if ref and "inline" in ref:
                iface = ref["inline"]["interface"]
                iface["limits"] = {"concurrency": CONCURRENCY}
                iface["params"] = {**iface.get("params", {}), "max_tokens": 400}
    scenario = scenario_assemble(data=body)["scenario_hash"]
    source = response_source_put(
        content={
            "version": 1,
            "label": "judge",
            "interface": {
                "name": "llm_chat_completions",
                "model": "gpt-4o-mini",
                "base_url_env": "CHUKWA_LLM_BASE_URL",
                "api_key_env": "CHUKWA_LLM_API_KEY",
                "schema_delivery": "response_format",
                "timeout_ms": 60000,
                "params": {"temperature": 0, "max_tokens": 200},
                "limits": {"concurrency": CONCURRENCY},
            },
        }
    )["hash"]
    turn = metric_put(
        content={
            "version": 1,
            "label": "turn_number",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    judged = metric_put(
        content={
            "version": 1,
            "label": "plausible",
            "kind": "llm_judge",
            "aggregate": "mean",
            "source": {"hash": source},
            "system": JUDGE_SYSTEM,
            "user_template": "Rate this turn 1-5:\n{{turn.patches}}",
            "scale": {"min": 1, "max": 5},
        }
    )["hash"]
    experiment_create(
        data={
            "slug": EXPERIMENT_SLUG,
            "arms": [
                {"label": "control", "scenario_ref": {"hash": scenario}},
                {"label": "again", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": replicates,
            "turns": 3,
            "metrics": [{"hash": turn}, {"hash": judged}],
            "budget": {"max_tokens_total": budget_tokens},
        },
        created_by="fault",
    )
    return list(
        World.objects.filter(experiment__slug=EXPERIMENT_SLUG).values_list("slug", flat=True)
    )


def _measurement_gaps() -> tuple[int, int]:
    """(committed turns by metrics not measured, (world, turn, metric) measured more than once)."""
    from django.db.models import Count

    from worlds_app.models import Experiment, Measurement, Turn

    experiment = Experiment.objects.get(slug=EXPERIMENT_SLUG)
    metrics = len(experiment.typed_design.metrics)
    turns = Turn.objects.filter(world__experiment=experiment).count()
    rows = Measurement.objects.filter(world__experiment=experiment)
    twice = (
        rows.values("world_id", "turn_number", "metric_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    distinct = rows.values("world_id", "turn_number", "metric_id").distinct().count()
    return turns * metrics - distinct, twice


def check(
    lease_seconds: float, wait_for_measures: float = 60.0
) -> tuple[dict[str, Any], list[str]]:
    """The experiment's figures and its invariants' violations, once the run has settled."""
    from django.conf import settings
    from django.db.models import Count, Q
    from django.utils import timezone

    from cognition_app.models import InvocationKind, LlmCall
    from cognition_app.sources.admission.leases import client, redis_key
    from worlds_app.models import BudgetReservation, Experiment, ExperimentLedger
    from worlds_app.services import turn_attempt_reap

    # the measure tasks of the last commits run out (a lost one stays missing)
    deadline, last = time.monotonic() + wait_for_measures, None
    while time.monotonic() < deadline:
        gaps = _measurement_gaps()
        if gaps[0] == 0 or gaps == last:
            break
        last = gaps
        time.sleep(5)
    missing, twice = _measurement_gaps()
    # Judges' reservations of killed measure tasks are settled by the reaper once older than a
    # task may run (CHUKWA_ATTEMPT_TIME_LIMIT): that time is let pass here.
    leaked_before = BudgetReservation.objects.count()
    turn_attempt_reap(
        now=timezone.now() + timezone.timedelta(seconds=1 + settings.CHUKWA_ATTEMPT_TIME_LIMIT)
    )
    experiment = Experiment.objects.get(slug=EXPERIMENT_SLUG)
    ledger = ExperimentLedger.objects.get(pk=experiment.pk)
    calls = LlmCall.objects.filter(invocation__world__experiment=experiment)
    spent = sum(
        (c["prompt_tokens"] or 0) + (c["completion_tokens"] or 0)
        for c in calls.values("prompt_tokens", "completion_tokens")
    )
    judge_calls = calls.filter(invocation__kind=InvocationKind.JUDGE).exclude(
        usage_source="not_sent"
    )

    def asked_twice(asked: Any) -> int:
        return int(
            asked.filter(Q(status="succeeded"))
            .values("invocation__world_id", "invocation__attempted_turn", "invocation__source_hash")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .count()
        )

    # A measure task killed after its judge answered but before its measurement was written
    # leaves the turn unmeasured: the re-drive asks again, answered from the record (reuse
    # "exact") if the first call's rows were finished, sent to the model again otherwise.
    judge_again = asked_twice(judge_calls)
    judge_sent_again = asked_twice(judge_calls.exclude(usage_source="reused"))
    time.sleep(lease_seconds + 1)  # a dead worker's slot comes back when its lease runs out
    redis = client()
    now_ms = int(time.time() * 1000)
    slots = redis_key("limits", "*", "concurrency")
    held_slots = sum(int(redis.zcount(key, now_ms, "+inf")) for key in redis.scan_iter(slots))
    figures = {
        "experiment worlds": calls.values("invocation__world_id").distinct().count(),
        "experiment calls (world and judge)": calls.count(),
        "measurements missing (lost measure messages)": missing,
        "judge asked again for a measured turn": judge_again,
        "of them, sent to the model again (not answered from the record)": judge_sent_again,
        "its calls killed mid-call (each leaving its reservation to the reaper)": calls.filter(
            status="interrupted"
        ).count(),
        "reservations still held once settled (a judge's: the reaper's after the task limit)": (
            leaked_before
        ),
        "ledger spent / calls' tokens": f"{ledger.spent_tokens} / {spent}",
        "budget exhausted": experiment.budget_exhausted_at is not None,
        "concurrency slots held with nothing running": held_slots,
    }
    violations = []
    if missing:
        violations.append(
            f"{missing} committed turn-metrics never measured (their measure message was lost "
            "with a killed worker: not re-driven)"
        )
    if twice:
        violations.append(f"{twice} (world, turn, metric) measured more than once")
    if ledger.spent_tokens != spent:
        violations.append(f"the ledger counts {ledger.spent_tokens} tokens, the calls {spent}")
    if ledger.reserved_tokens or ledger.reserved_cost:
        violations.append(f"the ledger still holds {ledger.reserved_tokens} tokens reserved")
    left = BudgetReservation.objects.count()
    if left:
        violations.append(f"{left} reservation rows left after the reaper")
    if held_slots:
        violations.append(f"{held_slots} concurrency slots held with nothing running")
    return figures, violations
