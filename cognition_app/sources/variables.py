"""The secrets boundary: URLs and keys read only from the ``CHUKWA_*`` variables a source names,
and every key value kept out of what is stored or shown (scrubbing, header redaction)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx

from chukwa_core.ids import bound_key_env_name, is_key_env_name, is_url_env_name
from cognition_app.sources.failure import SourceFailure

REDACTED_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)


def _env_value(name: str, field_name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise SourceFailure(
            "config", f"environment variable {name} (named by the source's {field_name}) is not set"
        )
    return value


# Variable values found to be good base URLs, and the URL each gives.
_checked_urls: dict[str, str] = {}


def url_from_env(name: str, field_name: str) -> str:
    """The base URL a source's URL variable holds, checked to be an absolute http(s) URL with
    no credentials, query or fragment. Failures name the variable, never its value (a
    misconfigured variable may hold a secret)."""
    # Validated at put; re-checked because these names guard secrets.
    if not is_url_env_name(name):
        raise SourceFailure("config", f"{field_name} {name!r} is not an allowed URL variable name")
    raw = _env_value(name, field_name)
    checked = _checked_urls.get(raw)  # a value found good once is good (read on every call)
    if checked is not None:
        return checked
    value = raw.strip()
    problem = "is not an absolute http(s) URL"
    try:
        url = httpx.URL(value)
        if any(ch.isspace() or ord(ch) < 32 for ch in value):
            problem = "contains whitespace or control characters"
        elif url.scheme in ("http", "https") and url.host:
            if url.userinfo:
                problem = "carries credentials (put keys in the bound *_API_KEY variable)"
            elif url.query or url.fragment:
                problem = "carries a query or fragment"
            else:
                if len(_checked_urls) < 256:
                    _checked_urls[raw] = value.rstrip("/")
                return value.rstrip("/")
    except (httpx.InvalidURL, ValueError, TypeError):
        pass
    raise SourceFailure(
        "config", f"environment variable {name} (named by the source's {field_name}) {problem}"
    )


def key_from_env(name: str, field_name: str, url_env: str) -> str:
    """The key a source's key variable holds; only the key bound to its URL variable."""
    if not is_key_env_name(name) or bound_key_env_name(url_env) != name:
        raise SourceFailure(
            "config", f"{field_name} {name!r} is not the key variable bound to {url_env}"
        )
    return _env_value(name, field_name)


def secret_values() -> list[str]:
    """The values of every key variable set in this process (``CHUKWA_*_API_KEY``), longest
    first, for :func:`scrub`."""
    environ = os.environ  # each read decodes: the names first, the values of key names only
    names = [n for n in environ if n.endswith("_API_KEY") and is_key_env_name(n)]
    values = {value for value in map(environ.get, names) if value and len(value) >= 4}
    return sorted(values, key=len, reverse=True)


def scrub(text: str, secrets: list[str] | None = None) -> str:
    """Text with every key value replaced by ``[redacted]``: a hostile or careless endpoint
    may echo the Authorization header back into a body, an error or a reply. ``secrets``:
    :func:`secret_values` read once by a caller that scrubs many pieces (a stream's chunks)."""
    for secret in secret_values() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return text


def scrub_json(value: Any) -> Any:
    """:func:`scrub` for every string (keys too) of a JSON value."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k): scrub_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_json(v) for v in value]
    return value


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        k.lower(): ("[redacted]" if k.lower() in REDACTED_HEADERS else v)
        for k, v in headers.items()
    }
