"""The secrets boundary, inbound: URLs and keys read only from the ``CHUKWA_*`` variables a
source names (what keeps key values out of what is stored or shown is
``cognition_app.redaction``)."""

from __future__ import annotations

import os

import httpx

from chukwa_core.ids import bound_key_env_name, is_key_env_name, is_url_env_name
from cognition_app.failures import SourceFailure


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
