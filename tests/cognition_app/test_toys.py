"""The toy HTTP JSON sources of the park scenario, over real HTTP. No database."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from devservices.toys import (
    PA_ANNOUNCEMENT,
    PHONE_SPAM_MESSAGE,
    STOCK_FILE,
    TOY_ENV_VARS,
    main,
    serve,
    toy_env,
)

SCHEMAS_PATH = (
    Path(__file__).resolve().parents[2]
    / "scenarios_app"
    / "scenario_fixtures"
    / "schemas"
    / "park_schemas.json"
)
SCHEMAS: dict[str, dict[str, Any]] = json.loads(SCHEMAS_PATH.read_text(encoding="utf-8"))


def base_url_of(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "toys"


@pytest.fixture
def client(state_dir: Path) -> Iterator[httpx.Client]:
    server = serve("127.0.0.1", 0, state_dir)
    try:
        with httpx.Client(base_url=base_url_of(server), timeout=5) as http:
            yield http
    finally:
        stop(server)


def chukwa_headers(
    world: str | None = "park-1", turn: int | None = 1, subject: str = "bob"
) -> dict[str, str]:
    """The headers Chukwa sends on every http_json call."""
    headers = {
        "X-Chukwa-Attempt": str(uuid.uuid4()),
        "X-Chukwa-Subject": subject,
        "X-Chukwa-Invocation": str(uuid.uuid4()),
    }
    if world is not None:
        headers["X-Chukwa-World"] = world
    if turn is not None:
        headers["X-Chukwa-Turn"] = str(turn)
    return headers


def assert_valid(schema_name: str, payload: object) -> None:
    errors = list(Draft202012Validator(SCHEMAS[schema_name]).iter_errors(payload))
    assert not errors, (schema_name, payload, [e.message for e in errors])


def assert_invalid(schema_name: str, payload: object) -> None:
    assert not Draft202012Validator(SCHEMAS[schema_name]).is_valid(payload), (
        schema_name,
        payload,
    )


# --- ambient sources -------------------------------------------------------------------------


def test_weather_falls_turn_over_turn(client: httpx.Client) -> None:
    temperatures = []
    for turn in (1, 2, 3, 4, 5):
        response = client.post(
            "/weather",
            json={"turn": turn, "simulation_time": "2025-06-01T12:00:00Z"},
            headers=chukwa_headers(turn=turn, subject=""),
        )
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert body["turn"] == turn
        assert body["temperature_c"] == 24 - 3 * (turn - 1)
        assert isinstance(body["condition"], str) and body["condition"]
        assert_valid("weather_result", body)
        temperatures.append(body["temperature_c"])
    assert temperatures == sorted(temperatures, reverse=True)
    assert len(set(temperatures)) == len(temperatures)


def test_weather_is_deterministic_and_prefers_the_body_turn(client: httpx.Client) -> None:
    first = client.post("/weather", json={"turn": 2}, headers=chukwa_headers(turn=7)).json()
    second = client.post("/weather", json={"turn": 2}, headers=chukwa_headers(turn=9)).json()
    assert first == second
    assert first["turn"] == 2 and first["temperature_c"] == 21


def test_weather_falls_back_to_the_turn_header(client: httpx.Client) -> None:
    response = client.post("/weather", json={}, headers=chukwa_headers(turn=3))
    assert response.status_code == 200
    assert response.json()["turn"] == 3
    assert response.json()["temperature_c"] == 18


@pytest.mark.parametrize(
    ("body", "turn_header"),
    [({}, None), ({"turn": "two"}, 2), ({"turn": 0}, 1), ({"turn": True}, 1), ({}, "soon")],
)
def test_weather_without_a_usable_turn_is_400(
    client: httpx.Client, body: dict[str, Any], turn_header: Any
) -> None:
    headers = chukwa_headers(turn=None)
    if turn_header is not None:
        headers["X-Chukwa-Turn"] = str(turn_header)
    response = client.post("/weather", json=body, headers=headers)
    assert response.status_code == 400
    assert "turn" in response.json()["error"].lower()


def test_pa_is_silent_on_odd_turns_and_announces_on_even_turns(client: httpx.Client) -> None:
    results = {
        turn: client.post("/pa", json={"turn": turn}, headers=chukwa_headers(turn=turn)).json()
        for turn in (1, 2, 3, 4)
    }
    assert results[1] == {"announcements": []}
    assert results[3] == {"announcements": []}
    assert results[2] == {"announcements": [PA_ANNOUNCEMENT]}
    assert results[4] == {"announcements": [PA_ANNOUNCEMENT]}
    assert "east vending area" in PA_ANNOUNCEMENT
    for body in results.values():
        assert_valid("pa_result", body)


def test_phone_inbox_has_spam_on_turn_2_only(client: httpx.Client) -> None:
    results = {
        turn: client.post(
            "/phone", json={"turn": turn, "subject": "bob"}, headers=chukwa_headers(turn=turn)
        ).json()
        for turn in (1, 2, 3)
    }
    assert results[1] == {"messages": []}
    assert results[3] == {"messages": []}
    assert results[2] == {
        "messages": [
            {
                "from": "+1-555-0100",
                "kind": "spam",
                "text": "You have WON a free cruise! Reply YES to claim.",
            }
        ]
    }
    assert results[2]["messages"][0] == PHONE_SPAM_MESSAGE
    for body in results.values():
        assert_valid("phone_result", body)


# --- model-elected tools ---------------------------------------------------------------------


def test_one_candy_bar_per_world(client: httpx.Client) -> None:
    args = {"item": "candy_bar"}
    assert_valid("buy_candy_arguments", args)
    first = client.post("/buy_candy", json=args, headers=chukwa_headers(world="a", subject="bob"))
    assert first.status_code == 200
    assert first.json() == {"result": "dispensed", "item": "candy_bar", "remaining": 0}
    second = client.post("/buy_candy", json=args, headers=chukwa_headers(world="a", subject="ann"))
    assert second.json() == {"result": "empty", "remaining": 0}
    third = client.post("/buy_candy", json={}, headers=chukwa_headers(world="a"))
    assert third.json() == {"result": "empty", "remaining": 0}
    # another world has its own machine
    other = client.post("/buy_candy", json=args, headers=chukwa_headers(world="b"))
    assert other.json() == {"result": "dispensed", "item": "candy_bar", "remaining": 0}
    for body in (first.json(), second.json(), third.json(), other.json()):
        assert_valid("buy_candy_result", body)


def test_buy_candy_accepts_any_object(client: httpx.Client) -> None:
    response = client.post(
        "/buy_candy", json={"whatever": [1, 2]}, headers=chukwa_headers(world="any")
    )
    assert response.json()["result"] == "dispensed"


@pytest.mark.parametrize("world", [None, ""])
def test_buy_candy_without_a_world_is_400(client: httpx.Client, world: str | None) -> None:
    response = client.post("/buy_candy", json={"item": "candy_bar"}, headers=chukwa_headers(world))
    assert response.status_code == 400
    assert "X-Chukwa-World" in response.json()["error"]


def test_stock_survives_a_restart(state_dir: Path) -> None:
    server = serve("127.0.0.1", 0, state_dir)
    try:
        body = httpx.post(
            f"{base_url_of(server)}/buy_candy",
            json={"item": "candy_bar"},
            headers=chukwa_headers(world="persist"),
        ).json()
        assert body["result"] == "dispensed"
    finally:
        stop(server)
    stored = json.loads((state_dir / STOCK_FILE).read_text(encoding="utf-8"))
    assert stored == {"worlds": {"persist": 0}}
    assert [p.name for p in state_dir.iterdir()] == [STOCK_FILE]  # no temp file left behind

    restarted = serve("127.0.0.1", 0, state_dir)
    try:
        url = f"{base_url_of(restarted)}/buy_candy"
        again = httpx.post(url, json={}, headers=chukwa_headers(world="persist")).json()
        assert again == {"result": "empty", "remaining": 0}
        fresh = httpx.post(url, json={}, headers=chukwa_headers(world="fresh")).json()
        assert fresh["result"] == "dispensed"
    finally:
        stop(restarted)


def test_concurrent_buyers_get_exactly_one_candy_bar(client: httpx.Client) -> None:
    url = f"{str(client.base_url).rstrip('/')}/buy_candy"
    results: list[str] = []
    lock = threading.Lock()

    def buy() -> None:
        body = httpx.post(url, json={}, headers=chukwa_headers(world="race")).json()
        with lock:
            results.append(body["result"])

    threads = [threading.Thread(target=buy) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["dispensed"] + ["empty"] * 7


def test_drinking_fountain(client: httpx.Client) -> None:
    assert_valid("fountain_arguments", {})
    assert_invalid("fountain_arguments", {"cup": True})
    response = client.post("/use_drinking_fountain", json={}, headers=chukwa_headers())
    assert response.status_code == 200
    assert response.json() == {"result": "drank", "water": "cold"}
    assert_valid("fountain_result", response.json())


def test_send_text(client: httpx.Client) -> None:
    args = {"to": "+1-555-0199", "text": "Running late, grabbing a snack."}
    assert_valid("send_text_arguments", args)
    response = client.post("/send_text", json=args, headers=chukwa_headers())
    assert response.status_code == 200
    assert response.json() == {"status": "sent", "to": "+1-555-0199", "chars": len(args["text"])}
    assert_valid("send_text_result", response.json())


@pytest.mark.parametrize(
    "body",
    [{}, {"to": "+1-555-0199"}, {"text": "hi"}, {"to": "", "text": "hi"}, {"to": 5, "text": "x"}],
)
def test_send_text_missing_fields_is_400(client: httpx.Client, body: dict[str, Any]) -> None:
    response = client.post("/send_text", json=body, headers=chukwa_headers())
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]


# --- failure hooks and bad requests ----------------------------------------------------------


def test_fail_500_has_a_json_error_body(client: httpx.Client) -> None:
    response = client.post("/fail/500", json={}, headers=chukwa_headers())
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert "error" in response.json()


def test_fail_not_json_is_a_200_text_body(client: httpx.Client) -> None:
    response = client.post("/fail/not_json", json={}, headers=chukwa_headers())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "this is not json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.text)


def test_fail_schema_is_json_every_result_schema_rejects(client: httpx.Client) -> None:
    response = client.post("/fail/schema", json={}, headers=chukwa_headers())
    assert response.status_code == 200
    assert response.json() == {"unexpected": True}
    for name in SCHEMAS:
        if name.endswith("_result"):
            assert_invalid(name, response.json())


@pytest.mark.parametrize("content", [b"{not json", b"", b"[1, 2]", b'"text"', b"null", b"\xff\xfe"])
@pytest.mark.parametrize("path", ["/weather", "/buy_candy", "/send_text"])
def test_non_object_or_non_json_bodies_are_400(
    client: httpx.Client, path: str, content: bytes
) -> None:
    response = client.post(
        path,
        content=content,
        headers={**chukwa_headers(), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]


def test_unknown_paths_are_404_json(client: httpx.Client) -> None:
    for response in (
        client.post("/nope", json={}, headers=chukwa_headers()),
        client.post("/nope", content=b"{bad", headers=chukwa_headers()),
        client.get("/nope"),
    ):
        assert response.status_code == 404
        assert "error" in response.json()


def test_get_on_a_tool_is_405_and_health_is_ok(client: httpx.Client) -> None:
    response = client.get("/weather")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert "error" in response.json()
    assert client.get("/health").json() == {"ok": True}


def test_keep_alive_connection_survives_errors(client: httpx.Client) -> None:
    """One pooled connection carries a 404, a 400 and a 200 in sequence."""
    assert client.post("/nope", json={"x": 1}).status_code == 404
    assert client.post("/weather", content=b"{bad").status_code == 400
    assert client.post("/weather", json={"turn": 1}).status_code == 200


# --- schemas, env, CLI -----------------------------------------------------------------------


def test_park_schemas_are_draft_2020_12_and_argument_schemas_are_strict() -> None:
    assert set(SCHEMAS) == {
        "weather_result",
        "pa_result",
        "phone_result",
        "buy_candy_arguments",
        "buy_candy_result",
        "fountain_arguments",
        "fountain_result",
        "send_text_arguments",
        "send_text_result",
        "toggle_lamp_arguments",  # the toy MCP server's tool (devservices.toy_mcp)
        "toggle_lamp_result",
    }
    for schema in SCHEMAS.values():
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for name, schema in SCHEMAS.items():
        if not name.endswith("_arguments"):
            continue
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])
        for prop in schema["properties"].values():
            if prop.get("type") == "string":
                assert isinstance(prop.get("maxLength"), int)
    assert_invalid("buy_candy_arguments", {})
    assert_invalid("buy_candy_arguments", {"item": "candy_bar", "extra": 1})
    assert_invalid("send_text_arguments", {"to": "x" * 33, "text": "hi"})
    assert_invalid("buy_candy_result", {"result": "dispensed", "remaining": 0})


def test_toy_env_points_every_variable_at_one_service() -> None:
    env = toy_env("http://127.0.0.1:8092/")
    assert list(env) == list(TOY_ENV_VARS)
    assert set(TOY_ENV_VARS) == {
        "CHUKWA_TOY_WEATHER_URL",
        "CHUKWA_TOY_PA_URL",
        "CHUKWA_TOY_PHONE_URL",
        "CHUKWA_TOY_VENDING_URL",
        "CHUKWA_TOY_FOUNTAIN_URL",
        "CHUKWA_TOY_SEND_TEXT_URL",
    }
    assert set(env.values()) == {"http://127.0.0.1:8092"}


def test_cli_prints_the_url_and_the_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[ThreadingHTTPServer] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    import devservices.toys as toys

    real_serve = toys.serve

    def recording_serve(*args: Any, **kwargs: Any) -> ThreadingHTTPServer:
        server = real_serve(*args, **kwargs)
        started.append(server)
        return server

    monkeypatch.setattr(toys, "serve", recording_serve)
    monkeypatch.setattr(toys, "_wait_forever", interrupt)
    code = main(["--host", "127.0.0.1", "--port", "0", "--state-dir", str(tmp_path / "cli")])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    port = started[0].server_address[1]
    url = f"http://127.0.0.1:{port}"
    assert url in lines[0]
    for name in TOY_ENV_VARS:
        assert f"{name}={url}" in lines[0]
    assert (tmp_path / "cli").is_dir()
