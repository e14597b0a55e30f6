"""The server-rendered scenario store browser: /store/, /scenarios/, /names/."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scenarios_app import services
from scenarios_app.fixture_files import fixture_names, load_fixture
from scenarios_app.models import Entity, Environment, ScenarioName
from scenarios_app.population_selectors import population_coverage
from surfaces.pages.lineage_svg import lineage_svg
from surfaces.pages.store import SEGMENTS

pytestmark = pytest.mark.django_db

MISSING = "f" * 64
ROW_LINK = re.compile(r'<a href="/scenarios/[0-9a-f]{64}/">')


@pytest.fixture
def client_in(reader_user: User) -> Client:
    client = Client()
    client.force_login(reader_user)
    return client


@pytest.fixture
def loaded() -> dict[str, Any]:
    """Every fixture scenario, plus a fork of ant_on_plate and a name moved then unset."""
    made = {name: services.scenario_assemble(data=load_fixture(name)) for name in fixture_names()}
    fork = services.scenario_fork(
        data={
            "primary_parent": {"name": "ant_on_plate"},
            "changes": {"description": "The same ant, a different plate."},
            "additional_parents": [{"hash": made["park"]["scenario_hash"], "role": "inspiration"}],
            "name": "ant_fork",
        }
    )
    services.scenario_name_set(
        name="moving", scenario_hash=made["park"]["scenario_hash"], note="first"
    )
    services.scenario_name_set(name="moving", scenario_hash=fork["scenario_hash"], note="second")
    services.scenario_name_unset(name="moving", note="gone")
    return {"made": made, "fork": fork}


def _all_urls(loaded: dict[str, Any]) -> list[str]:
    ant = loaded["made"]["ant_on_plate"]
    env_hash = next(iter(ant["environments"].values()))
    urls = ["/store/", "/scenarios/", "/names/", "/names/ant_on_plate/", "/names/moving/"]
    for segment in SEGMENTS:
        urls.append(f"/store/{segment}/")
    urls += [
        f"/store/environments/{env_hash}/",
        f"/store/environments/{env_hash}/uses/",
        f"/store/entities/{ant['entities'][0]}/",
        f"/store/entities/{ant['entities'][0]}/uses/",
        f"/scenarios/{ant['scenario_hash']}/",
        "/scenarios/ant_on_plate/",
        f"/scenarios/{ant['scenario_hash']}/lineage/",
    ]
    return urls


def test_every_page_renders_for_a_reader(client_in: Client, loaded: dict[str, Any]) -> None:
    for url in _all_urls(loaded):
        response = client_in.get(url)
        assert response.status_code == 200, url
        assert b"<html" in response.content, url
        as_json = client_in.get(url, {"format": "json"})
        assert as_json.status_code == 200, url
        assert as_json["Content-Type"] == "application/json", url


def test_anonymous_requests_redirect_to_sign_in(loaded: dict[str, Any]) -> None:
    anon = Client()
    for url in _all_urls(loaded):
        for params in ({}, {"format": "json"}):
            response = anon.get(url, params)
            assert response.status_code == 302, url
            assert response["Location"].startswith("/accounts/login/"), url


def test_named_urls_reverse() -> None:
    h = "a" * 64
    assert reverse("page-store") == "/store/"
    assert reverse("page-component-list", args=["entities"]) == "/store/entities/"
    assert reverse("page-component-detail", args=["entities", h]) == f"/store/entities/{h}/"
    assert reverse("page-component-uses", args=["entities", h]) == f"/store/entities/{h}/uses/"
    assert reverse("page-scenario-list") == "/scenarios/"
    assert reverse("page-scenario-detail", args=[h]) == f"/scenarios/{h}/"
    assert reverse("page-scenario-lineage", args=[h]) == f"/scenarios/{h}/lineage/"
    assert reverse("page-name-list") == "/names/"
    assert reverse("page-name-detail", args=["park"]) == "/names/park/"


def test_store_index_counts(client_in: Client, loaded: dict[str, Any]) -> None:
    data = client_in.get("/store/", {"format": "json"}).json()
    assert data["counts"]["entities"] == Entity.objects.count()
    assert data["counts"]["scenarios"] == len(fixture_names()) + 1
    html = client_in.get("/store/").content.decode()
    for k in data["kinds"]:
        assert f'href="{k["url"]}"' in html
        assert f'<div class="n">{k["count"]}</div>' in html


def test_component_list_pages_and_matches_json(client_in: Client, loaded: dict[str, Any]) -> None:
    total = Environment.objects.count()
    assert total >= 3
    first = client_in.get("/store/environments/", {"limit": 2, "format": "json"}).json()
    assert (first["count"], len(first["results"])) == (total, 2)
    html = client_in.get("/store/environments/", {"limit": 2}).content.decode()
    for row in first["results"]:
        assert f'href="/store/environments/{row["hash"]}/"' in html
        assert f'title="{row["hash"]}"' in html  # shortened, full value on hover
    assert "offset=2" in html
    rest = client_in.get("/store/environments/", {"limit": 2, "offset": 2, "format": "json"})
    seen = {r["hash"] for r in first["results"]} | {r["hash"] for r in rest.json()["results"]}
    assert len(seen) == min(total, 4)
    partial = client_in.get("/store/environments/", {"limit": 2}, HTTP_HX_REQUEST="true")
    assert b"<html" not in partial.content
    assert b'id="component-table"' in partial.content


def test_workflow_detail_links_every_reference(client_in: Client, loaded: dict[str, Any]) -> None:
    park = client_in.get("/scenarios/park/", {"format": "json"}).json()
    walker = next(p for p in park["cognition_profiles"] if p["label"] == "walker")
    workflow_hash = walker["workflow_hash"]
    data = client_in.get(f"/store/cognition-workflows/{workflow_hash}/", {"format": "json"}).json()
    refs = data["workflow"]["refs"]
    assert refs and all(r["hash"] for r in refs)
    html = client_in.get(f"/store/cognition-workflows/{workflow_hash}/").content.decode()
    for ref in refs:
        segment = "json-schemas" if ref["kind"] == "json_schema" else "response-sources"
        assert f'href="/store/{segment}/{ref["hash"]}/"' in html
    for node in data["workflow"]["nodes"]:
        assert f"<code>{node['id']}</code>" in html
    profile_hash = walker["hash"]
    profile = client_in.get(f"/store/cognition-profiles/{profile_hash}/").content.decode()
    assert f'href="/store/cognition-workflows/{workflow_hash}/"' in profile


def test_entity_detail_and_uses(client_in: Client, loaded: dict[str, Any]) -> None:
    ant = loaded["made"]["ant_on_plate"]
    entity = Entity.objects.get(pk=ant["entities"][0])
    html = client_in.get(f"/store/entities/{entity.pk}/").content.decode()
    assert f"<code>{entity.entity_id}</code>" in html
    assert entity.content["environment"] in html
    uses = client_in.get(f"/store/entities/{entity.pk}/uses/", {"format": "json"}).json()
    using = {s["hash"] for s in uses["scenarios"]}
    assert ant["scenario_hash"] in using
    uses_html = client_in.get(f"/store/entities/{entity.pk}/uses/").content.decode()
    for h in using:
        assert f'href="/scenarios/{h}/"' in uses_html


def test_scenario_list_filters_and_json(client_in: Client, loaded: dict[str, Any]) -> None:
    everything = client_in.get("/scenarios/", {"format": "json"}).json()
    assert everything["count"] == len(fixture_names()) + 1
    forks = client_in.get("/scenarios/", {"has_parents": "true", "format": "json"}).json()
    assert [s["hash"] for s in forks["results"]] == [loaded["fork"]["scenario_hash"]]
    html = client_in.get("/scenarios/", {"has_parents": "true"}).content.decode()
    assert f'href="/scenarios/{loaded["fork"]["scenario_hash"]}/"' in html
    assert loaded["made"]["park"]["scenario_hash"] not in html
    assert 'name="created_after"' in html and 'name="uses_entity_hash"' in html
    # An empty form submission (every field blank) is the unfiltered list.
    blank = {k: "" for k in ("created_after", "created_before", "has_name", "has_parents")}
    assert client_in.get("/scenarios/", blank).status_code == 200
    env_hash = next(iter(loaded["made"]["park"]["environments"].values()))
    using = client_in.get("/scenarios/", {"uses_environment_hash": env_hash, "format": "json"})
    assert loaded["made"]["park"]["scenario_hash"] in {s["hash"] for s in using.json()["results"]}
    paged = client_in.get("/scenarios/", {"limit": 2, "has_name": "true"}).content.decode()
    assert "has_name=true" in paged and "offset=2" in paged


def test_scenario_detail_shows_bindings_entities_and_derivations(
    client_in: Client, loaded: dict[str, Any]
) -> None:
    fork_hash = loaded["fork"]["scenario_hash"]
    data = client_in.get(f"/scenarios/{fork_hash}/", {"format": "json"}).json()
    html = client_in.get(f"/scenarios/{fork_hash}/").content.decode()
    assert data["names"] == ["ant_fork"]
    for p in data["cognition_profiles"]:
        assert f'href="/store/cognition-profiles/{p["hash"]}/"' in html
        assert f'href="/store/cognition-workflows/{p["workflow_hash"]}/"' in html
    for e in data["environments"]:
        assert f'href="/store/environments/{e["hash"]}/"' in html
    assert len(data["entities"]) == 4
    for e in data["entities"]:
        assert f'href="/store/entities/{e["hash"]}/"' in html
        assert e["id"] in html
    (derivation,) = data["derivations"]
    roles = {p["hash"]: p["role"] for p in derivation["parents"]}
    assert roles[loaded["made"]["park"]["scenario_hash"]] == "inspiration"
    for parent in roles:
        assert f'href="/scenarios/{parent}/"' in html
    assert f'href="/worlds/?scenario={fork_hash}"' in html
    assert f'href="/scenarios/{fork_hash}/lineage/"' in html
    assert data["world_count"] == 0
    assert [(t["kind"], t["what"]) for t in derivation["touched_rows"]] == [
        ("scenario_field", "description")
    ]
    assert "The same ant, a different plate." in html


def test_touched_components_link_old_and_new(client_in: Client, loaded: dict[str, Any]) -> None:
    ant = loaded["made"]["ant_on_plate"]
    fork = services.scenario_fork(
        data={
            "primary_parent": {"hash": ant["scenario_hash"]},
            "changes": {"environment_upserts": {"kitchen_plate": {"inline": "Another plate."}}},
        }
    )
    html = client_in.get(f"/scenarios/{fork['scenario_hash']}/").content.decode()
    assert f'href="/store/environments/{ant["environments"]["kitchen_plate"]}/"' in html
    assert f'href="/store/environments/{fork["environments"]["kitchen_plate"]}/"' in html


def test_lineage_svg_after_a_fork(client_in: Client, loaded: dict[str, Any]) -> None:
    fork_hash = loaded["fork"]["scenario_hash"]
    data = client_in.get(f"/scenarios/{fork_hash}/lineage/", {"format": "json"}).json()
    assert len(data["nodes"]) == 3 and len(data["edges"]) == 2
    html = client_in.get(f"/scenarios/{fork_hash}/lineage/").content.decode()
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert len(re.findall(r'<g class="node[ "]', svg)) == 3
    assert svg.count('<g class="edge"') == 2
    for node in data["nodes"]:
        assert f'href="/scenarios/{node["hash"]}/"' in svg
    assert "inspiration" in svg
    for edge in data["edges"]:
        assert f'data-parent="{edge["parent"]}" data-child="{edge["child"]}"' in svg


def test_lineage_svg_escapes_text_and_layers_by_generation() -> None:
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    svg = lineage_svg(
        {
            "root": c,
            "nodes": [
                {"hash": a, "scenario_slug": "first", "names": ["<x>"]},
                {"hash": b, "scenario_slug": "second", "names": []},
                {"hash": c, "scenario_slug": "third", "names": []},
            ],
            "edges": [
                {"parent": a, "child": b, "role": "primary"},
                {"parent": b, "child": c, "role": 'a"b'},
                {"parent": a, "child": c, "role": "extra"},
            ],
        }
    )
    assert "<x>" not in svg and "&lt;x&gt;" in svg
    assert 'a"b' not in svg
    xs = [int(x) for x in re.findall(r'<rect x="(\d+)"', svg)]
    assert xs[0] < xs[1] < xs[2]  # three generations, three columns


def test_names_pages_show_history_with_tombstones(
    client_in: Client, loaded: dict[str, Any]
) -> None:
    names = client_in.get("/names/", {"format": "json"}).json()
    assert names["count"] == ScenarioName.objects.count()
    listed = {r["name"]: r["hash"] for r in names["results"]}
    assert listed["ant_fork"] == loaded["fork"]["scenario_hash"]
    assert "moving" not in listed
    html = client_in.get("/names/").content.decode()
    assert 'href="/names/ant_fork/"' in html
    moving = client_in.get("/names/moving/", {"format": "json"}).json()
    assert moving["hash"] is None and len(moving["history"]) == 3
    page = client_in.get("/names/moving/").content.decode()
    assert page.count(">unset<") == 2  # current pointer and the tombstone row
    assert f'href="/scenarios/{loaded["fork"]["scenario_hash"]}/"' in page


@pytest.mark.parametrize(
    "url, status",
    [
        (f"/store/entities/{MISSING}/", 404),
        (f"/store/entities/{MISSING}/uses/", 404),
        (f"/scenarios/{MISSING}/", 404),
        (f"/scenarios/{MISSING}/lineage/", 404),
        ("/scenarios/no_such_name/", 404),
        ("/names/no_such_name/", 404),
        ("/store/no-such-kind/", 404),
        ("/store/entities/not-a-hash/", 400),
        ("/store/entities/ABC/uses/", 400),
        ("/scenarios/Not A Name!/", 400),
        ("/names/Bad Name/", 400),
        ("/scenarios/?has_parents=maybe", 400),
        ("/scenarios/?uses_entity_hash=xyz", 400),
        ("/scenarios/?limit=0", 400),
        ("/store/entities/?offset=-1", 400),
    ],
)
def test_bad_references_are_error_pages(client_in: Client, url: str, status: int) -> None:
    response = client_in.get(url)
    assert response.status_code == status
    assert b"<html" in response.content
    sep = "&" if "?" in url else "?"
    as_json = client_in.get(f"{url}{sep}format=json")
    assert as_json.status_code == status
    assert as_json.json()["error"]["code"]


def _assemble_many(start: int, stop: int) -> None:
    body = load_fixture("ant_on_plate")
    for i in range(start, stop):
        made = services.scenario_assemble(
            data={**body, "description": f"Scenario {i}.", "name": f"s{i}"}
        )
        if i % 4 == 0:
            services.scenario_fork(
                data={
                    "primary_parent": {"hash": made["scenario_hash"]},
                    "changes": {"description": f"Fork of {i}."},
                }
            )


def test_scenario_list_query_count_does_not_grow_with_rows(
    client_in: Client, django_assert_max_num_queries: Any
) -> None:
    _assemble_many(0, 4)
    with CaptureQueriesContext(connection) as few:
        small = client_in.get("/scenarios/", {"limit": 200})
    assert len(ROW_LINK.findall(small.content.decode())) == 5
    _assemble_many(4, 32)
    with django_assert_max_num_queries(len(few.captured_queries)):
        large = client_in.get("/scenarios/", {"limit": 200})
    assert len(ROW_LINK.findall(large.content.decode())) == 40


def test_entity_list_query_count_does_not_grow_with_rows(
    client_in: Client, django_assert_max_num_queries: Any
) -> None:
    services.scenario_assemble(data=load_fixture("locked_vending_room"))
    with CaptureQueriesContext(connection) as few:
        small = client_in.get("/store/entities/", {"limit": 200})
    assert small.status_code == 200
    for name in fixture_names():
        services.scenario_assemble(data=load_fixture(name))
    assert Entity.objects.count() > 10
    with django_assert_max_num_queries(len(few.captured_queries)):
        large = client_in.get("/store/entities/", {"limit": 200})
    assert large.content.count(b'href="/store/entities/') >= Entity.objects.count()


def test_a_population_page_shows_its_coverage_marginals_and_agents(
    client: Client, reader_user: User
) -> None:
    content = load_fixture("park_visitors_rules")["populations"][0]["ref"]["inline"]
    population = services.population_put(content=content)["hash"]
    client.force_login(reader_user)
    page = client.get(f"/store/populations/{population}/").content.decode()
    found = population_coverage(hash=population)
    assert f'data-key="coverage" data-value="{found["coverage"]["value"]!r}"' in page
    assert "centered_l2_discrepancy" in page and "scipy.stats.qmc.discrepancy" in page
    for marginal in found["marginals"]:
        assert page.count(f'<tr data-axis="{marginal["axis"]}">') == len(marginal["cells"])
    assert "<code>visitor_1</code>" in page and "<code>visitor_20</code>" in page
    assert "<code>visitor_21</code>" not in page  # the first twenty on the page
    listed = client.get("/store/populations/").content.decode()
    assert population[:12] in listed
