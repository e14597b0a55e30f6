"""Populations (docs/populations.md) over real HTTP: a population is a content-addressed
component whose agents a scenario includes; the same seed gives the same hash, agents and
scenario hash, another seed others; its coverage is scipy's own discrepancy of the same
sample, its marginals the drawn shares; bad content is a 400 naming the field, nothing
written; a world of the population scenario runs its turns on a real worker."""

from __future__ import annotations

import copy
import time
import warnings
from collections import Counter
from typing import Any

import httpx
import numpy as np
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from scipy.stats import qmc

from scenarios_app.fixture_files import load_fixture
from scenarios_app.models import Entity, Population, Scenario, ScenarioPopulation
from tests.support.worlds import fixture_body

FIXTURE = "park_visitors_rules"


def _population(**change: Any) -> dict[str, Any]:
    content = copy.deepcopy(fixture_body(FIXTURE)["populations"][0]["ref"]["inline"])
    return {**content, **change}


def _scipy_points(content: dict[str, Any]) -> np.ndarray:
    """The sample as scipy draws it, without Chukwa: scrambled Sobol seeded the same way."""
    engine = qmc.Sobol(
        d=len(content["axes"]), scramble=True, rng=np.random.default_rng(content["seed"])
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fifty is not a power of two: allowed, and measured
        return engine.random(content["size"])


@pytest.mark.django_db
def test_a_population_is_stable_for_a_seed_and_differs_for_another(
    operator_client: APIClient,
) -> None:
    first = operator_client.post("/api/populations/", {"content": _population()}, format="json")
    assert first.status_code == 201, first.json()
    again = operator_client.post("/api/populations/", {"content": _population()}, format="json")
    assert again.status_code == 200 and again.json() == {**first.json(), "was_new": False}
    other = operator_client.post(
        "/api/populations/", {"content": _population(seed=8)}, format="json"
    )
    assert other.status_code == 201 and other.json()["hash"] != first.json()["hash"]
    h, h8 = first.json()["hash"], other.json()["hash"]
    read = operator_client.get(f"/api/populations/{h}/").json()
    assert (read["label"], read["size"], read["sampler"]) == ("park_visitors", 50, "sobol")

    body = fixture_body(FIXTURE)
    made = operator_client.post("/api/scenarios/assemble/", body, format="json")
    assert made.status_code == 201, made.json()
    remade = operator_client.post("/api/scenarios/assemble/", fixture_body(FIXTURE), format="json")
    assert remade.json()["scenario_hash"] == made.json()["scenario_hash"]
    assert remade.json()["entities"] == made.json()["entities"]
    assert len(made.json()["entities"]) == 51  # the fountain and 50 visitors
    seeded = fixture_body(FIXTURE)
    seeded["populations"][0]["ref"] = {"hash": h8}
    other_scenario = operator_client.post("/api/scenarios/assemble/", seeded, format="json").json()
    assert other_scenario["scenario_hash"] != made.json()["scenario_hash"]
    assert other_scenario["entities"][0] == made.json()["entities"][0]  # the fountain, reused

    def agents(entity_hashes: list[str]) -> list[dict[str, Any]]:
        rows = dict(Entity.objects.filter(pk__in=entity_hashes).values_list("pk", "content"))
        return [rows[e] for e in entity_hashes[1:]]

    ours, theirs = agents(made.json()["entities"]), agents(other_scenario["entities"])
    assert [a["id"] for a in ours] == [f"visitor_{i}" for i in range(1, 51)]
    assert [a["state"] for a in ours] != [a["state"] for a in theirs]
    assert {a["kind"]["agent"]["cognition_profile"] for a in ours} == {"visitor"}
    binding = ScenarioPopulation.objects.get(scenario_id=made.json()["scenario_hash"])
    assert (binding.population_id, binding.first_position, binding.environment) == (h, 1, "park")
    uses = operator_client.get(f"/api/populations/{h}/uses/").json()
    assert [s["hash"] for s in uses["scenarios"]] == [made.json()["scenario_hash"]]

    # the agents' values are scipy's Sobol points through each axis's inverse distribution
    points = _scipy_points(_population())
    ages = [int(np.floor(16 + u * (80 + 1 - 16))) for u in points[:, 0]]
    assert [f"aged {age}." in a["state"] for a, age in zip(ours, ages, strict=True)] == [True] * 50


@pytest.mark.django_db
def test_coverage_and_marginals_are_scipys_own(operator_client: APIClient) -> None:
    for sampler in ("sobol", "random"):
        content = _population(sampler=sampler, size=64)
        h = operator_client.post("/api/populations/", {"content": content}, format="json").json()[
            "hash"
        ]
        answer = operator_client.get(f"/api/populations/{h}/coverage/")
        assert answer.status_code == 200, answer.json()
        found = answer.json()
        if sampler == "sobol":
            points = _scipy_points(content)
        else:
            points = np.random.default_rng(content["seed"]).random((64, 3))
        assert found["coverage"]["value"] == pytest.approx(qmc.discrepancy(points, method="CD"))
        assert found["coverage"]["measure"] == "centered_l2_discrepancy"
        assert "scipy.stats.qmc.discrepancy" in found["coverage"]["method"]
        thirst = next(m for m in found["marginals"] if m["axis"] == "thirst")
        drawn = Counter(a["values"]["thirst"] for a in found["agents"])
        assert [c["bin"] for c in thirst["cells"]] == ["barely thirsty", "thirsty", "very thirsty"]
        assert [c["target"] for c in thirst["cells"]] == pytest.approx([0.4, 0.4, 0.2])
        assert [c["observed"] for c in thirst["cells"]] == [
            drawn[c["bin"]] / 64 for c in thirst["cells"]
        ]
        assert thirst["max_gap"] == pytest.approx(
            max(abs(c["observed"] - c["target"]) for c in thirst["cells"])
        )
        assert len(found["agents"]) == 64 and found["agents"][0]["id"] == "visitor_1"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"size": 0}, "invalid_population", "content.size"),
        ({"sampler": "halton"}, "invalid_population", "content.sampler"),
        ({"seed": -1}, "invalid_population", "content.seed"),
        (
            {"axes": [{"name": "age", "range": [9, 3]}]},
            "invalid_population",
            "content.axes[0].range",
        ),
        (
            {"axes": [{"name": "t", "categories": [{"value": "a", "weight": 0}]}]},
            "invalid_population",
            "content.axes[0].categories[0].weight",
        ),
        (
            {
                "axes": [
                    {
                        "name": "p",
                        "range": [0, 1],
                        "marginal": [{"low": 0, "high": 0.5, "share": 0.5}],
                    }
                ]
            },
            "invalid_population",
            "content.axes[0].marginal",
        ),
        (
            {
                "entity_template": {
                    "id": "v_{{index}}",
                    "name": "{{axes.height}}",
                    "state": "",
                    "goal": "",
                    "memory": "",
                }
            },
            "invalid_population",
            "content.entity_template.name",
        ),
        (
            {
                "entity_template": {
                    "id": "v_{{index}}",
                    "name": "V",
                    "state": "{{biography}}",
                    "goal": "",
                    "memory": "",
                }
            },
            "biography_unsupported",
            "content.entity_template.state",
        ),
    ],
)
def test_bad_content_is_refused_naming_the_field(
    operator_client: APIClient, change: dict[str, Any], code: str, field: str
) -> None:
    answer = operator_client.post(
        "/api/populations/", {"content": _population(**change)}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == (code, field), error
    assert not Population.objects.exists()


@pytest.mark.django_db
def test_a_populations_discrepancy_is_computed_once_and_stays_scipys(
    operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chukwa_core import population as population_module
    from scenarios_app.population_selectors import population_preview

    calls: list[int] = []
    scipys = qmc.discrepancy

    def counted(points: np.ndarray, **kwargs: Any) -> float:
        calls.append(len(points))
        return float(scipys(points, **kwargs))

    monkeypatch.setattr(population_module.qmc, "discrepancy", counted)
    content = _population(size=48, seed=90210)
    h = operator_client.post("/api/populations/", {"content": content}, format="json").json()[
        "hash"
    ]
    values = [
        operator_client.get(f"/api/populations/{h}/coverage/").json()["coverage"]["value"]
        for _ in range(3)
    ]
    # the author page's preview of the same content: the same figure, not computed again
    previewed = population_preview(content=content)
    assert previewed["hash"] == h
    assert calls == [48]
    assert values == [values[0]] * 3 and previewed["coverage"]["value"] == values[0]
    assert values[0] == pytest.approx(scipys(_scipy_points(content), method="CD"))
    # another population (another hash) is computed for itself
    other = operator_client.post(
        "/api/populations/", {"content": _population(size=48, seed=90211)}, format="json"
    ).json()["hash"]
    assert operator_client.get(f"/api/populations/{other}/coverage/").status_code == 200
    assert calls == [48, 48]


@pytest.mark.django_db
def test_ids_must_come_out_unique(operator_client: APIClient) -> None:
    body = fixture_body(FIXTURE)
    template = body["populations"][0]["ref"]["inline"]["entity_template"]
    template["id"] = "visitor_{{axes.patience}}"  # two values for fifty agents
    answer = operator_client.post("/api/scenarios/assemble/", body, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("duplicate_entity_id", "populations[0]")
    assert not Scenario.objects.exists() and not Population.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_a_population_world_runs_on_a_worker(
    live_server: Any, operator_user: User, celery_worker: str
) -> None:
    token = Token.objects.get_or_create(user=operator_user)[0].key
    headers = {"Authorization": f"Token {token}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as http:
        made = http.post("/api/scenarios/assemble/", json=load_fixture(FIXTURE))
        assert made.status_code == 201, made.text
        world = http.post(
            "/api/worlds/",
            json={
                "slug": "visitors",
                "scenario_ref": {"name": FIXTURE},
                "start_time": "2026-07-01T14:00:00Z",
            },
        )
        assert world.status_code == 201, world.text
        assert http.post("/api/worlds/visitors/turns/", json={"count": 1}).status_code in (201, 202)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            read = http.get("/api/worlds/visitors/").json()
            if read["current_turn"] >= 1:
                break
            time.sleep(0.3)
        turn = http.get("/api/worlds/visitors/turns/1/").json()
    assert read["current_turn"] == 1, read
    states = {e["id"]: e["state"] for e in turn["state"]["entities"]}
    assert len(states) == 51
    drank = [i for i, s in states.items() if "drinking at the fountain" in s]
    assert drank and all(i.startswith("visitor_") for i in drank)
