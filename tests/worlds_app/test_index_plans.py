"""The index pages' queries use indexes: on a few thousand attempts and LLM calls, the
attempt index, the LLM-call index, their APIs and the home page read the newest rows through
the indexes of worlds_app 0009 / cognition_app 0006 instead of sorting whole tables.

The rows are copies of one real LLM attempt (a rejected generation, then its accepted retry),
run through the services; only their times, statuses and worlds vary. Run with ``-s`` to see
each query's plan and its execution time.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from cognition_app.models import LlmCall, SourceInvocation
from tests.surfaces.pages.test_world_pages import ANT_OK, BAD_REPLY, make_world, run_turn
from tests.surfaces.pages.test_world_pages import toy_sources as toy_sources
from worlds_app.models import AttemptStatus, TurnAttempt, World

pytestmark = pytest.mark.django_db

WORLDS = 30
ATTEMPTS_PER_WORLD = 100  # 3,000 attempts, 6,000 invocations and LLM calls
BIG_TABLES = ("worlds_app_turnattempt", "cognition_app_llmcall", "cognition_app_sourceinvocation")
BY_TIME = "attempt_queued_idx"
BY_STATUS = "attempt_status_queued_idx"
# the running ones: the partial unique index holds exactly those; the status index serves the
# filter and the order too, and the planner takes either by the sampled statistics
RUNNING = ("attempt_one_running_per_world", BY_STATUS)
# one world's rows: through the foreign-key indexes Django made (names end in a hash)
OF_WORLD = "worlds_app_turnattempt_world_id_"
CALLS_BY_TIME = "llmcall_started_idx"
CALLS_BY_STATUS = "llmcall_status_started_idx"
# one world's calls: through the replay index, which leads with the world (the invocation's
# world has no index of its own)
CALLS_OF_WORLD = "invocation_request_key_idx"
# each page's ordered reads of attempts or LLM calls, in the order it makes them, and the index
# each one must use
URLS = {
    "/": [RUNNING, BY_STATUS, BY_STATUS, CALLS_BY_STATUS],
    "/attempts/": [BY_TIME],
    "/attempts/?status=failed": [BY_STATUS],
    "/attempts/?world=w3": [OF_WORLD],
    "/attempts/?since=2000-01-01T00:00:00Z": [BY_TIME],
    "/api/attempts/?status=interrupted": [BY_STATUS],
    "/llm-calls/": [CALLS_BY_TIME],
    "/llm-calls/?status=rejected": [CALLS_BY_STATUS],
    "/llm-calls/?status=failed": [CALLS_BY_STATUS],
    "/api/llm-calls/?world=w2": [CALLS_OF_WORLD],
    "/api/llm-calls/?since=2000-01-01T00:00:00Z": [CALLS_BY_TIME],
}


def _status(i: int) -> str:
    if i % 20 == 7:
        return AttemptStatus.FAILED
    if i % 50 == 11:
        return AttemptStatus.INTERRUPTED
    return AttemptStatus.COMMITTED


@pytest.fixture
def many_rows(scripted_llm: Any, toy_sources: str) -> None:
    make_world("ant_on_plate", "seed")
    scripted_llm.script(BAD_REPLY, ANT_OK)
    seed = run_turn("seed")
    assert seed.status == AttemptStatus.COMMITTED, seed.failure_reason
    invocations = list(
        SourceInvocation.objects.filter(attempt=seed, llm_call__isnull=False, kind="llm_generation")
    )
    calls = {c.invocation_id: c for c in LlmCall.objects.filter(invocation__in=invocations)}
    assert len(invocations) == 2
    world_ids = [seed.world_id] + [make_world("ant_on_plate", f"w{n}").pk for n in range(1, WORLDS)]
    start = seed.queued_at - timedelta(days=30)
    attempts, new_invocations, new_calls = [], [], []
    for w, world_id in enumerate(world_ids):
        for i in range(ATTEMPTS_PER_WORLD):
            at = start + timedelta(minutes=i * WORLDS + w)
            attempt = TurnAttempt(
                id=uuid.uuid4(),
                world_id=world_id,
                seq=1000 + i,
                batch_id=uuid.uuid4(),
                batch_index=0,
                batch_size=1,
                status=_status(i),
                attempted_turn=1000 + i,
                queued_at=at,
                started_at=at,
                ended_at=at + timedelta(seconds=3),
                duration_ms=3000,
            )
            attempts.append(attempt)
            for n, inv in enumerate(invocations):
                copy = SourceInvocation(
                    **{
                        f.attname: getattr(inv, f.attname)
                        for f in SourceInvocation._meta.concrete_fields
                    }
                )
                copy.id, copy.attempt_id, copy.world_id = uuid.uuid4(), attempt.id, world_id
                copy.started_at = at + timedelta(seconds=n)
                copy.attempted_turn, copy.parent_id = attempt.attempted_turn, None
                new_invocations.append(copy)
                call = calls[inv.pk]
                call_copy = LlmCall(
                    **{f.attname: getattr(call, f.attname) for f in LlmCall._meta.concrete_fields}
                )
                call_copy.id, call_copy.invocation_id = uuid.uuid4(), copy.id
                call_copy.started_at = copy.started_at
                if attempt.status == AttemptStatus.FAILED:
                    call_copy.status = "failed"
                new_calls.append(call_copy)
    TurnAttempt.objects.bulk_create(attempts, batch_size=1000)
    SourceInvocation.objects.bulk_create(new_invocations, batch_size=1000)
    LlmCall.objects.bulk_create(new_calls, batch_size=1000)
    # a queued and a running attempt, as the home page shows them
    TurnAttempt.objects.filter(world_id=world_ids[1], seq=1000 + ATTEMPTS_PER_WORLD - 1).update(
        status=AttemptStatus.RUNNING
    )
    TurnAttempt.objects.filter(world_id=world_ids[2], seq=1000 + ATTEMPTS_PER_WORLD - 1).update(
        status=AttemptStatus.QUEUED
    )
    with connection.cursor() as cursor:
        for table in (*BIG_TABLES, "worlds_app_world"):
            cursor.execute(f"ANALYZE {table}")
    assert World.objects.count() == WORLDS


ORDERED = re.compile(r'FROM "(worlds_app_turnattempt|cognition_app_llmcall)".*ORDER BY', re.S)


def _plans(client: Client, url: str) -> list[tuple[str, str]]:
    """(table, EXPLAIN ANALYZE text) of each ordered read of an index table the page makes."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    plans = []
    with connection.cursor() as cursor:
        for query in queries.captured_queries:
            match = ORDERED.search(query["sql"])
            if not match or "LIMIT" not in query["sql"]:
                continue
            cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING ON, SUMMARY ON) " + query["sql"])
            plans.append((match.group(1), "\n".join(row[0] for row in cursor.fetchall())))
    return plans


def test_the_index_pages_read_through_indexes(many_rows: None) -> None:
    client = Client()
    client.force_login(User.objects.create_user("reader", password="reader-password-123"))
    client.get("/")  # the session, warmed
    wrong = []
    for url, expected in URLS.items():
        plans = _plans(client, url)
        for (table, plan), allowed in zip(plans, expected, strict=False):
            print(f"\n--- {url} ({table})\n{plan}")
            scans = re.findall(r"Seq Scan on (\w+)", plan)
            indexes = (allowed,) if isinstance(allowed, str) else allowed
            if not any(f"using {i}" in plan or f"on {i}" in plan for i in indexes):
                wrong.append(f"{url}: {table} not read through {' or '.join(indexes)}")
            if any(t in BIG_TABLES for t in scans):
                wrong.append(f"{url}: a sequential scan of {scans}")
        assert len(plans) == len(expected), (url, [t for t, _ in plans])
    assert wrong == []
