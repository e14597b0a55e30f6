"""The process's one pooled HTTP client for source calls (connections are reused between calls)."""

from __future__ import annotations

import threading

import httpx

_client_lock = threading.Lock()
_client: httpx.Client | None = None


def http_client() -> httpx.Client:
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(follow_redirects=False)
        return _client
