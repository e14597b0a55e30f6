"""The HTTP of source calls (LLM streams, ``http_json`` calls, the conformance check): httpx's
responses and errors, over urllib3's connection pools and the standard library's HTTP parser.

Why not httpx's own transport and client: its HTTP/1.1 parser (h11) is pure Python, about 20 µs
per piece of a streamed reply, half of the CPU time Chukwa spent reading an LLM stream; and its
client adds, per request, URL and header merging and a cookie jar that parses every response's
headers through the ``email`` package. ``http.client`` reads a chunk's size line and its data in
C. On the scripted server's 50-event reply, the bare exchange took 2.46 ms through an httpx
client and 1.30 ms through this module, in one run of ``bench/llm_overhead_bench.py`` (it prints
both).

What :func:`post` does, and no more: a POST with a body of bytes, its reply read as it arrives.
No retries (a failed exchange is reported, never sent twice), no redirects, no cookies (nothing
one endpoint sets is sent again, to it or to another world's call), TLS verified as httpx
verifies it (``httpx.create_ssl_context``: certifi's roots, or ``SSL_CERT_FILE`` /
``SSL_CERT_DIR``), HTTP(S) proxies from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, ``NO_PROXY``), as an httpx client reads them. urllib3's errors are raised as the
httpx errors httpx's transport raises (``httpx.ConnectError``, ``httpx.ReadTimeout``…), their
messages the underlying reason without urllib3's object representations.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import urllib3
from django.conf import settings
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    DecodeError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util import parse_url

# Note 1: mypy reads urllib3 1.26's stubs (types-urllib3, which selenium requires) instead of
# urllib3 2's own annotations, which have the response's ``_fp``.

# Idle connections kept per endpoint, at least: as many as subjects think at once in a worker
# (CHUKWA_MAX_CONCURRENT_SUBJECTS), so that a concurrent turn's calls to one model reuse their
# connections instead of closing those that find the pool full (urllib3 warns of each).
KEEPALIVE_PER_ENDPOINT = 20
# The most one read asks for: a streamed reply's pieces are handed on as they arrive.
READ_SIZE = 64 * 1024
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
    is read; closed on leaving. ``timeout`` bounds connecting and each read
    (``cognition_app.sources.deadline`` bounds the whole exchange)."""
    parsed = _parsed(url)
    with _httpx_errors():
        raw = _route(parsed).urlopen(
            "POST",
            parsed,
            body=content,
            headers={**DEFAULT_HEADERS, **headers},  # the pool adds Host and Content-Length
            retries=_NO_RETRIES,
            redirect=False,
            assert_same_host=False,
            timeout=_timeout(timeout),
            preload_content=False,
            decode_content=False,
            release_conn=False,
        )
    connection = raw.connection
    response = httpx.Response(
        status_code=raw.status,
        headers=list(raw.headers.iteritems()),
        stream=_Body(raw),
        extensions={
            "http_version": b"HTTP/1.1",
            "reason_phrase": (raw.reason or "").encode("latin-1", "replace"),
            "network_stream": _NetworkStream(connection.sock if connection else None),
        },
    )
    try:
        yield response
    finally:
        response.close()


_NO_RETRIES = urllib3.Retry(total=False, redirect=False)
_timeouts: dict[float, urllib3.Timeout] = {}


def _timeout(seconds: float) -> urllib3.Timeout:
    """Connecting and each read bounded by ``seconds`` (one object per value: a few)."""
    timeout = _timeouts.get(seconds)
    if timeout is None:
        timeout = urllib3.Timeout(connect=seconds, read=seconds)
        if len(_timeouts) < 256:
            _timeouts[seconds] = timeout
    return timeout


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


class _Body(httpx.SyncByteStream):
    """The body as it arrives (``read1``: whatever is there, up to ``READ_SIZE``), not decoded
    (httpx decodes it, as for its own transport). A body read to its end gives its connection
    back to the pool; one closed before is closed with its connection."""

    def __init__(self, raw: urllib3.HTTPResponse) -> None:
        self._raw = raw

    def __iter__(self) -> Iterator[bytes]:
        # ``http.client``'s own ``read1`` on the response urllib3 wraps (``_fp``): urllib3's
        # adds bookkeeping and error wrapping per read, 8-10 µs against 4 µs a piece of a
        # buffered 52-piece stream. What urllib3 would check is checked here: a body cut short
        # of its Content-Length is an error, and a body read to its end closes the response
        # (not its connection), which is what urllib3 looks at before reusing the connection.
        fp: http.client.HTTPResponse = self._raw._fp  # type: ignore[attr-defined]  # note 1
        read1 = fp.read1
        with _httpx_errors():
            while True:
                data = read1(READ_SIZE)
                if data:
                    yield data
                    continue
                if fp.length:  # the peer closed the connection early
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body "
                        f"({fp.length} bytes missing)"
                    )
                fp.close()  # a Content-Length body read to its end (chunked ones close here)
                return

    def close(self) -> None:
        raw = self._raw
        if not raw.closed:  # not read to its end: its connection cannot be used again
            try:
                raw.close()
            except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException):
                pass  # closing a broken connection: the error that broke it is the caller's
        raw.release_conn()


# --- connection pools -----------------------------------------------------------------------


class _Direct:
    """An endpoint's own pool (reached without a proxy): the request target is the URL's path
    and query, and the pool is found once, not per request."""

    def __init__(self, pool: HTTPConnectionPool) -> None:
        self._pool = pool

    def urlopen(self, method: str, url: httpx.URL, **options: Any) -> urllib3.HTTPResponse:
        return self._pool.urlopen(method, url.raw_path.decode("ascii"), **options)


class _Proxied:
    """Through the environment's proxy, which takes the whole URL (the absolute form for plain
    HTTP, a tunnel for HTTPS)."""

    def __init__(self, manager: urllib3.ProxyManager) -> None:
        self._manager = manager

    def urlopen(self, method: str, url: httpx.URL, **options: Any) -> urllib3.HTTPResponse:
        return self._manager.urlopen(method, str(url), **options)


_lock = threading.Lock()
_routes: dict[tuple[str, str, int | None], _Direct | _Proxied] = {}
_managers: dict[str, urllib3.PoolManager] = {}
_proxies: dict[str, str] | None = None


def _route(url: httpx.URL) -> _Direct | _Proxied:
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


def _new_route(scheme: str, host: str, port: int | None) -> _Direct | _Proxied:
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
        return _Direct(manager.connection_from_host(host, port, scheme))
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
    return _Proxied(proxy_manager)


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
    """urllib3's and http.client's errors as the httpx errors httpx's transport raises."""
    try:
        yield
    except ProxyError as exc:
        raise httpx.ProxyError(_reason(exc)) from exc
    except (NewConnectionError, SSLError) as exc:  # NewConnectionError is a ConnectTimeoutError
        raise httpx.ConnectError(_reason(exc)) from exc
    except ConnectTimeoutError as exc:
        raise httpx.ConnectTimeout(_reason(exc)) from exc
    except ReadTimeoutError as exc:
        raise httpx.ReadTimeout(_reason(exc)) from exc
    except DecodeError as exc:
        raise httpx.DecodingError(_reason(exc)) from exc
    except (ProtocolError, http.client.HTTPException) as exc:
        cause = exc.args[-1] if isinstance(exc, ProtocolError) and exc.args else exc
        if isinstance(cause, OSError):  # reset, aborted, shut
            raise httpx.ReadError(_reason(cause)) from exc
        raise httpx.RemoteProtocolError(_reason(cause)) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise httpx.TransportError(_reason(exc)) from exc
    except OSError as exc:
        raise httpx.ReadError(_reason(exc)) from exc


def _reason(exc: BaseException) -> str:
    """The message of an error, without urllib3's representations of its pool or connection."""
    message = getattr(exc, "_message", None)  # a pool's and a new connection's errors keep it
    if isinstance(message, str):
        return message
    if isinstance(exc, OSError | http.client.HTTPException):
        return str(exc) or type(exc).__name__
    texts = [arg for arg in exc.args if isinstance(arg, str)]  # the connection first, the text last
    return texts[-1] if texts else str(exc) or type(exc).__name__
