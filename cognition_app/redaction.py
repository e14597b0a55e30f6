"""The secrets boundary, outbound: every key value kept out of what is stored or shown (scrubbing
text and JSON, redacting headers). Used by the sources and by the recording of their calls."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from chukwa_core.ids import is_key_env_name

REDACTED_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)


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
