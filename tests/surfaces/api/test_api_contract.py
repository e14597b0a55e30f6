"""The OpenAPI document is a contract a client can be built from: it regenerates with
no warning, and a REST client generated from it (openapi-python-client, offline) creates a
world and queues turns against a live server, and reads the error envelope."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worker import routed_to
from tests.support.worlds import fixture_body
from worlds_app.models import AttemptStatus, TurnAttempt
from worlds_app.services.experiments import experiment_create

CLIENT_PACKAGE = "chukwa_client"


def test_the_document_regenerates_without_a_warning(tmp_path: Path) -> None:
    target = tmp_path / "schema.yml"
    # --fail-on-warn raises on the first warning (and --validate on any OpenAPI error).
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    text = target.read_text()
    assert "operationId: world_create" in text
    assert "ScenarioAssembleInput" in text


def test_every_operation_and_component_is_named_once(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(target))
    document = json.loads(target.read_text())
    operations = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operations) == len(set(operations)) >= 40
    bodies = {
        (path, method): op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        for path, item in document["paths"].items()
        for method, op in item.items()
        if "requestBody" in op
    }
    # Each write has a body of its own: world creation is not described as an assemble body.
    assert bodies[("/api/worlds/", "post")].endswith("/WorldCreateInput")
    assert bodies[("/api/scenarios/fork/", "post")].endswith("/ScenarioForkInput")
    assert bodies[("/api/worlds/{slug}/turns/", "post")].endswith("/TurnEnqueueInput")
    assert len(set(bodies.values())) == len(bodies)
    world = document["paths"]["/api/worlds/{slug}/"]["get"]
    assert {"400", "401", "403", "404", "503"} <= set(world["responses"])
    (slug,) = world["parameters"]
    assert slug["schema"]["pattern"].startswith("^[a-z0-9]")


@pytest.fixture(scope="module")
def generated_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """Generate the client from the document, as a client author would, and import it."""
    root = tmp_path_factory.mktemp("client")
    schema = root / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(schema))
    config = root / "config.yml"
    config.write_text(f"package_name_override: {CLIENT_PACKAGE}\npost_hooks: []\n")
    generator = Path(sys.executable).with_name("openapi-python-client")
    result = subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            str(schema),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(root / CLIENT_PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The generator names what it could not express as a warning; there must be none.
    assert "Warning" not in result.stdout + result.stderr, result.stdout + result.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(CLIENT_PACKAGE)
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.split(".")[0] == CLIENT_PACKAGE]:
            del sys.modules[name]


@pytest.mark.django_db(transaction=True)
def test_generated_client_creates_a_world_and_queues_turns(
    live_server: Any, operator_user: User, generated_client: ModuleType
) -> None:
    call_command("load_demo_scenarios")
    token = Token.objects.create(user=operator_user).key
    models = importlib.import_module(f"{CLIENT_PACKAGE}.models")
    client = generated_client.AuthenticatedClient(
        base_url=live_server.url, token=token, prefix="Token"
    )
    world_create = importlib.import_module(f"{CLIENT_PACKAGE}.api.worlds.world_create")
    turn_enqueue = importlib.import_module(f"{CLIENT_PACKAGE}.api.worlds.turn_enqueue")
    world_get = importlib.import_module(f"{CLIENT_PACKAGE}.api.worlds.world_get")

    body = models.WorldCreateInput.from_dict(
        {"slug": "client-made", "scenario_ref": {"name": "ant_on_plate_rules"}}
    )
    created = world_create.sync_detailed(client=client, body=body)
    assert created.status_code == 201, created.content
    world = created.parsed
    assert isinstance(world, models.WorldCreateOutput)
    assert (world.slug, world.current_turn, world.label) == ("client-made", 0, "ant_on_plate_rules")

    # A queue no worker reads: the session's worker (if an earlier test started it) must not
    # run these attempts while the test looks at them.
    with routed_to(f"unconsumed-{uuid.uuid4().hex}"):
        queued = turn_enqueue.sync_detailed(
            "client-made", client=client, body=models.TurnEnqueueInput(count=3)
        )
    assert queued.status_code == 202, queued.content
    batch = queued.parsed
    assert isinstance(batch, models.TurnEnqueueOutput)
    assert all(isinstance(attempt_id, uuid.UUID) for attempt_id in batch.attempt_ids)
    stored = list(TurnAttempt.objects.filter(world__slug="client-made").order_by("seq"))
    assert [a.id for a in stored] == batch.attempt_ids
    assert {a.batch_id for a in stored} == {batch.batch_id}
    assert {a.status for a in stored} <= {AttemptStatus.QUEUED, AttemptStatus.RUNNING}

    detail = world_get.sync("client-made", client=client)
    assert isinstance(detail, models.WorldGetOutput)
    assert len(detail.recent_attempts) == 3

    # Errors parse as the envelope, with the API's codes.
    again = world_create.sync_detailed(client=client, body=body)
    assert again.status_code == 409
    assert isinstance(again.parsed, models.Error)
    assert again.parsed.error.code == "world_exists"
    too_many = turn_enqueue.sync_detailed(
        "client-made", client=client, body=models.TurnEnqueueInput(count=101)
    )
    assert too_many.status_code == 400
    assert too_many.parsed.error.code == "invalid_count"
    assert TurnAttempt.objects.filter(world__slug="client-made").count() == 3


def _components_resolver(document: dict[str, Any]) -> Any:
    components = document["components"]["schemas"]

    def resolve(schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A schema that names a component (directly, or as drf-spectacular wraps a described
        one: ``allOf`` of one ``$ref``) → (its name, the component)."""
        if "allOf" in schema and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        assert "$ref" in schema, f"not a named component: {schema}"
        name = schema["$ref"].rsplit("/", 1)[-1]
        return name, components[name]

    return resolve


def _field_types(component: dict[str, Any]) -> dict[str, str]:
    """Each property's JSON type ("number?" when it may be null; "ref" for a component,
    "array" for a list), every one of them required: a client never meets a missing field."""
    assert component["type"] == "object"
    assert set(component.get("required", [])) == set(component["properties"]), component
    types = {}
    for name, schema in component["properties"].items():
        kind = "ref" if "$ref" in schema or "allOf" in schema else schema.get("type", "untyped")
        types[name] = kind + ("?" if schema.get("nullable") else "")
    return types


def test_the_experiment_results_are_declared_field_by_field(tmp_path: Path) -> None:
    """The results' shape is in the document (every field typed, not ``object``),
    each level a named component a generated client turns into a class."""
    target = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(target))
    document = json.loads(target.read_text())
    resolve = _components_resolver(document)
    answer = document["paths"]["/api/experiments/{slug}/results/"]["get"]["responses"]["200"]
    _, results = resolve(answer["content"]["application/json"]["schema"])
    assert _field_types(results) == {
        "experiment": "string",
        "control": "string",
        "results": "array",
        "registered_hash": "string",
        "history": "array",
        "multiplicity": "string",
        "missing_data": "string",
        "methods": "string",
        "software": "ref",
        "design_text": "string?",
        "factorial": "array",
        "stopping": "ref?",
    }
    _, fit = resolve(results["properties"]["factorial"]["items"])
    assert _field_types(fit)["effects"] == _field_types(fit)["cells"] == "array"
    _, effect = resolve(fit["properties"]["effects"]["items"])
    assert _field_types(effect)["ci_low"] == "number?"
    assert _field_types(effect)["aliases"] == "array"
    _, stopping = resolve(results["properties"]["stopping"])
    assert _field_types(stopping)["reason"] == "string?"
    _, look = resolve(stopping["properties"]["looks"]["items"])
    assert _field_types(look) == {
        "replicates": "integer",
        "pairs": "integer",
        "e_value": "number",
        "log_e_value": "number",
        "boundary": "number",
        "decision": "string",
    }
    _, metric_result = resolve(results["properties"]["results"]["items"])
    assert _field_types(metric_result) == {
        "metric": "ref",
        "arms": "array",
        "effects": "array",
        "per_turn_ci_method": "string",
        "people": "ref?",
    }
    _, metric = resolve(metric_result["properties"]["metric"])
    assert _field_types(metric) == {
        "hash": "string",
        "label": "string",
        "aggregate": "string",
        "type": "string",
        "type_label": "string",
        "type_basis": "string",
        "range_low": "number?",
        "range_high": "number?",
        "turn_type_label": "string",
        "primary": "boolean",
        "added_after_creation": "boolean",
    }
    assert metric["properties"]["hash"]["pattern"] == "^[0-9a-f]{64}$"
    _, arm = resolve(metric_result["properties"]["arms"]["items"])
    assert _field_types(arm) == {
        "arm": "string",
        "n": "integer",
        "n_missing": "integer",
        "missing": "ref",
        "mean": "number?",
        "sd": "number?",
        "ci_low": "number?",
        "ci_high": "number?",
        "ci_status": "string",
        "ci_reason": "string?",
        "ci_method": "string",
        "ci_library": "string",
        "per_turn": "array",
        "worlds": "array",
    }
    assert arm["properties"]["arm"]["pattern"].startswith("^[a-z0-9]")
    _, point = resolve(arm["properties"]["per_turn"]["items"])
    assert _field_types(point) == {
        "turn": "integer",
        "n": "integer",
        "mean": "number?",
        "ci_low": "number?",
        "ci_high": "number?",
    }
    _, world = resolve(arm["properties"]["worlds"]["items"])
    assert _field_types(world) == {
        "replicate": "integer",
        "world": "string",
        "value": "number?",
        "missing_reason": "string?",
    }
    _, effect = resolve(metric_result["properties"]["effects"]["items"])
    assert _field_types(effect) == {
        "arm": "string",
        "control": "string",
        "n_pairs": "integer",
        "n_dropped": "integer",
        "control_mean": "number?",
        "treatment_mean": "number?",
        "difference": "number?",
        "ci_low": "number?",
        "ci_high": "number?",
        "ci_status": "string",
        "ci_reason": "string?",
        "ci_method": "string",
        "ci_library": "string",
        "p_value": "number?",
        "p_display": "string",
        "p_holm": "number?",
        "p_method": "string",
        "p_library": "string",
        "p_exact": "boolean",
        "p_resamples": "integer?",
        "p_seed": "integer?",
        "p_monte_carlo_se": "number?",
        "can_reach_significance": "boolean",
        "note": "string?",
        "effect_sizes": "array",
        "primary": "boolean",
        "added_after_creation": "boolean",
    }
    _, people = resolve(metric_result["properties"]["people"])
    assert _field_types(people) == {
        "n": "integer",
        "mean": "number?",
        "sd": "number?",
        "distances": "array",
    }
    _, distance = resolve(people["properties"]["distances"]["items"])
    assert _field_types(distance) == {
        "arm": "string",
        "n_worlds": "integer",
        "n_people": "integer",
        "worlds_mean": "number?",
        "people_mean": "number?",
        "difference": "number?",
        "ci_low": "number?",
        "ci_high": "number?",
        "ci_method": "string",
        "ks_statistic": "number?",
        "ks_p": "number?",
        "ks_method": "string",
        "wasserstein": "number?",
        "wasserstein_ci_low": "number?",
        "wasserstein_ci_high": "number?",
        "wasserstein_method": "string",
        "wasserstein_p": "number?",
        "wasserstein_p_method": "string",
        "library": "string",
        "note": "string?",
    }
    # every level is a component of its own, named once
    names = {
        resolve(s)[0]
        for s in (
            results["properties"]["results"]["items"],
            metric_result["properties"]["metric"],
            metric_result["properties"]["arms"]["items"],
            metric_result["properties"]["effects"]["items"],
            arm["properties"]["per_turn"]["items"],
            arm["properties"]["worlds"]["items"],
        )
    }
    assert len(names) == 6


@pytest.mark.django_db
def test_a_generated_client_reads_the_results_as_classes(
    operator_client: Any, generated_client: ModuleType
) -> None:
    scenario = scenario_assemble(data=fixture_body("ant_on_plate_rules"))["scenario_hash"]
    metric = metric_put(
        content={
            "version": 1,
            "label": "turn_number",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    experiment_create(
        data={
            "slug": "typed",
            "arms": [
                {"label": "a", "scenario_ref": {"hash": scenario}},
                {"label": "b", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 2,
            "turns": 1,
            "metrics": [{"hash": metric}],
        }
    )
    answer = operator_client.get("/api/experiments/typed/results/")
    assert answer.status_code == 200
    models = importlib.import_module(f"{CLIENT_PACKAGE}.models")
    results = models.ExperimentResults.from_dict(answer.json())
    (result,) = results.results
    assert isinstance(result, models.ExperimentMetricResult)
    assert result.metric.hash_ == metric
    assert [arm.arm for arm in result.arms] == ["a", "b"]
    assert [w.world for w in result.arms[1].worlds] == ["typed--b--1", "typed--b--2"]
    assert [p.turn for p in result.arms[0].per_turn] == [0, 1]
    (effect,) = result.effects
    assert isinstance(effect, models.ExperimentEffect)
    assert (effect.arm, effect.control, effect.n_pairs, effect.p_value) == ("b", "a", 0, None)


def test_the_experiment_estimate_is_declared_field_by_field(tmp_path: Path) -> None:
    """The estimate's time (``seconds``, null when a latency is unknown, and its basis) is in
    the document beside what it counts and prices."""
    target = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(target))
    document = json.loads(target.read_text())
    resolve = _components_resolver(document)
    answer = document["paths"]["/api/experiments/estimate/"]["post"]["responses"]["200"]
    name, estimate = resolve(answer["content"]["application/json"]["schema"])
    assert name == "ExperimentEstimate"
    assert _field_types(estimate) == {
        "worlds": "integer",
        "turns_per_world": "integer",
        "calls": "ref",
        "tokens": "ref",
        "cost": "string?",
        "judge_cost": "ref",
        "batch_cost": "ref",
        "unpriced": "array",
        "unbounded": "array",
        "budget": "object?",
        "within_budget": "boolean?",
        "method": "string",
        "power": "ref?",
        "seconds": "integer?",
        "seconds_basis": "string",
        "recorded": "ref",
    }
