"""The HTTP of source calls (``cognition_app.sources.transport``) against real local servers:
a body handed on as it arrives, content decoding, connections reused or dropped, no cookies,
no redirects, environment proxies, TLS verified, and httpx's errors, without urllib3's object
representations."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from cognition_app.sources.cancel import shut
from cognition_app.sources.transport import body_pieces, post, read_at_most, reset_pools


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict[str, str]]] = []  # (request target, headers)
        self.connections = 0

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        path = self.path.rsplit("/", 1)[-1]
        getattr(self, f"_{path}")()

    def _chunks(self, pieces: list[bytes], pause: float = 0.0, **headers: str) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        for piece in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            time.sleep(pause)
        self.wfile.write(b"0\r\n\r\n")

    def _ok(self) -> None:
        self._chunks([b"x"])

    def _sized(self) -> None:  # a Content-Length body
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"sized")

    def _slow(self) -> None:  # a piece, then the next 0.5 s later
        try:
            self._chunks([b"first", b"second"], pause=0.5)
        except OSError:
            pass

    def _gzip(self) -> None:
        packed = gzip.compress(b"zipped " * 100)
        self._chunks([packed[:10], packed[10:]], Content_Encoding="gzip")

    def _cookie(self) -> None:
        self._chunks([b"x"], Set_Cookie="session=secret; Path=/")

    def _redirect(self) -> None:
        self.send_response(302)
        self.send_header("Location", "http://127.0.0.1:9/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _close_delimited(self) -> None:  # no length, no chunks: the body ends with the connection
        self.close_connection = True
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"first")
        self.wfile.flush()
        time.sleep(0.5)
        self.wfile.write(b"second")

    def _cut(self) -> None:  # promises 100 bytes, sends 5 and hangs up
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.wfile.write(b"short")

    def _bad_chunk(self) -> None:
        self.close_connection = True
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"zz\r\nnot a chunk\r\n")

    def _silent(self) -> None:
        time.sleep(2)

    def _interim(self) -> None:  # a 100 Continue, then the reply
        self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._chunks([b"after"])

    def _huge_head(self) -> None:
        self.send_response(200)
        for n in range(200):
            self.send_header(f"X-Filler-{n}", "f" * 400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _old(self) -> None:  # HTTP/1.0 without keep-alive: the connection ends with the reply
        self.close_connection = True
        self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold")

    def _trailing(self) -> None:  # a whole reply, then bytes that are no reply
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE\r\n")

    def _hang_up(self) -> None:  # a keep-alive reply, then the server drops the connection
        self.close_connection = True
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nonce")

    def _burst(self) -> None:  # three chunks in one write: they arrive together
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"3\r\none\r\n3\r\ntwo\r\n5\r\nthree\r\n0\r\n\r\n")

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _url(server: _Server, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1/{path}"


def _post(url: str, timeout: float = 5, **headers: str) -> Any:
    return post(url, content=b"{}", headers=headers, timeout=timeout)


@pytest.mark.parametrize("path", ["slow", "close_delimited"])
def test_a_body_is_handed_on_as_it_arrives(server: _Server, path: str) -> None:
    """Chunked or ended by the connection's close: the first piece is read before the second
    is sent (0.5 s later), not once the body is complete."""
    with _post(_url(server, path)) as response:
        started = time.monotonic()
        pieces = [(piece, time.monotonic() - started) for piece in body_pieces(response)]
    assert b"".join(p for p, _ in pieces) == b"firstsecond"
    assert pieces[0][0] == b"first" and pieces[0][1] < 0.3


def test_a_gzip_coded_body_is_decoded(server: _Server) -> None:
    with _post(_url(server, "gzip")) as response:
        assert response.read() == b"zipped " * 100


def test_a_read_is_cut_at_its_limit(server: _Server) -> None:
    with _post(_url(server, "gzip")) as response:
        assert read_at_most(response, 10) == b"zipped zip"


def test_a_connection_is_reused_once_its_body_is_read_and_dropped_if_it_is_not(
    server: _Server,
) -> None:
    for path, body in [("ok", b"x"), ("sized", b"sized"), ("ok", b"x"), ("sized", b"sized")]:
        with _post(_url(server, path)) as response:  # chunked, then with a Content-Length
            assert response.read() == body
    assert server.connections == 1
    with _post(_url(server, "slow")) as response:  # closed after its first piece
        next(response.iter_raw())
    with _post(_url(server, "ok")) as response:
        assert response.read() == b"x"
    assert server.connections == 2  # the half-read reply's connection was not used again


def test_no_cookie_is_kept_and_no_redirect_followed(server: _Server) -> None:
    with _post(_url(server, "cookie")) as response:
        assert response.headers["set-cookie"].startswith("session=")
        response.read()
    with _post(_url(server, "redirect")) as response:
        assert response.status_code == 302
    assert [target for target, _ in server.requests] == ["/v1/cookie", "/v1/redirect"]
    assert "cookie" not in server.requests[1][1]


def test_what_is_sent(server: _Server) -> None:
    with _post(_url(server, "ok"), Authorization="Bearer k") as response:
        response.read()
    ((_, headers),) = server.requests
    assert headers["authorization"] == "Bearer k"
    assert headers["content-length"] == "2"
    assert headers["user-agent"] == "Chukwa"
    assert headers["accept-encoding"] == "gzip, deflate"


def test_a_refused_connection_is_a_connect_error_without_object_representations() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(httpx.ConnectError) as raised, _post(f"http://127.0.0.1:{port}/"):
            pass
    message = str(raised.value)
    assert "Connection refused" in message
    assert "object at" not in message and "HTTPConnection(" not in message


def test_a_silent_server_is_a_read_timeout(server: _Server) -> None:
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout) as raised, _post(_url(server, "silent"), timeout=0.3):
        pass
    assert time.monotonic() - started < 1.5
    assert str(raised.value) == "Read timed out. (read timeout=0.3)"  # no pool representation
    assert isinstance(httpx.ReadTimeout("x"), httpx.TimeoutException)


@pytest.mark.parametrize(
    ("path", "error"),
    [("cut", httpx.RemoteProtocolError), ("bad_chunk", httpx.RemoteProtocolError)],
)
def test_a_broken_body_is_a_transport_error(server: _Server, path: str, error: type) -> None:
    with pytest.raises(error) as raised, _post(_url(server, path)) as response:
        for _ in response.iter_raw():
            pass
    assert "object at" not in str(raised.value)


def test_a_shut_socket_wakes_its_reader(server: _Server) -> None:
    with _post(_url(server, "slow")) as response:
        pieces = response.iter_raw()
        assert next(pieces) == b"first"
        threading.Timer(0.1, shut, [response]).start()
        started = time.monotonic()
        with pytest.raises(httpx.TransportError):
            next(pieces)
        assert time.monotonic() - started < 0.4  # not when "second" comes (0.5 s)


def test_an_interim_reply_is_skipped(server: _Server) -> None:
    with _post(_url(server, "interim")) as response:
        assert response.status_code == 200
        assert response.read() == b"after"


def test_a_head_beyond_its_limit_is_refused(server: _Server) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="larger than 65,536 bytes"):
        with _post(_url(server, "huge_head")):
            pass


def test_pieces_that_arrive_together_are_handed_on_as_one(server: _Server) -> None:
    with _post(_url(server, "burst")) as response:
        assert list(body_pieces(response)) == [b"onetwothree"]


@pytest.mark.parametrize("path", ["old", "trailing", "hang_up"])
def test_a_connection_that_cannot_carry_another_reply_is_not_used_again(
    server: _Server, path: str
) -> None:
    """HTTP/1.0 without keep-alive, bytes after the reply, or a connection the server dropped
    while it was idle in the pool: the next request opens a new connection, and succeeds."""
    with _post(_url(server, path)) as response:
        assert response.status_code == 200
        response.read()
    time.sleep(0.1)  # the server's hang-up reaches the idle connection
    with _post(_url(server, "ok")) as response:
        assert response.read() == b"x"
    assert server.connections == 2


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Chukwa-Subject", "keeper\r\nX-Injected: 1"),
        ("Authorization", "Bearer sk-secret\n"),
        ("Bad Name", "v"),
        ("Host", "elsewhere.test"),
        ("X-Note", "caf\u00e9 \u2603"),
    ],
)
def test_a_header_that_would_break_the_request_is_refused_without_its_value(
    server: _Server, name: str, value: str
) -> None:
    headers = {name: value}
    with (
        pytest.raises(httpx.LocalProtocolError) as raised,
        post(_url(server, "ok"), content=b"{}", headers=headers, timeout=5),
    ):
        pass
    assert "secret" not in str(raised.value) and "Injected" not in str(raised.value)
    assert server.requests == []  # nothing was sent


class _Proxy(ThreadingHTTPServer):
    """A forward proxy for plain HTTP: records the absolute URL it was asked for and answers
    itself."""

    daemon_threads = True

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(handler) -> None:
                handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
                self.targets.append(handler.path)
                handler.send_response(200)
                handler.send_header("Content-Length", "7")
                handler.end_headers()
                handler.wfile.write(b"proxied")

            def log_message(handler, *args: Any) -> None:
                return

        super().__init__(("127.0.0.1", 0), Handler)
        self.targets: list[str] = []


def test_the_environments_proxy_is_used_unless_no_proxy_names_the_host(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _Proxy()
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        reset_pools()
        url = f"http://endpoint.test:{server.server_address[1]}/v1/ok"
        with _post(url) as response:
            assert response.read() == b"proxied"
        assert proxy.targets == [url]
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        reset_pools()
        with _post(_url(server, "ok")) as response:
            assert response.read() == b"x"
        assert len(proxy.targets) == 1 and len(server.requests) == 1
    finally:
        reset_pools()
        proxy.shutdown()
        proxy.server_close()


def _self_signed(directory: Any) -> tuple[str, str]:
    """A key and a certificate for 127.0.0.1, written as PEM files: (cert path, key path)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "chukwa test endpoint")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_tls_is_verified_against_the_trusted_roots(
    server: _Server, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint whose certificate no trusted root signed is refused; trusted through
    ``SSL_CERT_FILE`` (as httpx reads it), the same endpoint answers."""
    import ssl

    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    url = f"https://127.0.0.1:{server.server_address[1]}/v1/ok"
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    try:
        reset_pools()
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"), _post(url):
            pass
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        reset_pools()
        with _post(url) as response:
            assert response.read() == b"x"
        # trusted, but not for this name (the certificate is for 127.0.0.1 only)
        elsewhere = url.replace("127.0.0.1", "localhost")
        with pytest.raises(httpx.ConnectError, match="Hostname mismatch"), _post(elsewhere):
            pass
    finally:
        reset_pools()
