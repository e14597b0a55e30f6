"""Identifier grammars. Pure: no Django."""

from __future__ import annotations

import enum
import re
from typing import Annotated

ENTITY_ID_PATTERN = r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$"
LABEL_PATTERN = r"^[a-z0-9]$|^[a-z0-9][a-z0-9_-]{0,62}[a-z0-9]$"
HASH_PATTERN = r"^[0-9a-f]{64}$"
ENV_VAR_PATTERN = r"^CHUKWA_[A-Z0-9_]+$"
# Source variables by role: a URL variable can never name a key and vice versa, and a
# key is bound to its URL variable's prefix, so a key is only ever sent to its own host.
URL_ENV_PATTERN = r"^CHUKWA_[A-Z0-9_]+_URL$"
KEY_ENV_PATTERN = r"^CHUKWA_[A-Z0-9_]+_API_KEY$"
ENTITY_ID_MAX_LENGTH = 200

_ENTITY_ID_RE = re.compile(ENTITY_ID_PATTERN)
_LABEL_RE = re.compile(LABEL_PATTERN)
_HASH_RE = re.compile(HASH_PATTERN)
_ENV_VAR_RE = re.compile(ENV_VAR_PATTERN)
_URL_ENV_RE = re.compile(URL_ENV_PATTERN)
_KEY_ENV_RE = re.compile(KEY_ENV_PATTERN)
_WHITESPACE_RUN = re.compile(r"\s+")
_PART_CHAR = re.compile(r"[a-z0-9_-]")


class IdentifierError(ValueError):
    """An identifier that does not match its grammar; the message says why."""


def is_entity_id(value: object) -> bool:
    return isinstance(value, str) and _ENTITY_ID_RE.fullmatch(value) is not None


def is_label(value: object) -> bool:
    return isinstance(value, str) and _LABEL_RE.fullmatch(value) is not None


def is_hash(value: object) -> bool:
    return isinstance(value, str) and _HASH_RE.fullmatch(value) is not None


def is_env_var_name(value: object) -> bool:
    return isinstance(value, str) and _ENV_VAR_RE.fullmatch(value) is not None


def is_url_env_name(value: object) -> bool:
    return isinstance(value, str) and _URL_ENV_RE.fullmatch(value) is not None


def is_key_env_name(value: object) -> bool:
    return isinstance(value, str) and _KEY_ENV_RE.fullmatch(value) is not None


def bound_key_env_name(url_env: str) -> str:
    """The only key variable a source with this URL variable may name:
    ``<P>_BASE_URL`` or ``<P>_URL`` → ``<P>_API_KEY``."""
    prefix = url_env.removesuffix("_URL")
    prefix = prefix.removesuffix("_BASE")
    return f"{prefix}_API_KEY"


def bound_concurrency_env_name(url_env: str) -> str:
    """The deployment's bound on the endpoint a URL variable names, across every worker:
    ``<P>_BASE_URL`` or ``<P>_URL`` → ``<P>_MAX_CONCURRENCY``."""
    return bound_key_env_name(url_env).removesuffix("_API_KEY") + "_MAX_CONCURRENCY"


def entity_id_problem(value: str) -> str | None:
    """Why ``value`` is not a valid entity id, or None when it is."""
    if value == "":
        return "is empty"
    if len(value) > ENTITY_ID_MAX_LENGTH:
        return f"is {len(value)} characters long; at most {ENTITY_ID_MAX_LENGTH} are allowed"
    for index, char in enumerate(value):
        if char != "." and not _PART_CHAR.fullmatch(char):
            return f"has unsupported character {char!r} at position {index}"
    if value.startswith("."):
        return "has an empty leading part"
    if value.endswith("."):
        return "has an empty trailing part"
    if ".." in value:
        return "has an empty part between dots"
    return None


def normalize_entity_id(raw: str) -> str:
    """Authoring input → canonical id: trim, lowercase, each whitespace run → ``_``, validate.

    Model output is never passed through this function: it must match exactly.
    Repeated separators are kept (``crumb__east`` stays distinct from ``crumb_east``).
    """
    candidate = _WHITESPACE_RUN.sub("_", raw.strip().lower())
    problem = entity_id_problem(candidate)
    if problem is not None:
        raise IdentifierError(f"entity id {raw!r} {problem}")
    return candidate


def label_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if is_label(value):
        return None
    if value == "":
        return "is empty"
    if len(value) > 64:
        return f"is {len(value)} characters long; at most 64 are allowed"
    for index, char in enumerate(value):
        if not re.fullmatch(r"[a-z0-9_-]", char):
            return (
                f"has unsupported character {char!r} at position {index} "
                "(allowed: a-z, 0-9, '_', '-')"
            )
    return "must start and end with a letter or digit"


def validate_label(value: object, what: str) -> str:
    problem = label_problem(value)
    if problem is not None:
        raise IdentifierError(f"{what} {value!r} {problem}")
    return value  # type: ignore[return-value]


class TextFormat(enum.Enum):
    """Which grammar a string of a typed value follows (its output's schema names the pattern)."""

    LABEL = "label"
    HASH = "hash"


# A string that is a label or a hash, as a typed value's annotation says it: still a ``str`` to
# the type checker; the API's document gives its pattern (``surfaces/api/typed_output.py``).
Label = Annotated[str, TextFormat.LABEL]
Hash = Annotated[str, TextFormat.HASH]
