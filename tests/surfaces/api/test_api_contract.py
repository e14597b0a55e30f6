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

from tests.support.worker import routed_to
from worlds_app.models import AttemptStatus, TurnAttempt

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
