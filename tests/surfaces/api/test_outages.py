"""Database outages answer 503 `unavailable`: API reads and writes, pages, and
failures inside a middleware; never a 500, a traceback or a secret; nothing half-written; the
process recovers by itself once the database is back.

The fast tests point this process's connection at a socket where no server listens (a real
connection failure, deterministic, without stopping the server the suite runs on). The `fault`
test stops and restarts a real PostgreSQL server under a running web server."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.handlers.exception import convert_exception_to_response
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from surfaces.outages import OutageMiddleware
from tests.support.worker import unread_queue
from worlds_app.models import TurnAttempt
from worlds_app.services import world_create

PROJECT = Path(__file__).resolve().parents[3]


@contextmanager
def database_down() -> Iterator[None]:
    """This process's connection now goes to a socket directory where nothing listens."""
    previous = connection.settings_dict["HOST"]
    connection.close()
    connection.settings_dict["HOST"] = tempfile.mkdtemp(prefix="no-postgres-")
    try:
        yield
    finally:
        shutil.rmtree(connection.settings_dict["HOST"])
        connection.close()
        connection.settings_dict["HOST"] = previous


def _assert_unavailable_json(response: Any) -> None:
    body = json.loads(response.content)
    assert response.status_code == 503, body
    assert body["error"]["code"] == "unavailable"
    assert body["error"]["details"] == {"service": "database", "retry_after_seconds": 5}
    assert response["Retry-After"] == "5"
    # the driver's message names the socket: it must stay in the log
    assert "no-postgres-" not in response.content.decode()
    assert "Traceback" not in response.content.decode()


def _world() -> str:
    body = {k: v for k, v in load_fixture("picnic_rules").items() if k not in ("name", "note")}
    world_create(
        data={
            "slug": "outage",
            "scenario_ref": {"hash": scenario_assemble(data=body)["scenario_hash"]},
        }
    )
    return "outage"


@pytest.mark.django_db(transaction=True)
def test_api_read_and_write_answer_503_while_the_database_is_down_then_recover(
    operator_user: User,
) -> None:
    slug = _world()
    client = APIClient()
    client.force_authenticate(operator_user)  # no database needed to authenticate
    with database_down():
        _assert_unavailable_json(client.get("/api/worlds/"))
        _assert_unavailable_json(client.post(f"/api/worlds/{slug}/turns/", {}, format="json"))
    # the same process, the same connection settings: it recovers by itself
    assert client.get("/api/worlds/").status_code == 200
    assert not TurnAttempt.objects.filter(world__slug=slug).exists()  # nothing half-written
    # Its kick goes to a queue no worker reads: a worker claiming the attempt while the test's
    # flush truncates the tables deadlocked with it once.
    with unread_queue(f"outage-{os.getpid()}"):
        response = client.post(f"/api/worlds/{slug}/turns/", {}, format="json")
    assert response.status_code == 202, response.json()


@pytest.mark.django_db(transaction=True)
def test_token_authentication_during_an_outage_is_a_503_not_a_401(operator_client: Any) -> None:
    with database_down():
        _assert_unavailable_json(operator_client.get("/api/worlds/"))
    assert operator_client.get("/api/worlds/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_pages_answer_a_plain_503_page_while_the_database_is_down(operator_user: User) -> None:
    client = Client()
    client.force_login(operator_user)
    with database_down():
        page = client.get("/worlds/")
        as_json = client.get("/worlds/?format=json")
        home = client.get("/")
    assert page.status_code == 503
    assert page["Content-Type"].startswith("text/html")
    assert "Temporarily unavailable" in page.content.decode()
    assert "Traceback" not in page.content.decode()
    assert home.status_code == 503
    _assert_unavailable_json(as_json)
    assert client.get("/worlds/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_an_outage_inside_a_middleware_is_a_503_too() -> None:
    """Django turns a middleware's exception into a 500 where it happens; the outer
    OutageMiddleware still answers 503 for it."""

    def inner(request: HttpRequest) -> HttpResponse:
        with connection.cursor() as cursor:  # what a session save would do
            cursor.execute("SELECT 1")
        return HttpResponse("unreachable")

    middleware = OutageMiddleware(convert_exception_to_response(inner))
    with database_down():
        response = middleware(RequestFactory().get("/api/worlds/"))
    _assert_unavailable_json(response)


# --- a real PostgreSQL outage under a running web server --------------------------------------

PASSWORD = "s3cret-dsn-password"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@contextmanager
def _data_dir(path: Path) -> Iterator[None]:
    """The embedded-service helpers act on the stack of ``path``."""
    previous = os.environ.get("CHUKWA_DATA_DIR")
    os.environ["CHUKWA_DATA_DIR"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["CHUKWA_DATA_DIR"]
        else:
            os.environ["CHUKWA_DATA_DIR"] = previous


@pytest.fixture
def throwaway_web() -> Iterator[dict[str, Any]]:
    """A PostgreSQL and Redis of their own (a fresh data folder), migrated, with an operator, a
    world and a gunicorn web server using DATABASE_URL with a password in it."""
    from chukwa_site import embedded

    data = Path(tempfile.mkdtemp(prefix="chukwa-outage-", dir="/tmp"))
    with _data_dir(data):
        pg = embedded.postgres_ensure()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CHUKWA_DB_NAME", "CHUKWA_TEST_DB_NAME", "REDIS_URL"}
    }
    socket_dir = pg.socket_dir.replace("/", "%2F")
    env.update(
        {
            "CHUKWA_DATA_DIR": str(data),
            "DJANGO_SETTINGS_MODULE": "chukwa_site.settings",
            "CHUKWA_DEBUG": "true",  # even with DEBUG on, no traceback reaches a client
            "DATABASE_URL": f"postgres://postgres:{PASSWORD}@{socket_dir}:{pg.port}/chukwa",
        }
    )
    web: subprocess.Popen[bytes] | None = None
    try:
        _manage(env, "migrate", "--noinput", "-v", "0")
        token = re.search(
            r"API token: (\w+)", _manage(env, "create_operator", "ops", "--password", "ops-pw-123")
        )
        assert token is not None
        _manage(
            env,
            "shell",
            "-c",
            "from scenarios_app.fixture_files import load_fixture\n"
            "from scenarios_app.services import scenario_assemble\n"
            "from worlds_app.services import world_create\n"
            "b = {k: v for k, v in load_fixture('picnic_rules').items() if k not in ('name', 'note')}\n"
            "h = scenario_assemble(data=b)['scenario_hash']\n"
            "world_create(data={'slug': 'w', 'scenario_ref': {'hash': h}})\n",
        )
        port = _free_port()
        web = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "chukwa_site.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
            ],
            cwd=PROJECT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(data / "web.log").open("w"),
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/accounts/login/", timeout=5)
                break
            except httpx.TransportError:
                assert web.poll() is None and time.monotonic() < deadline, "web did not start"
                time.sleep(0.2)
        yield {"base": base, "token": token.group(1), "web": web, "data": data}
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=30)
        with _data_dir(data):
            embedded.redis_stop()
            embedded.postgres_stop()
        shutil.rmtree(data)


def _sign_in(client: httpx.Client) -> None:
    client.get("/accounts/login/")
    response = client.post(
        "/accounts/login/",
        data={
            "username": "ops",
            "password": "ops-pw-123",
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
    assert response.status_code == 302, response.text[-500:]


@pytest.mark.fault
def test_real_postgres_outage_answers_503_and_the_web_process_recovers(
    throwaway_web: dict[str, Any],
) -> None:
    from chukwa_site import embedded

    api = httpx.Client(
        base_url=throwaway_web["base"],
        headers={"Authorization": f"Token {throwaway_web['token']}"},
        timeout=30,
    )
    browser = httpx.Client(base_url=throwaway_web["base"], timeout=30)
    _sign_in(browser)
    assert api.get("/api/worlds/").status_code == 200
    assert browser.get("/worlds/").status_code == 200

    with _data_dir(throwaway_web["data"]):
        assert embedded.postgres_stop(mode="immediate")
    try:
        read = api.get("/api/worlds/w/")
        write = api.post("/api/worlds/w/turns/", json={"count": 2})
        page = browser.get("/worlds/w/")
    finally:
        with _data_dir(throwaway_web["data"]):
            embedded.postgres_ensure()
    for response in (read, write):
        body = response.json()
        assert response.status_code == 503, body
        assert body["error"]["code"] == "unavailable"
        assert body["error"]["details"]["service"] == "database"
    assert page.status_code == 503
    assert "Temporarily unavailable" in page.text
    for response in (read, write, page):
        assert PASSWORD not in response.text
        assert "Traceback" not in response.text

    # Same web process (never restarted), PostgreSQL back: requests succeed again.
    assert throwaway_web["web"].poll() is None
    assert api.get("/api/worlds/w/").status_code == 200
    assert api.get("/api/worlds/w/").json()["current_turn"] == 0
    write = api.post("/api/worlds/w/turns/", json={"count": 1})
    assert write.status_code == 202, write.text
    assert browser.get("/worlds/w/").status_code == 200
    # Only the attempt queued after the outage exists: the refused write left nothing behind.
    attempts = api.get("/api/worlds/w/").json()["recent_attempts"]
    assert [a["id"] for a in attempts] == write.json()["attempt_ids"]


def test_a_broker_error_that_escapes_is_a_503_naming_the_broker(tmp_path: Path) -> None:
    """Enqueue never lets one escape (the re-drive delivers later), but any other code path
    that publishes answers 503 too; the error comes from a real publish to a dead socket."""
    from kombu import Connection
    from kombu.exceptions import OperationalError as BrokerOperationalError

    from surfaces.api.errors import api_exception_handler

    dead = f"redis+socket://{tmp_path / 'no-redis.sock'}?password=broker-secret"
    with Connection(dead) as conn, pytest.raises(BrokerOperationalError) as caught:
        conn.ensure_connection(max_retries=1)
    response = api_exception_handler(caught.value, {})
    assert response is not None
    assert response.status_code == 503
    assert response.data["error"]["code"] == "unavailable"
    assert response.data["error"]["details"]["service"] == "broker"
    assert "broker-secret" not in json.dumps(response.data)
    assert "no-redis.sock" not in json.dumps(response.data)
