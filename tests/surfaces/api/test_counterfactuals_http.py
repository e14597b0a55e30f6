"""Seeds, branches and interventions driven as a client would: over real HTTP against the live
server, with the turns run by a real Celery worker."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.worlds_app.test_counterfactuals import RULE_SCENARIO

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

FINISHED = {"committed", "failed", "interrupted", "cancelled"}


def _client(live_server: Any, user: User) -> httpx.Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    )


def _wait(http: httpx.Client, ids: list[str]) -> list[str]:
    """The attempts' statuses once every one has finished (90 s at the most)."""
    deadline = time.monotonic() + 90
    statuses: list[str] = []
    while time.monotonic() < deadline:
        statuses = [http.get(f"/api/attempts/{i}/").json()["status"] for i in ids]
        if all(s in FINISHED for s in statuses):
            return statuses
        time.sleep(0.2)
    raise AssertionError(f"attempts did not finish: {statuses}")


def _run(http: httpx.Client, slug: str, count: int) -> list[str]:
    queued = http.post(f"/api/worlds/{slug}/turns/", json={"count": count})
    assert queued.status_code == 202, queued.text
    return _wait(http, queued.json()["attempt_ids"])


def _hashes(http: httpx.Client, slug: str, numbers: range) -> list[str]:
    return [http.get(f"/api/worlds/{slug}/turns/{n}/").json()["state_hash"] for n in numbers]


def test_seeded_worlds_branches_and_an_intervention_through_a_worker(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    with _client(live_server, operator_user) as http:
        for slug in ("coin-1", "coin-2"):
            made = http.post(
                "/api/worlds/",
                json={
                    "slug": slug,
                    "scenario_ref": {"data": RULE_SCENARIO},
                    "seed": 123,
                    "start_time": "2026-05-01T08:00:00+00:00",
                },
            )
            assert made.status_code == 201, made.text
            assert made.json()["seed"] == 123
        rain = {
            "patch": {
                "narration": "Rain drums on the table.",
                "effects": [
                    {
                        "op": "set_environment_content",
                        "environment_label": "room",
                        "content": "A bare room with a table; rain drips from the ceiling.",
                    }
                ],
            },
            "note": "rain starts",
            "turn": 2,
        }
        added = http.post("/api/worlds/coin-2/interventions/", json=rain)
        assert added.status_code == 201, added.text
        assert _run(http, "coin-1", 4) == ["committed"] * 4
        assert _run(http, "coin-2", 4) == ["committed"] * 4
        # Same seed: turn 1 is the same in both; the rain makes turn 2 differ.
        one, two = _hashes(http, "coin-1", range(5)), _hashes(http, "coin-2", range(5))
        assert one[:2] == two[:2] and one[2] != two[2]
        turn = http.get("/api/worlds/coin-2/turns/2/").json()
        first = turn["patches"][0]
        assert first["patch_seq"] == 1 and first["intervention"]["operator"] == "ops"
        assert first["intervention"]["note"] == "rain starts"
        listed = http.get("/api/worlds/coin-2/interventions/").json()["results"]
        assert [i["status"] for i in listed] == ["consumed"]

        # A branch of coin-1 at turn 2 with the same seed re-runs nothing and lines up.
        branch = http.post(
            "/api/worlds/",
            json={"slug": "coin-1-b", "branch_from": {"world": "coin-1", "turn": 2}, "seed": 123},
        )
        assert branch.status_code == 201, branch.text
        assert branch.json()["current_turn"] == 2
        assert branch.json()["branched_from"] == {"world": "coin-1", "turn": 2}
        assert _run(http, "coin-1-b", 2) == ["committed"] * 2
        compared = http.get("/api/worlds/coin-1/compare/coin-1-b/").json()
        # Same seed, same cognition: the branch repeats its parent exactly.
        assert compared["first_divergent_turn"] is None
        assert [t["number"] for t in compared["turns"]] == [0, 1, 2, 3, 4]
        assert http.get("/api/worlds/coin-1-b/turns/1/").json()["error"]["code"] == (
            "before_branch"
        )
        # Another seed from the same point: the coin's draws change.
        other = http.post(
            "/api/worlds/",
            json={"slug": "coin-1-c", "branch_from": {"world": "coin-1", "turn": 2}, "seed": 124},
        )
        assert other.status_code == 201
        _run(http, "coin-1-c", 2)
        monologue_seeds = {
            slug: [
                e["payload"]["seed"]
                for n in (3, 4)
                for e in http.get(
                    f"/api/attempts/{http.get(f'/api/worlds/{slug}/turns/{n}/').json()['attempt_id']}/"
                ).json()["events"]
                if e["kind"] == "inner_monologue"
            ]
            for slug in ("coin-1-b", "coin-1-c")
        }
        assert monologue_seeds["coin-1-b"] != monologue_seeds["coin-1-c"]
