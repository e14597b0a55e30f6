"""The toy sources of the park scenario: one small HTTP JSON service, standard library
only (no Django), hosting every toy on its own path. Chukwa reaches them exactly like real
services, through ``http_json`` response sources whose ``url_env`` names one of the
``CHUKWA_TOY_*_URL`` variables (all set to this service's base URL) and whose ``path`` picks the
endpoint.

Every endpoint takes ``POST`` with a JSON object body and answers JSON. Behaviour is fully
deterministic:

``/weather`` (ambient, once per turn)
    ``{"turn", "simulation_time"}`` → ``{"turn", "temperature_c", "condition"}``; the temperature
    falls 3 °C per turn: turn 1 → 24, turn 2 → 21, turn 3 → 18, … The turn comes from the body,
    else from the ``X-Chukwa-Turn`` header.
``/pa`` (ambient public announcements)
    odd turns → ``{"announcements": []}``; even turns → one announcement (:data:`PA_ANNOUNCEMENT`).
``/phone`` (ambient phone inbox)
    ``{"messages": []}`` on every turn except turn 2 (:data:`PHONE_SPAM_TURN`), which delivers one
    spam message (:data:`PHONE_SPAM_MESSAGE`).
``/buy_candy`` (model-elected tool; body = the tool arguments, any object)
    a vending machine with real stock, kept per world (``X-Chukwa-World``; missing → 400). Each
    world starts with :data:`INITIAL_CANDY_STOCK` (1) candy bar: the first buyer gets
    ``{"result": "dispensed", "item": "candy_bar", "remaining": 0}``, every later one
    ``{"result": "empty", "remaining": 0}``. Stock lives in ``<state_dir>/vending_stock.json``
    (written atomically), so it survives a restart of the service.
``/use_drinking_fountain`` (tool) → ``{"result": "drank", "water": "cold"}``, always.
``/send_text`` (tool) ``{"to", "text"}`` → ``{"status": "sent", "to", "chars"}``.
``/fail/500``, ``/fail/not_json``, ``/fail/schema``
    test hooks for Chukwa's failure paths: a 500 with a JSON error body; a 200 whose body is
    ``text/plain`` ``this is not json``; a 200 with ``{"unexpected": true}``, valid JSON that every
    park result schema rejects.

Bodies that are not a JSON object → 400 ``{"error": …}``; unknown paths → 404; a ``GET`` on a
``POST`` endpoint → 405; ``GET /health`` → ``{"ok": true}``. The JSON Schemas of the tool
arguments and results live in ``scenarios_app/scenario_fixtures/schemas/park_schemas.json``.

Run it: ``python -m devservices.toys --host 127.0.0.1 --port 8092 --state-dir var/toys``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOY_ENV_VARS: tuple[str, ...] = (
    "CHUKWA_TOY_WEATHER_URL",
    "CHUKWA_TOY_PA_URL",
    "CHUKWA_TOY_PHONE_URL",
    "CHUKWA_TOY_VENDING_URL",
    "CHUKWA_TOY_FOUNTAIN_URL",
    "CHUKWA_TOY_SEND_TEXT_URL",
)

WORLD_HEADER = "X-Chukwa-World"
TURN_HEADER = "X-Chukwa-Turn"
SUBJECT_HEADER = "X-Chukwa-Subject"

MAX_BODY_BYTES = 1_000_000
SHUTDOWN_POLL_SECONDS = 0.05  # how quickly shutdown() returns
STOCK_FILE = "vending_stock.json"
INITIAL_CANDY_STOCK = 1

WEATHER_FIRST_TURN_C = 24
WEATHER_DROP_PER_TURN_C = 3
WEATHER_CONDITIONS: tuple[str, ...] = ("sunny", "partly cloudy", "overcast", "cold and windy")

PA_ANNOUNCEMENT = "Attention park visitors: the east vending area is closed for maintenance."

PHONE_SPAM_TURN = 2
PHONE_SPAM_MESSAGE: dict[str, str] = {
    "from": "+1-555-0100",
    "kind": "spam",
    "text": "You have WON a free cruise! Reply YES to claim.",
}

NOT_JSON_BODY = "this is not json"

# One lock per state directory, shared by every server of this process that uses it, so a
# read-modify-write of the stock file is never interleaved.
_STATE_LOCKS: dict[Path, threading.Lock] = {}
_STATE_LOCKS_GUARD = threading.Lock()


class ToyError(Exception):
    """A request the toy refuses: answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ToyRequest:
    """What an endpoint sees: the parsed JSON object body and the Chukwa context headers."""

    body: dict[str, Any]
    world: str | None
    turn_header: str | None
    subject: str | None


@dataclass(frozen=True)
class ToyResponse:
    status: HTTPStatus
    body: bytes
    content_type: str


def json_response(payload: object, status: HTTPStatus = HTTPStatus.OK) -> ToyResponse:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return ToyResponse(status, body, "application/json")


# --- pure behaviour --------------------------------------------------------------------------


def weather_for_turn(turn: int) -> dict[str, Any]:
    """Deterministic weather: 24 °C on turn 1, 3 °C colder every following turn."""
    index = min(max(turn - 1, 0), len(WEATHER_CONDITIONS) - 1)
    return {
        "turn": turn,
        "temperature_c": WEATHER_FIRST_TURN_C - WEATHER_DROP_PER_TURN_C * (turn - 1),
        "condition": WEATHER_CONDITIONS[index],
    }


def announcements_for_turn(turn: int) -> list[str]:
    """Odd turns are silent; even turns carry one announcement."""
    return [PA_ANNOUNCEMENT] if turn % 2 == 0 else []


def phone_messages_for_turn(turn: int) -> list[dict[str, str]]:
    """The inbox is empty except on :data:`PHONE_SPAM_TURN`."""
    return [dict(PHONE_SPAM_MESSAGE)] if turn == PHONE_SPAM_TURN else []


def toy_env(base_url: str) -> dict[str, str]:
    """The six ``CHUKWA_TOY_*_URL`` variables, all pointing at one toy service."""
    base = base_url.rstrip("/")
    return dict.fromkeys(TOY_ENV_VARS, base)


# --- stock persistence -----------------------------------------------------------------------


def _state_lock(state_dir: Path) -> threading.Lock:
    key = state_dir.resolve()
    with _STATE_LOCKS_GUARD:
        return _STATE_LOCKS.setdefault(key, threading.Lock())


def _read_stock(path: Path) -> dict[str, int]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    worlds = data.get("worlds", {}) if isinstance(data, dict) else {}
    return {str(k): int(v) for k, v in worlds.items()}


def _write_stock(path: Path, worlds: dict[str, int]) -> None:
    """Atomic: write a temporary file in the same directory, fsync it, then ``os.replace``."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"worlds": worlds}, handle, sort_keys=True, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def take_candy(state_dir: Path, world: str) -> dict[str, Any]:
    """Dispense one candy bar from ``world``'s machine if any is left; persist the new stock."""
    path = state_dir / STOCK_FILE
    with _state_lock(state_dir):
        worlds = _read_stock(path)
        remaining = worlds.get(world, INITIAL_CANDY_STOCK)
        if remaining <= 0:
            return {"result": "empty", "remaining": 0}
        worlds[world] = remaining - 1
        _write_stock(path, worlds)
        return {"result": "dispensed", "item": "candy_bar", "remaining": remaining - 1}


# --- endpoints -------------------------------------------------------------------------------


def _turn_of(request: ToyRequest) -> int:
    """The body's ``turn``, else the ``X-Chukwa-Turn`` header; a positive integer either way."""
    if "turn" in request.body:
        turn: object = request.body["turn"]
        source = "body field 'turn'"
    elif request.turn_header is not None and request.turn_header.strip():
        source = f"header {TURN_HEADER}"
        try:
            turn = int(request.turn_header.strip())
        except ValueError:
            raise ToyError(
                HTTPStatus.BAD_REQUEST, f"{source} must be an integer, got {request.turn_header!r}"
            ) from None
    else:
        raise ToyError(
            HTTPStatus.BAD_REQUEST, f"missing turn: send body field 'turn' or header {TURN_HEADER}"
        )
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ToyError(HTTPStatus.BAD_REQUEST, f"{source} must be an integer >= 1, got {turn!r}")
    return turn


def handle_weather(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return json_response(weather_for_turn(_turn_of(request)))


def handle_pa(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return json_response({"announcements": announcements_for_turn(_turn_of(request))})


def handle_phone(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return json_response({"messages": phone_messages_for_turn(_turn_of(request))})


def handle_buy_candy(request: ToyRequest, state_dir: Path) -> ToyResponse:
    world = (request.world or "").strip()
    if not world:
        raise ToyError(
            HTTPStatus.BAD_REQUEST, f"missing header {WORLD_HEADER}: stock is kept per world"
        )
    return json_response(take_candy(state_dir, world))


def handle_fountain(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return json_response({"result": "drank", "water": "cold"})


def handle_send_text(request: ToyRequest, state_dir: Path) -> ToyResponse:
    to = request.body.get("to")
    text = request.body.get("text")
    if isinstance(to, str) and to.strip() and isinstance(text, str):
        return json_response({"status": "sent", "to": to, "chars": len(text)})
    problems = []
    if not isinstance(to, str) or not to.strip():
        problems.append("'to' must be a non-empty string")
    if not isinstance(text, str):
        problems.append("'text' must be a string")
    raise ToyError(HTTPStatus.BAD_REQUEST, "; ".join(problems))


def handle_fail_500(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return json_response(
        {"error": "toy failure: deliberate HTTP 500"}, HTTPStatus.INTERNAL_SERVER_ERROR
    )


def handle_fail_not_json(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return ToyResponse(HTTPStatus.OK, NOT_JSON_BODY.encode("utf-8"), "text/plain; charset=utf-8")


def handle_fail_schema(request: ToyRequest, state_dir: Path) -> ToyResponse:
    return json_response({"unexpected": True})


Handler = Callable[[ToyRequest, Path], ToyResponse]

POST_ROUTES: dict[str, Handler] = {
    "/weather": handle_weather,
    "/pa": handle_pa,
    "/phone": handle_phone,
    "/buy_candy": handle_buy_candy,
    "/use_drinking_fountain": handle_fountain,
    "/send_text": handle_send_text,
    "/fail/500": handle_fail_500,
    "/fail/not_json": handle_fail_not_json,
    "/fail/schema": handle_fail_schema,
}


# --- HTTP plumbing ---------------------------------------------------------------------------


class ToyServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its state directory."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], state_dir: Path, *, verbose: bool = False) -> None:
        self.state_dir = state_dir
        self.verbose = verbose
        super().__init__(address, ToyRequestHandler)


class ToyRequestHandler(BaseHTTPRequestHandler):
    server: ToyServer
    protocol_version = "HTTP/1.1"
    server_version = "ChukwaToys/1"

    def _path(self) -> str:
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        return path.rstrip("/") or "/"

    def _send(self, response: ToyResponse, extra_headers: dict[str, str] | None = None) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    def _send_error_json(self, status: HTTPStatus, message: str) -> None:
        self._send(json_response({"error": message}, status))

    def _read_raw(self) -> bytes:
        """Read the whole body (always, so a keep-alive connection stays in sync)."""
        raw_length = self.headers.get("Content-Length")
        try:
            length = int(raw_length) if raw_length is not None else 0
        except ValueError:
            raise ToyError(HTTPStatus.BAD_REQUEST, "invalid Content-Length") from None
        if length < 0:
            raise ToyError(HTTPStatus.BAD_REQUEST, "invalid Content-Length")
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would poison the connection
            raise ToyError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {MAX_BODY_BYTES} bytes"
            )
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _parse_body(raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ToyError(HTTPStatus.BAD_REQUEST, f"body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ToyError(
                HTTPStatus.BAD_REQUEST,
                f"body must be a JSON object, got {type(body).__name__}",
            )
        return body

    def do_POST(self) -> None:
        path = self._path()
        handler = POST_ROUTES.get(path)
        try:
            raw = self._read_raw()
            if handler is None:
                raise ToyError(HTTPStatus.NOT_FOUND, f"no toy at {path}")
            request = ToyRequest(
                body=self._parse_body(raw),
                world=self.headers.get(WORLD_HEADER),
                turn_header=self.headers.get(TURN_HEADER),
                subject=self.headers.get(SUBJECT_HEADER),
            )
            response = handler(request, self.server.state_dir)
        except ToyError as exc:
            self._send_error_json(exc.status, exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - a toy bug still answers JSON, never a dropped socket
            self._send_error_json(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"toy crashed: {type(exc).__name__}: {exc}"
            )
            return
        self._send(response)

    def do_GET(self) -> None:
        path = self._path()
        if path == "/health":
            self._send(json_response({"ok": True}))
        elif path in POST_ROUTES:
            self._send(
                json_response(
                    {"error": f"{path} takes POST with a JSON object body"},
                    HTTPStatus.METHOD_NOT_ALLOWED,
                ),
                {"Allow": "POST"},
            )
        else:
            self._send_error_json(HTTPStatus.NOT_FOUND, f"no toy at {path}")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


def serve(host: str, port: int, state_dir: Path, *, verbose: bool = False) -> ThreadingHTTPServer:
    """Start the toy service in a daemon thread and return the server (``port=0`` picks a free
    port: read it from ``server.server_address``). Stop it with ``shutdown()`` then
    ``server_close()``."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    server = ToyServer((host, port), state_dir, verbose=verbose)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        name=f"chukwa-toys-{server.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return server


def _wait_forever() -> None:
    threading.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.toys",
        description="Serve the park scenario's toy HTTP JSON sources.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8092, help="0 picks a free port")
    parser.add_argument(
        "--state-dir", type=Path, default=Path("var/toys"), help="where vending stock is kept"
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.state_dir, verbose=args.verbose)
    base_url = f"http://{args.host}:{server.server_address[1]}"
    exports = " ".join(f"{name}={value}" for name, value in toy_env(base_url).items())
    print(f"Chukwa toys listening on {base_url} — set: {exports}", flush=True)
    try:
        _wait_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
