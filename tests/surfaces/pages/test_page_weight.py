"""Pages that scale: a 120-turn world page and the provenance page of an agent with 120
memory appends stay under a fixed size, and their query counts do not grow with the history.

Bounds (stated here, asserted below): the world page ≤ 40 KB and the provenance page ≤ 60 KB at
120 turns (measured: 20 KB and 36 KB) — before paging and appended-line display they were
337 KB and 2.0 MB on a park world, and 54 KB / 471 KB on this rule world. The world is a rule-policy world run through the
real services (about 25 ms a turn), so nothing here is a hand-made row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.surfaces.pages.test_world_pages import make_world, run_turn

pytestmark = pytest.mark.django_db

WORLD_PAGE_BOUND = 40_000
PROVENANCE_BOUND = 60_000


def run_turns(slug: str, n: int) -> None:
    for _ in range(n):
        attempt = run_turn(slug)
        assert attempt.status == "committed", attempt.failure_reason


def page(client: Client, url: str) -> bytes:
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return response.content


@pytest.fixture
def reader(client: Client, reader_user: Any) -> Client:
    client.force_login(reader_user)
    return client


def test_a_120_turn_world_stays_small_and_queries_stay_flat(
    reader: Client, django_assert_num_queries: Callable[..., Any]
) -> None:
    make_world("ant_on_plate_rules", "big")
    run_turns("big", 10)
    urls = ("/worlds/big/", "/worlds/big/entities/ant/", "/worlds/big/turns/10/")
    page(reader, "/worlds/big/")  # the session, warmed
    counts = {}
    for url in urls:
        with CaptureQueriesContext(connection) as queries:
            page(reader, url)
        counts[url] = len(queries)
    small = {url: len(page(reader, url)) for url in urls}

    run_turns("big", 110)
    sizes = {}
    for url in urls:
        with django_assert_num_queries(counts[url]):
            sizes[url] = len(page(reader, url))
    print(f"\npage weight at 10 → 120 turns: {small} → {sizes}; queries {counts}")
    assert sizes["/worlds/big/"] <= WORLD_PAGE_BOUND
    assert sizes["/worlds/big/entities/ant/"] <= PROVENANCE_BOUND

    body = page(reader, "/worlds/big/").decode()
    # paged: the newest 20 turns, and a link to the older ones
    assert "/worlds/big/turns/120/" in body and "/worlds/big/turns/101/" in body
    assert "/worlds/big/turns/100/" not in body
    assert "?turn_offset=20" in body
    older = page(reader, "/worlds/big/?turn_offset=110").decode()
    assert "/worlds/big/turns/1/" in older and "/worlds/big/turns/0/" in older


def test_provenance_shows_each_append_once(reader: Client) -> None:
    make_world("ant_on_plate_rules", "mem")
    run_turns("mem", 120)
    data = reader.get("/worlds/mem/entities/ant/?format=json").json()
    memory_rows = [h for h in data["history"] if h["target_kind"] == "entity_memory"]
    assert memory_rows
    for row in memory_rows:
        # the appended line alone, never the whole memory before and after
        assert "before" not in row and "after" not in row
        assert row["appended"].startswith(f"Turn {row['turn_number']}: ")
        assert "\n" not in row["appended"]
    body = page(reader, "/worlds/mem/entities/ant/").decode()
    last = memory_rows[0]["appended"]
    # the memory in full appears once (the "Memory" list), each append once more in history
    assert body.count(last) == 2
    assert data["count"] > data["limit"] == len(data["history"])
    second = reader.get("/worlds/mem/entities/ant/?offset=40&format=json").json()
    assert second["history"][0]["turn_number"] < data["history"][-1]["turn_number"] + 1
