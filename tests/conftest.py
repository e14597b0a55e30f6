"""The one conftest: users and clients, workflows, a Celery worker, the development services
(toy sources, toy MCP server) and the small worlds. Tests run on the real (embedded)
PostgreSQL; never SQLite. Helpers to import live in ``tests/support/``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chukwa_core.patch_schema import world_patch_schema_hash
from cognition_app.sources import conformance
from devservices import toy_mcp
from devservices.toys import serve, toy_env
from scenarios_app import services as store_services
from tests.support.worlds import TOY_MCP_KEY

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture(autouse=True)
def _migration_rows_in_transactional_tests(request: pytest.FixtureRequest) -> None:
    """Transactional tests flush every table afterwards, including rows that data migrations
    created (the WorldPatch schema component, the operators group); put them back first."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        return
    request.getfixturevalue("transactional_db")
    from django.contrib.auth.models import Group

    from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA
    from scenarios_app.models import JsonSchema

    JsonSchema.objects.get_or_create(
        hash=world_patch_schema_hash(), defaults={"content": WORLD_PATCH_SCHEMA}
    )
    Group.objects.get_or_create(name="operators")


@pytest.fixture(autouse=True)
def _subject_threads_closed() -> Iterator[None]:
    """The concurrent phase's thread pool outlives a turn, each thread keeping its database
    connection; after a test that ran one in this process, its threads stop and close them
    (no connection left on the test database)."""
    yield
    from cognition_app.recording import write_behind
    from worlds_app.services.subject_threads import close_pool

    close_pool()
    write_behind.close()  # the trace writer's thread and connection too


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    # PBKDF2 costs ~0.5 s per user; tests don't need slow hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator_user(db: Any) -> User:
    user = User.objects.create_user("ops", password="ops-password-123")
    # get_or_create: transactional tests flush the rows that migrations created
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return user


@pytest.fixture
def reader_user(db: Any) -> User:
    return User.objects.create_user("reader", password="reader-password-123")


@pytest.fixture
def operator_client(operator_user: User) -> APIClient:
    client = APIClient()
    token = Token.objects.create(user=operator_user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def reader_client(reader_user: User) -> APIClient:
    client = APIClient()
    token = Token.objects.create(user=reader_user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def anon_client(db: Any) -> APIClient:
    return APIClient()


@pytest.fixture
def world_patch_hash() -> str:
    return world_patch_schema_hash()


LLM_SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "chat",
    "interface": {
        "name": "llm_chat_completions",
        "model": "gpt-4o-mini",
        "base_url_env": "CHUKWA_LLM_BASE_URL",
        "api_key_env": "CHUKWA_LLM_API_KEY",
        "schema_delivery": "response_format",
        "timeout_ms": 60000,
        "params": {"temperature": 0.7, "max_tokens": 800},
    },
}

HTTP_SOURCE: dict[str, Any] = {
    "version": 1,
    "label": "toy_vending_machine",
    "interface": {
        "name": "http_json",
        "method": "POST",
        "url_env": "CHUKWA_TOY_VENDING_URL",
        "path": "/buy_candy",
        "timeout_ms": 5000,
    },
}


def tool_loop_workflow(
    world_patch_hash: str, *, prompt: str = "You control the acting subject."
) -> dict[str, Any]:
    """A minimal valid workflow with everything inline except the WorldPatch schema."""
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": {"inline": LLM_SOURCE},
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": prompt},
                        {
                            "role": "user",
                            "content": "World:\n{{world.projection}}\n\n{{subject.rendered}}",
                        },
                    ]
                },
                "available_tools": [],
                "max_generation_attempts": 3,
                "max_tool_calls": 0,
                "final_schema_ref": {"hash": world_patch_hash},
            }
        ],
        "apply": {"from": "act.final"},
    }


@pytest.fixture
def make_workflow(world_patch_hash: str) -> Any:
    def factory(prompt: str = "You control the acting subject.") -> dict[str, Any]:
        return tool_loop_workflow(world_patch_hash, prompt=prompt)

    return factory


PROJECT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def _celery_worker_queue(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """The session's Celery worker (see :func:`celery_worker`), started once; its queue."""
    from django.db import connection

    from tests.support.worker import worker_process

    queue = f"test-{os.getpid()}"
    env = {"CHUKWA_DB_NAME": connection.settings_dict["NAME"]}
    with worker_process(f"it-{os.getpid()}", env=env, queue=queue, pool="prefork", concurrency=2):
        yield queue


@pytest.fixture
def celery_worker(_celery_worker_queue: str) -> Iterator[str]:
    """A real Celery worker (prefork, 2 processes) on the embedded Redis, reading and writing the
    test database, consuming a queue of its own. Yields the queue name. Attempt tasks go to it
    during the test that asks for it only: a later test that runs a turn in-process must not
    have its attempt claimed by the worker first (a kept connection makes the worker that
    fast)."""
    from tests.support.worker import routed_to

    with routed_to(_celery_worker_queue):
        yield _celery_worker_queue


# --- the development services and the small worlds the tests share -----------------------


@pytest.fixture
def toy_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The toy service on a free port with a private state dir; the six CHUKWA_TOY_*_URL
    variables point at it. Yields its base URL."""
    server = serve("127.0.0.1", 0, tmp_path / "toys")
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    for name, value in toy_env(base_url).items():
        monkeypatch.setenv(name, value)
    try:
        yield base_url
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def toy_mcp_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[toy_mcp.RunningMcp]:
    """The toy MCP server (the lamp) on a free port, requiring :data:`TOY_MCP_KEY`;
    CHUKWA_MCP_LAMP_URL and CHUKWA_MCP_LAMP_API_KEY point at it."""
    server = toy_mcp.serve(api_key=TOY_MCP_KEY)
    monkeypatch.setenv(toy_mcp.LAMP_URL_ENV, server.url)
    monkeypatch.setenv(toy_mcp.LAMP_KEY_ENV, TOY_MCP_KEY)
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture(autouse=True)
def _fresh_probe_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The conformance-probe cache is process-wide and keyed by base URL; a later test's scripted
    server may get a port an earlier one had, so every test starts with an empty cache."""
    monkeypatch.setattr(conformance, "_probe_cache", {})


@pytest.fixture
def base(make_workflow: Any) -> store_services.AssembleResult:
    """Profile p; environments room (inhabited) and hall (staged); agent ant and prop crumb."""
    from tests.scenarios_app.store_helpers import inline_body  # it imports this module

    return store_services.scenario_assemble(
        data=inline_body(
            make_workflow,
            environments={
                "room": {"inline": "A small white plate under a lamp."},
                "hall": {"inline": "An empty hallway."},
            },
            name="base",
        )
    )


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium at 1400 by 1000 pixels (``tests/support/chromium.py``), waiting up to 2 s for an
    element to appear."""
    from tests.support.chromium import chromium  # Selenium: loaded by the browser tests only

    with chromium() as driver:
        driver.implicitly_wait(2)
        yield driver
