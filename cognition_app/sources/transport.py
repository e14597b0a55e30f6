"""The HTTP of source calls (LLM streams, ``http_json`` calls, the conformance check): httpx's
responses and errors, over urllib3's connections and httptools' HTTP/1.1 parser.

Why not httpx's own transport and client: its HTTP/1.1 parser (h11) is pure Python, about 20 µs
per piece of a streamed reply, half of the CPU time Chukwa spent reading an LLM stream; and its
client adds, per request, URL and header merging and a cookie jar that parses every response's
headers through the ``email`` package. Why not urllib3's requests and responses either: on top
of ``http.client`` (which also parses headers through ``email``), they cost 0.22-0.27 ms of CPU
from sending a request to reading its reply's head, where writing the request in one piece and
parsing the head with httptools (llhttp, in C, as uvicorn uses it) costs 0.02-0.05 ms, measured
side by side on the scripted server's reply. urllib3 still does what it is made for: a pool of
keep-alive connections per endpoint, a connection checked for a drop while idle, connecting,
TLS, and proxies' tunnels.

What :func:`post` does, and no more: a POST with a body of bytes, its reply read as it arrives.
No retries (a failed exchange is reported, never sent twice), no redirects, no cookies (nothing
one endpoint sets is sent again, to it or to another world's call), TLS verified as httpx
verifies it (``httpx.create_ssl_context``: certifi's roots, or ``SSL_CERT_FILE`` /
``SSL_CERT_DIR``), HTTP(S) proxies from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, ``NO_PROXY``), as an httpx client reads them. Errors are raised as the httpx
errors httpx's transport raises (``httpx.ConnectError``, ``httpx.ReadTimeout``…), their
messages the underlying reason without urllib3's object representations.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httptools
import httpx
import urllib3
from django.conf import settings
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util import parse_url
from urllib3.util.ssl_match_hostname import CertificateError

# Note: a pool's ``_get_conn`` and ``_put_conn`` are what urllib3's own ``urlopen`` uses to take a
# connection (checked for a drop while it was idle) and give it back. They are private (and
# mypy reads urllib3 1.26's stubs, which do not list them): urllib3 is pinned
# (requirements-runtime.txt), and the transport's tests exercise both.

# Idle connections kept per endpoint, at least: as many as subjects think at once in a worker
# (CHUKWA_MAX_CONCURRENT_SUBJECTS), so that a concurrent turn's calls to one model reuse their
# connections instead of closing those that find the pool full (urllib3 warns of each).
KEEPALIVE_PER_ENDPOINT = 20
# The most one read asks for: a streamed reply's pieces are handed on as they arrive.
READ_SIZE = 64 * 1024
# The most a reply's status line and headers may hold.
MAX_HEAD_BYTES = 64 * 1024
# Of an error reply (an LLM endpoint's status other than 200), what is read.
ERROR_BODY_BYTES = 256 * 1024
DEFAULT_HEADERS = {
    "Accept": "*/*",
    "Accept-Encoding": "gzip, deflate",
    "User-Agent": "Chukwa",
}


@contextmanager
def post(
    url: str, *, content: bytes, headers: Mapping[str, str], timeout: float
) -> Iterator[httpx.Response]:
    """POST ``content`` to ``url`` (an absolute http(s) URL) and yield the reply once its head
    is read; closed on leaving. ``timeout`` bounds connecting, sending and each read
    (``cognition_app.sources.deadline`` bounds the whole exchange)."""
    parsed = _parsed(url)
    route = _route(parsed)
    exchange = _Exchange(route.pool, timeout)
    try:
        with _httpx_errors():
            exchange.send(route.head(parsed, headers, len(content)), content)
            exchange.read_head()
    except BaseException:
        exchange.release()
        raise
    response = httpx.Response(
        status_code=exchange.status,
        headers=exchange.headers,
        stream=_Body(exchange),
        extensions={
            "http_version": exchange.http_version,
            "reason_phrase": exchange.reason,
            "network_stream": _NetworkStream(exchange.sock),
        },
    )
    try:
        yield response
    finally:
        response.close()


# The URLs posted to, parsed (a URL object is copied, not parsed again); a few per process.
_urls: dict[str, httpx.URL] = {}


def _parsed(url: str) -> httpx.URL:
    parsed = _urls.get(url)
    if parsed is None:
        parsed = httpx.URL(url)
        if len(_urls) < 256:
            _urls[url] = parsed
    return parsed


def body_pieces(response: httpx.Response) -> Iterator[bytes]:
    """The body, content-decoded, in the pieces it arrives in (without a content coding, the
    raw pieces: no decoder, no re-chunking)."""
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):
        return response.iter_bytes()
    if isinstance(response.stream, _Body):  # this module's: its pieces, without httpx's layers
        return iter(response.stream)
    return response.iter_raw()


def read_at_most(response: httpx.Response, max_bytes: int) -> bytes:
    """The body, content-decoded, cut at ``max_bytes`` (the rest is not read)."""
    pieces: list[bytes] = []
    size = 0
    for piece in body_pieces(response):
        pieces.append(piece)
        size += len(piece)
        if size >= max_bytes:
            break
    return b"".join(pieces)[:max_bytes]


def error_text(response: httpx.Response) -> str:
    """The start of an error reply's body (``ERROR_BODY_BYTES``), as UTF-8 text."""
    return read_at_most(response, ERROR_BODY_BYTES).decode("utf-8", "replace")


class _NetworkStream:
    """``response.extensions["network_stream"]``, as httpx's transport gives it: the socket
    (``cognition_app.sources.cancel.shut`` shuts it to stop a stream)."""

    def __init__(self, sock: socket.socket | None) -> None:
        self._socket = sock

    def get_extra_info(self, info: str) -> Any:
        return self._socket if info == "socket" else None


class _Exchange:
    """One request and its reply on a connection of ``pool``: the request written in one
    piece, the reply read with httptools (llhttp, in C: the head, the chunked coding). The
    connection goes back to the pool once a reply it may carry another after has been read to
    its end, and is closed otherwise (:meth:`release`, once). The ``on_*`` methods are the
    parser's callbacks."""

    def __init__(self, pool: HTTPConnectionPool, timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout
        self._connection: Any = None  # urllib3's HTTP(S)Connection, taken from the pool
        self._parser = httptools.HttpResponseParser(self)
        self.sock: socket.socket | None = None
        self.status = 0
        self.reason = b""
        self.http_version = b"HTTP/1.1"
        self.headers: list[tuple[bytes, bytes]] = []
        self.pieces: list[bytes] = []  # of the body, parsed and not yet handed on
        self._head_size = 0  # the headers' bytes, as sent
        self.head_read = False
        self.done = False  # the reply read to its end
        self._keep_alive = False
        self._until_close = False  # a body without length or chunks: it ends with the connection
        self._after = False  # something followed the reply: the connection is not used again
        self._released = False

    # -- the parser's callbacks (not raising: an exception in one becomes the parser's error)

    def on_message_begin(self) -> None:
        if self.done:
            self._after = True

    def on_status(self, reason: bytes) -> None:  # the reason phrase, possibly in parts
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        self._head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # an interim reply: the real one follows
            self.reason, self.headers, self._head_size = b"", [], 0
            return
        self.status = status
        self.http_version = b"HTTP/" + self._parser.get_http_version().encode("ascii")
        self.head_read = True
        names = {name.lower(): value for name, value in self.headers}
        coding = names.get(b"transfer-encoding", b"").rsplit(b",", 1)[-1].strip().lower()
        self._until_close = b"content-length" not in names and coding != b"chunked"

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        if self.head_read and not self.done:
            self.done = True
            self._keep_alive = self._parser.should_keep_alive()

    # -- the exchange

    def send(self, head: bytes, content: bytes) -> None:
        pool: Any = self._pool  # ``_get_conn``: see the note at the top
        connection = self._connection = pool._get_conn()
        connection.timeout = self._timeout
        if connection.sock is None:  # new, or dropped while idle (the pool checks)
            try:
                # urllib3's: TLS verified, through a proxy's tunnel; its own errors (refused,
                # unresolvable, timed out) are mapped by _httpx_errors
                connection.connect()
            except TimeoutError as exc:  # the TLS handshake, the proxy's tunnel
                raise httpx.ConnectTimeout(_reason(exc)) from exc
            except (OSError, CertificateError) as exc:  # a certificate refused, a tunnel refused
                raise httpx.ConnectError(_reason(exc)) from exc
        sock = self.sock = connection.sock
        sock.settimeout(self._timeout)
        try:
            if len(content) < 65536:  # one write, one packet for a small request
                sock.sendall(head + content)
            else:
                sock.sendall(head)
                sock.sendall(content)
        except TimeoutError:
            raise httpx.WriteTimeout(f"Write timed out. (write timeout={self._timeout})") from None
        except OSError as exc:
            raise httpx.WriteError(_reason(exc)) from exc

    def read_head(self) -> None:
        received = 0
        while not self.head_read:
            data = self._recv()
            if not data:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            received += len(data)
            self._feed(data)
            # what the head holds once read, or what came without ending it
            size = self._head_size if self.head_read else received
            if size > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError(
                    f"the response head is larger than {MAX_HEAD_BYTES:,} bytes"
                )

    def read_more(self) -> bool:
        """Read and parse what arrives next; False once the reply has ended (``done``)."""
        if self.done:
            return False
        data = self._recv()
        if data:
            self._feed(data)
            return True
        if self._until_close:
            self.done = True  # the connection is closed: it cannot carry another reply
            return False
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )

    def _recv(self) -> bytes:
        assert self.sock is not None
        try:
            return self.sock.recv(READ_SIZE)
        except TimeoutError:
            raise httpx.ReadTimeout(f"Read timed out. (read timeout={self._timeout})") from None

    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if not self.done:
                raise httpx.RemoteProtocolError(f"malformed HTTP response: {exc}") from None
            self._after = True  # bytes after the reply that are not a reply

    def release(self) -> None:
        """Give the connection back: to be used again if its reply was read to its end and it
        may carry another, else closed."""
        if self._released:
            return
        self._released = True
        connection = self._connection
        if connection is None:
            return
        if not (self.done and self._keep_alive and not self._after):
            connection.close()
        pool: Any = self._pool  # ``_put_conn``: see the note at the top
        pool._put_conn(connection)


class _Body(httpx.SyncByteStream):
    """The body as it arrives: what each read of the socket brought, joined (a reply's many
    small chunks that arrived together are one piece), not decoded (httpx decodes it, as for
    its own transport). Closing it gives its connection back (:meth:`_Exchange.release`)."""

    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange

    def __iter__(self) -> Iterator[bytes]:
        exchange = self._exchange
        with _httpx_errors():
            while True:
                pieces = exchange.pieces
                if pieces:
                    exchange.pieces = []
                    yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
                elif not exchange.read_more():
                    return

    def close(self) -> None:
        self._exchange.release()


# --- connection pools -----------------------------------------------------------------------


class _Route:
    """How a request reaches an endpoint: the pool whose connections lead there (to the
    endpoint itself, to a proxy that takes the absolute URL of a plain-HTTP request, or
    through a proxy's tunnel for HTTPS), found once per endpoint, and the request head."""

    def __init__(
        self, pool: HTTPConnectionPool, *, absolute: bool, proxy_headers: Mapping[str, str]
    ) -> None:
        self.pool = pool
        self._absolute = absolute
        self._proxy_headers = dict(proxy_headers)

    def head(self, url: httpx.URL, headers: Mapping[str, str], length: int) -> bytes:
        """The request line and headers of a POST of ``length`` bytes to ``url``: Host and
        Content-Length, :data:`DEFAULT_HEADERS` unless ``headers`` names them (in any case),
        ``headers``, and a proxy's own. A header that would break the head (a name that is
        not a token, a value with a line break or a NUL, one outside Latin-1) is refused,
        naming the header, never its value (a key may be in it)."""
        target = str(url) if self._absolute else url.raw_path.decode("ascii")
        merged = {name.lower(): (name, value) for name, value in DEFAULT_HEADERS.items()}
        for name, value in (*headers.items(), *self._proxy_headers.items()):
            merged[name.lower()] = (name, value)
        lines = [f"POST {target} HTTP/1.1", f"Host: {url.netloc.decode('ascii')}"]
        for lower, (name, value) in merged.items():
            if lower in _SET_HERE or not _TOKEN.fullmatch(name) or _BREAK.search(value):
                raise httpx.LocalProtocolError(f"the request header {name!r} cannot be sent")
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {length}\r\n\r\n")
        try:
            return "\r\n".join(lines).encode("latin-1")
        except UnicodeEncodeError:
            raise httpx.LocalProtocolError(
                "a request header holds a character outside Latin-1"
            ) from None


# Headers the transport writes itself, and what makes a header name or value unsendable.
_SET_HERE = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BREAK = re.compile(r"[\r\n\x00]")


_lock = threading.Lock()
_routes: dict[tuple[str, str, int | None], _Route] = {}
_managers: dict[str, urllib3.PoolManager] = {}
_proxies: dict[str, str] | None = None


def _route(url: httpx.URL) -> _Route:
    """What sends a request to ``url``: the endpoint's pool, or the environment's proxy."""
    key = (url.scheme, url.host, url.port)
    route = _routes.get(key)
    if route is None:
        with _lock:
            route = _routes.get(key)
            if route is None:
                route = _new_route(*key)
                _routes[key] = route
    return route


def _new_route(scheme: str, host: str, port: int | None) -> _Route:
    """Direct, or through the proxy the environment names for ``scheme`` unless ``NO_PROXY``
    names ``host`` (read once per process, as an httpx client reads them once)."""
    global _proxies
    if _proxies is None:
        _proxies = urllib.request.getproxies_environment()
    proxy = _proxies.get(scheme) or _proxies.get("all")
    if urllib.request.proxy_bypass_environment(host, _proxies):  # type: ignore[attr-defined]
        proxy = None
    if proxy is None:
        manager = _managers.get("")
        if manager is None:
            manager = _managers[""] = urllib3.PoolManager(**_manager_options())
        pool = manager.connection_from_host(host, port, scheme)
        return _Route(pool, absolute=False, proxy_headers={})
    parsed = parse_url(proxy)
    if parsed.scheme not in ("http", "https"):
        raise httpx.ProxyError(
            f"the environment's proxy for {scheme} URLs is not an http(s) proxy; only those are "
            "supported"
        )
    proxy_manager = _managers.get(proxy)
    if not isinstance(proxy_manager, urllib3.ProxyManager):
        options = _manager_options()
        if parsed.auth:  # as httpx does: the proxy URL's credentials, as Proxy-Authorization
            options["proxy_headers"] = urllib3.make_headers(proxy_basic_auth=parsed.auth)
        proxy_manager = urllib3.ProxyManager(proxy, **options)
        _managers[proxy] = proxy_manager
    # As urllib3's ProxyManager sends: plain HTTP to the proxy with the absolute URL and the
    # proxy's headers; HTTPS through a tunnel (CONNECT, with those headers) to the endpoint.
    pool = proxy_manager.connection_from_host(host, port, scheme)
    if scheme == "https":
        return _Route(pool, absolute=False, proxy_headers={})
    return _Route(pool, absolute=True, proxy_headers=proxy_manager.proxy_headers)


def _manager_options() -> dict[str, Any]:
    return {
        "num_pools": 64,
        "maxsize": max(KEEPALIVE_PER_ENDPOINT, settings.CHUKWA_MAX_CONCURRENT_SUBJECTS),
        "block": False,
        "retries": False,
        "ssl_context": httpx.create_ssl_context(),
    }


def _forget_in_child() -> None:
    """A forked worker opens its own connections (the parent's stay the parent's)."""
    global _lock, _routes, _managers, _proxies
    _lock, _routes, _managers, _proxies = threading.Lock(), {}, {}, None


os.register_at_fork(after_in_child=_forget_in_child)


def reset_pools() -> None:
    """Forget every pool and the environment's proxies (tests that change them)."""
    global _proxies
    with _lock:
        for manager in _managers.values():
            manager.clear()
        _managers.clear()
        _routes.clear()
        _proxies = None


# --- errors ---------------------------------------------------------------------------------


@contextmanager
def _httpx_errors() -> Iterator[None]:
    """What urllib3 raises taking or opening a connection, and the socket's own errors, as the
    httpx errors httpx's transport raises (the exchange raises httpx's errors itself)."""
    try:
        yield
    except NewConnectionError as exc:  # a NewConnectionError is a ConnectTimeoutError
        raise httpx.ConnectError(_reason(exc)) from exc
    except ConnectTimeoutError as exc:
        raise httpx.ConnectTimeout(_reason(exc)) from exc
    except urllib3.exceptions.HTTPError as exc:  # a pool closed by reset_pools
        raise httpx.TransportError(_reason(exc)) from exc
    except OSError as exc:  # reset, aborted
        raise httpx.ReadError(_reason(exc)) from exc


def _reason(exc: BaseException) -> str:
    """The message of an error, without urllib3's representations of its pool or connection."""
    message = getattr(exc, "_message", None)  # a pool's and a new connection's errors keep it
    if isinstance(message, str):
        return message
    if isinstance(exc, OSError | ValueError):
        return str(exc) or type(exc).__name__
    texts = [arg for arg in exc.args if isinstance(arg, str)]  # the connection first, the text last
    return texts[-1] if texts else str(exc) or type(exc).__name__
