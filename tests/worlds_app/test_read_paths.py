"""The hot read paths (the API's world list, world, turn and attempt reads) give what the ORM
and DRF give: SQL written once (``worlds_app.read_sql``, ``scenarios_app.sql_rows``) against
references computed here through the models, and ``represent`` against DRF's ``.data``.
Their statements are prepared on the connection and keep working across rollbacks.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Count, Q, Sum
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from cognition_app.models import LlmCall, SourceInvocation
from surfaces.api import worlds as api
from surfaces.api.represent import represent
from tests.cognition_app.test_cost_budgets import add_price, ant_ok, no_usage_stream
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, run_turn
from worlds_app import read_sql, selectors
from worlds_app.models import (
    ACTIVE_STATUSES,
    AttemptEvent,
    PatchTransition,
    Turn,
    TurnAttempt,
    World,
    WorldBudget,
)
from worlds_app.services import turn_attempt_enqueue, world_budget_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def worlds(scripted_llm: ScriptedLLM) -> list[str]:
    """Three worlds: costed and estimated calls and two budget settings; a queued batch; a
    failed attempt and no LLM call."""
    add_price()
    create_world("ant_on_plate", "costed")
    scripted_llm.script(ant_ok())
    assert run_turn("costed").status == "committed"
    scripted_llm.script(no_usage_stream())
    assert run_turn("costed").status == "committed"
    world_budget_set(slug="costed", budget={"max_cost_per_turn": "10"}, set_by="op")
    world_budget_set(slug="costed", budget={"max_tokens_total": 99999}, set_by="op2")
    create_world("ant_on_plate", "queued")
    scripted_llm.script(ant_ok())
    assert run_turn("queued").status == "committed"
    turn_attempt_enqueue(slug="queued", count=2, requested_by="test")
    create_world("ant_on_plate", "failed")
    world_budget_set(slug="failed", budget={"max_tokens_per_turn": 500}, set_by="op")
    assert run_turn("failed").status == "failed"
    return ["costed", "queued", "failed"]


def cost_reference(**filters: Any) -> dict[str, Any]:
    row = LlmCall.objects.filter(**filters).aggregate(
        calls=Count("pk"),
        priced=Count("pk", filter=Q(cost__isnull=False)),
        unknown=Count("pk", filter=Q(cost__isnull=True)),
        estimated=Count("pk", filter=Q(cost_estimated=True)),
        cost=Sum("cost"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cached=Sum("cached_tokens"),
        reused=Count("pk", filter=Q(invocation__reused_from__isnull=False)),
        unsaved=Count(
            "pk", filter=Q(invocation__reused_from__isnull=False, cost_saved__isnull=True)
        ),
        reused_tokens=Sum("tokens_reused"),
        saved=Sum("cost_saved"),
    )
    prompt, completion = row["prompt"] or 0, row["completion"] or 0
    return {
        "total": row["cost"] if row["priced"] else None,
        "unknown_calls": row["unknown"],
        "estimated_calls": row["estimated"],
        "calls": row["calls"],
        "tokens": {
            "prompt": prompt,
            "completion": completion,
            "cached": row["cached"] or 0,
            "total": prompt + completion,
        },
        "calls_reused": row["reused"],
        "tokens_reused": row["reused_tokens"] or 0,
        "cost_saved": None if row["unsaved"] else (row["saved"] or Decimal(0)),
    }


def test_world_reads_match_the_models(worlds: list[str]) -> None:
    for slug in worlds:
        world = World.objects.get(slug=slug)
        got = selectors.world_get(slug=slug)
        attempts = TurnAttempt.objects.filter(world=world).order_by("-seq")
        assert got["attempts_queued"] == attempts.filter(status="queued").count()
        assert got["attempts_running"] == attempts.filter(status="running").count()
        last = attempts.exclude(status__in=ACTIVE_STATUSES).first()
        assert got["last_attempt"] == (
            {"id": last.id, "seq": last.seq, "status": last.status, "ended_at": last.ended_at}
            if last
            else None
        )
        assert [a["id"] for a in got["recent_attempts"]] == [a.id for a in attempts[:20]]
        turn = Turn.objects.get(world=world, number=world.current_turn)
        assert (got["state"], got["state_hash"]) == (turn.state, turn.state_hash)
        assert got["simulation_time"] == turn.simulation_time
        assert got["scenario_snapshot"] == world.scenario_snapshot
        assert got["created_at"] == world.created_at
        budget = WorldBudget.objects.filter(world=world).order_by("-set_at", "-id").first()
        assert got["budget"] == (
            {
                "max_tokens_per_turn": budget.max_tokens_per_turn,
                "max_cost_per_turn": budget.max_cost_per_turn,
                "max_tokens_total": budget.max_tokens_total,
                "max_cost_total": budget.max_cost_total,
            }
            if budget
            else None
        )
        assert got["cost"] == cost_reference(invocation__world=world)
    assert selectors.world_get(slug="costed")["cost"]["total"] > Decimal(0)
    assert selectors.world_get(slug="costed")["cost"]["estimated_calls"] == 1
    assert selectors.world_get(slug="queued")["attempts_queued"] == 2

    listed = selectors.world_list(params={})
    assert listed["count"] == 3
    assert [w["slug"] for w in listed["results"]] == ["failed", "queued", "costed"]
    for row in listed["results"]:
        detail = selectors.world_get(slug=row["slug"])
        assert row == {k: detail[k] for k in row}
    # the count without counting, and with: a short page, a full page, a page past the end
    for params, count, slugs in [
        ({"limit": "2", "offset": "2"}, 3, ["costed"]),
        ({"limit": "2"}, 3, ["failed", "queued"]),
        ({"offset": "7"}, 3, []),
        ({"scenario": World.objects.get(slug="costed").scenario_id, "limit": "1"}, 3, ["failed"]),
        ({"scenario": "0" * 64}, 0, []),
        ({"scenario": "0" * 64, "offset": "3"}, 0, []),
    ]:
        page = selectors.world_list(params=params)
        assert (page["count"], [w["slug"] for w in page["results"]]) == (count, slugs)


def test_turn_and_attempt_reads_match_the_models(worlds: list[str]) -> None:
    for turn in Turn.objects.filter(number__gt=0):
        slug = turn.world.slug
        got = selectors.turn_get(slug=slug, number=turn.number)
        transitions = PatchTransition.objects.filter(world=turn.world, turn_number=turn.number)
        assert transitions.exists()
        assert got["transitions"] == list(transitions.values(*read_sql.TRANSITION_COLUMNS))
        patches = AttemptEvent.objects.filter(attempt=turn.attempt, kind="world_patch_applied")
        assert [p["patch"] for p in got["patches"]] == [
            e.payload["patch"] for e in patches.order_by("seq")
        ]
        assert got["cost"] == cost_reference(
            invocation__world=turn.world, invocation__attempted_turn=turn.number
        )
        assert (got["state"], got["created_at"]) == (turn.state, turn.created_at)
    for attempt in TurnAttempt.objects.all():
        got = selectors.attempt_get(attempt_id=str(attempt.pk))
        assert got["world"] == attempt.world.slug
        assert (got["queued_at"], got["ended_at"]) == (attempt.queued_at, attempt.ended_at)
        events = list(attempt.events.order_by("seq"))
        assert [(e["seq"], e["payload"], e["created_at"]) for e in got["events"]] == [
            (e.seq, e.payload, e.created_at) for e in events
        ]
        invocations = SourceInvocation.objects.filter(attempt=attempt).order_by("seq")
        assert [i["id"] for i in got["source_invocations"]] == [i.id for i in invocations]
        for row in got["source_invocations"]:
            call = LlmCall.objects.filter(invocation_id=row["id"]).first()
            assert row["llm_call_id"] == (call.id if call else None)
            assert row["cost"] == (call.cost if call else None)
            assert row["cost_estimated"] is bool(call and call.cost_estimated)
        assert got["cost"] == cost_reference(invocation__attempt=attempt)


def test_represent_is_drf_data(worlds: list[str], reader_client: APIClient) -> None:
    attempt = TurnAttempt.objects.filter(world__slug="costed").first()
    assert attempt is not None
    reads = [
        (
            "/api/worlds/",
            api.WorldCollectionApi.ListOutputSerializer,
            selectors.world_list(params={}),
        ),
        (
            "/api/worlds/costed/",
            api.WorldDetailApi.OutputSerializer,
            selectors.world_get(slug="costed"),
        ),
        (
            "/api/worlds/costed/turns/1/",
            api.TurnDetailApi.OutputSerializer,
            selectors.turn_get(slug="costed", number=1),
        ),
        (
            f"/api/attempts/{attempt.pk}/",
            api.AttemptDetailApi.OutputSerializer,
            selectors.attempt_get(attempt_id=str(attempt.pk)),
        ),
    ]
    for path, serializer, data in reads:
        expected = serializer(data).data
        assert represent(serializer, data) == expected
        assert reader_client.get(path).content == JSONRenderer().render(expected)
    # what DRF does with a missing value (an error naming the field), a null, a non-dict row
    serializer = api.AttemptDetailApi.OutputSerializer
    data = selectors.attempt_get(attempt_id=str(attempt.pk))
    data["failure"] = None
    data["events"] = data["events"][:1]
    assert represent(serializer, data) == serializer(data).data
    del data["seq"]
    with pytest.raises(KeyError, match="`seq`"):
        serializer(data).data  # noqa: B018
    with pytest.raises(KeyError, match="`seq`"):
        represent(serializer, data)


def test_hot_reads_are_prepared_and_survive_rollbacks(worlds: list[str]) -> None:
    def prepared() -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return {row[0] for row in cursor.fetchall()}

    for _ in range(6):
        expected = selectors.world_get(slug="costed")
    assert any("FROM worlds_app_world w" in statement for statement in prepared())

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        for _ in range(6):
            assert selectors.turn_get(slug="costed", number=1)["number"] == 1
        raise Boom
    assert selectors.world_get(slug="costed") == expected
    assert selectors.turn_get(slug="costed", number=1)["number"] == 1
