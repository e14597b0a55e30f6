"""The rules of a response source's content: its interface (``llm_chat_completions``,
``http_json``, ``mcp_tool``), the transport settings each takes (URL and key variables, timeout,
retry, limits) and the Chat Completions parameters an author may set. Pure: no Django.

Each failure raises :class:`ChukwaError` with a stable code, a message that starts with the
field it names, and ``details.field`` holding that field's path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from chukwa_core.component_validation import (
    check_keys,
    is_int,
    require_label,
    require_object,
    require_string,
    type_name,
)
from chukwa_core.errors import invalid
from chukwa_core.ids import bound_key_env_name, is_key_env_name, is_url_env_name

LLM_INTERFACE = "llm_chat_completions"
HTTP_JSON_INTERFACE = "http_json"
MCP_TOOL_INTERFACE = "mcp_tool"
EXECUTABLE_INTERFACES = frozenset({LLM_INTERFACE, HTTP_JSON_INTERFACE, MCP_TOOL_INTERFACE})
# What a workflow's tool may name: JSON in, JSON out. Ambient sources stay http_json.
TOOL_INTERFACES = frozenset({HTTP_JSON_INTERFACE, MCP_TOOL_INTERFACE})
MAX_SOURCE_CONCURRENCY = 256
SCHEMA_DELIVERIES = frozenset({"response_format", "prompt_only"})
TIMEOUT_MS_MAX = 600_000
MAX_LATENCY_MS = TIMEOUT_MS_MAX  # a declared latency_ms: no longer than a call may take
# A source's optional transport retry policy: tries in all (the first included) and the wait
# before the second, doubled before each later one.
RETRY_ATTEMPTS_MAX = 5
RETRY_BACKOFF_MS_MAX = 30_000
# Chat Completions parameters an author may set, with the JSON types each accepts. An allowlist,
# not a denylist: anything else (headers, base URLs, keys, timeouts, tools, n, stream options…)
# could change where a request goes, what it carries or how Chukwa reads the reply.
LLM_PARAM_TYPES: dict[str, tuple[type, ...]] = {
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": (int,),
    "min_p": (int, float),
    "max_tokens": (int,),
    "max_completion_tokens": (int,),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "repeat_penalty": (int, float),
    "seed": (int,),
    "stop": (str,),
    "reasoning_effort": (str,),
}
# An http_json path: absolute, segments of unreserved URL characters only (RFC 3986), no dot
# segments. No CR/LF, backslashes, percent-escapes, queries or fragments that could smuggle a
# header, a host or a traversal past the grammar.
_HTTP_PATH_RE = re.compile(r"^(/[A-Za-z0-9._~-]+)*/?$")
# An LLM source's ``provider``: who serves the model, as trace viewers name it
# (``gen_ai.provider.name``: openai, anthropic, gcp.vertex_ai, ollama…); lower case, no spaces.
LLM_PROVIDER_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"
_LLM_PROVIDER_RE = re.compile(LLM_PROVIDER_PATTERN)
# An MCP tool name (the MCP specification's tool-name rule): 1…128 ASCII letters, digits, "_",
# "-" or ".". It travels inside the JSON-RPC body, never in a URL or a header.
MCP_TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
_MCP_TOOL_NAME_RE = re.compile(MCP_TOOL_NAME_PATTERN)


def _check_url_env(value: object, field: str) -> str:
    if not is_url_env_name(value):
        raise invalid(
            "invalid_env_var_name",
            field,
            f"{value!r} is not an allowed URL variable name: names must match "
            "^CHUKWA_[A-Z0-9_]+_URL$",
        )
    return value  # type: ignore[return-value]


def _check_key_env(value: object, field: str, url_env: str, url_field: str) -> None:
    if not is_key_env_name(value):
        raise invalid(
            "invalid_env_var_name",
            field,
            f"{value!r} is not an allowed key variable name: names must match "
            "^CHUKWA_[A-Z0-9_]+_API_KEY$",
        )
    bound = bound_key_env_name(url_env)
    if value != bound:
        raise invalid(
            "key_not_bound_to_url",
            field,
            f"{value} is not the key of {url_env} ({url_field}): a key is only sent to its own "
            f"host, so this source may only name {bound}",
        )


def _check_timeout(value: object, field: str) -> None:
    if not is_int(value) or not 1 <= value <= TIMEOUT_MS_MAX:  # type: ignore[operator]
        raise invalid(
            "invalid_response_source",
            field,
            f"must be an integer 1…{TIMEOUT_MS_MAX}, got {value!r}",
        )


def _check_retry(interface: Mapping[str, Any], iface_field: str) -> None:
    """The optional ``retry`` object: how often a call that failed in transport (a timeout, a
    refused or dropped connection, HTTP 5xx or 429) is tried again."""
    if "retry" not in interface:
        return
    code, field = "invalid_response_source", f"{iface_field}.retry"
    retry = require_object(interface["retry"], field, code)
    check_keys(retry, field, required=("attempts",), optional=("backoff_ms",), code=code)
    attempts = retry["attempts"]
    if not is_int(attempts) or not 1 <= attempts <= RETRY_ATTEMPTS_MAX:
        raise invalid(
            code,
            f"{field}.attempts",
            f"must be an integer 1…{RETRY_ATTEMPTS_MAX} (tries in all, the first included), "
            f"got {attempts!r}",
        )
    backoff = retry.get("backoff_ms", 0)
    if not is_int(backoff) or not 0 <= backoff <= RETRY_BACKOFF_MS_MAX:
        raise invalid(
            code,
            f"{field}.backoff_ms",
            f"must be an integer 0…{RETRY_BACKOFF_MS_MAX}, got {backoff!r}",
        )


LIMIT_BOUNDS = {
    "concurrency": MAX_SOURCE_CONCURRENCY,
    "requests_per_minute": 1_000_000,
    "tokens_per_minute": 1_000_000_000,
}


def _check_limits(
    interface: Mapping[str, Any], iface_field: str, params: Mapping[str, Any]
) -> None:
    """The optional ``limits`` object: the provider's limits, enforced across every worker
    process and machine (``concurrency`` generations in flight, ``requests_per_minute``,
    ``tokens_per_minute``). Tokens per minute count each call's prompt estimate plus its
    ``max_tokens``, so that limit needs one."""
    if "limits" not in interface:
        return
    code, field = "invalid_response_source", f"{iface_field}.limits"
    limits = require_object(interface["limits"], field, code)
    check_keys(limits, field, required=(), optional=tuple(LIMIT_BOUNDS), code=code)
    if not limits:
        raise invalid(code, field, f"give at least one of {', '.join(LIMIT_BOUNDS)}")
    for name, high in LIMIT_BOUNDS.items():
        if name in limits and (not is_int(limits[name]) or not 1 <= limits[name] <= high):
            raise invalid(
                code, f"{field}.{name}", f"must be an integer 1…{high}, got {limits[name]!r}"
            )
    if "tokens_per_minute" in limits and not any(
        is_int(params.get(k)) for k in ("max_tokens", "max_completion_tokens")
    ):
        raise invalid(
            code,
            f"{field}.tokens_per_minute",
            "needs params.max_tokens: what a call could spend is counted before it is sent",
        )


BATCH_APIS = ("openai",)
BATCH_COMPLETION_WINDOWS = ("24h",)


def _check_batch(interface: Mapping[str, Any], iface_field: str) -> None:
    """The optional ``batch`` object: calls nobody waits for (judges) go through the provider's
    Batch API (OpenAI's Files and Batches endpoints), priced at the price table's batch prices.
    Both keys are required: the API spoken and the completion window asked for."""
    if "batch" not in interface:
        return
    code, field = "invalid_response_source", f"{iface_field}.batch"
    batch = require_object(interface["batch"], field, code)
    check_keys(batch, field, required=("api", "completion_window"), code=code)
    if batch["api"] not in BATCH_APIS or not isinstance(batch["api"], str):
        raise invalid(
            code, f"{field}.api", f"must be one of {', '.join(BATCH_APIS)}, got {batch['api']!r}"
        )
    window = batch["completion_window"]
    if not isinstance(window, str) or window not in BATCH_COMPLETION_WINDOWS:
        raise invalid(
            code,
            f"{field}.completion_window",
            f"must be one of {', '.join(BATCH_COMPLETION_WINDOWS)} (what OpenAI's Batch API "
            f"offers), got {window!r}",
        )


def validate_response_source_content(content: object, field: str = "content") -> dict[str, Any]:
    code = "invalid_response_source"
    source = require_object(content, field, code)
    check_keys(source, field, required=("version", "label", "interface"), code=code)
    if source["version"] != 1 or not is_int(source["version"]):
        raise invalid("unsupported_version", f"{field}.version", "must be 1")
    require_label(source["label"], f"{field}.label")
    iface_field = f"{field}.interface"
    interface = require_object(source["interface"], iface_field, code)
    name = interface.get("name")
    if name is None:
        raise invalid(code, f"{iface_field}.name", "is required")
    if not isinstance(name, str):
        raise invalid(code, f"{iface_field}.name", f"must be a string, got {type_name(name)}")
    if name not in EXECUTABLE_INTERFACES:
        raise invalid(
            "unknown_interface",
            f"{iface_field}.name",
            f"unknown interface {name!r}; known interfaces: {', '.join(sorted(EXECUTABLE_INTERFACES))}",
        )
    if name == LLM_INTERFACE:
        if "max_concurrency" in interface:
            # One concurrency setting per source (docs/workflows.md): the old spelling is named
            # with its successor rather than refused as an unknown key.
            raise invalid(
                code,
                f"{iface_field}.max_concurrency",
                f"is no longer accepted: a source's one concurrency setting is "
                f'{iface_field}.limits.concurrency (write "limits": {{"concurrency": n}})',
            )
        check_keys(
            interface,
            iface_field,
            required=("name", "model", "base_url_env", "schema_delivery", "timeout_ms"),
            optional=(
                "api_key_env",
                "params",
                "max_string_length",
                "provider",
                "retry",
                "limits",
                "latency_ms",
                "batch",
            ),
            code=code,
        )
        require_string(interface["model"], f"{iface_field}.model", code)
        if "latency_ms" in interface:
            # what one call is expected to take, for time estimates until calls are observed
            latency = interface["latency_ms"]
            if not is_int(latency) or not 1 <= latency <= MAX_LATENCY_MS:
                raise invalid(
                    code,
                    f"{iface_field}.latency_ms",
                    f"must be an integer 1…{MAX_LATENCY_MS} (milliseconds), got {latency!r}",
                )
        if "provider" in interface:
            # Said by the author, never guessed: the protocol is OpenAI's for every backend.
            provider = interface["provider"]
            if not isinstance(provider, str) or not _LLM_PROVIDER_RE.match(provider):
                raise invalid(
                    code,
                    f"{iface_field}.provider",
                    "must be a provider name in lower case (letters, digits, '_', '.', '-'; "
                    f"at most 64), e.g. 'openai', 'anthropic' or 'ollama'; got {provider!r}",
                )
        url_env = _check_url_env(interface["base_url_env"], f"{iface_field}.base_url_env")
        if "api_key_env" in interface:
            _check_key_env(
                interface["api_key_env"],
                f"{iface_field}.api_key_env",
                url_env,
                f"{iface_field}.base_url_env",
            )
        delivery = interface["schema_delivery"]
        if not isinstance(delivery, str) or delivery not in SCHEMA_DELIVERIES:
            raise invalid(
                code,
                f"{iface_field}.schema_delivery",
                f"must be one of {', '.join(sorted(SCHEMA_DELIVERIES))}, "
                f"got {interface['schema_delivery']!r}",
            )
        _check_timeout(interface["timeout_ms"], f"{iface_field}.timeout_ms")
        _check_retry(interface, iface_field)
        _check_batch(interface, iface_field)
        if "max_string_length" in interface:
            # Bounds every string (and the effects list) in the schema sent to the model: small
            # local models otherwise loop inside a string until max_tokens.
            bound = interface["max_string_length"]
            if not is_int(bound) or not 16 <= bound <= 4000:
                raise invalid(
                    code,
                    f"{iface_field}.max_string_length",
                    f"must be an integer 16…4000, got {bound!r}",
                )
        params = require_object(interface.get("params", {}), f"{iface_field}.params", code)
        _check_limits(interface, iface_field, params)
        for key, value in params.items():
            types = LLM_PARAM_TYPES.get(key)
            if types is None:
                raise invalid(
                    code,
                    f"{iface_field}.params.{key}",
                    f"is not a parameter a source may set; allowed: "
                    f"{', '.join(sorted(LLM_PARAM_TYPES))} (the model, messages, streaming, "
                    "response format, transport and credentials are set by Chukwa)",
                )
            if isinstance(value, bool) or not isinstance(value, types):
                wanted = "a string" if types == (str,) else "a number"
                if types == (int,):
                    wanted = "an integer"
                raise invalid(
                    code, f"{iface_field}.params.{key}", f"must be {wanted}, got {type_name(value)}"
                )
    elif name == MCP_TOOL_INTERFACE:
        _validate_mcp_tool(interface, iface_field, code)
    else:
        check_keys(
            interface,
            iface_field,
            required=("name", "method", "url_env", "timeout_ms"),
            optional=("path", "retry"),
            code=code,
        )
        if interface["method"] != "POST":
            raise invalid(
                code, f"{iface_field}.method", f'must be "POST", got {interface["method"]!r}'
            )
        _check_url_env(interface["url_env"], f"{iface_field}.url_env")
        if "path" in interface:
            path = require_string(interface["path"], f"{iface_field}.path", code)
            segments = path.split("/")
            if (
                not _HTTP_PATH_RE.fullmatch(path)
                or ".." in segments
                or "." in segments
                or len(path) > 1024
            ):
                raise invalid(
                    code,
                    f"{iface_field}.path",
                    'must be an absolute path like "/buy_candy": segments of letters, digits, '
                    '".", "_", "~" or "-", no "." or ".." segments, no query, escapes, '
                    f"backslashes or line breaks (got {path!r})",
                )
        _check_timeout(interface["timeout_ms"], f"{iface_field}.timeout_ms")
        _check_retry(interface, iface_field)
    return dict(source)


def _validate_mcp_tool(interface: Mapping[str, Any], iface_field: str, code: str) -> None:
    """One tool on an MCP server reached over streamable HTTP: the endpoint comes from
    ``url_env`` (the whole endpoint URL, e.g. ``https://host/mcp``), the key from its bound
    ``api_key_env``, sent as ``Authorization: Bearer``."""
    check_keys(
        interface,
        iface_field,
        required=("name", "url_env", "tool", "timeout_ms"),
        optional=("api_key_env", "retry"),
        code=code,
    )
    url_env = _check_url_env(interface["url_env"], f"{iface_field}.url_env")
    if "api_key_env" in interface:
        _check_key_env(
            interface["api_key_env"],
            f"{iface_field}.api_key_env",
            url_env,
            f"{iface_field}.url_env",
        )
    tool = interface["tool"]
    if not isinstance(tool, str):
        raise invalid(code, f"{iface_field}.tool", f"must be a string, got {type_name(tool)}")
    if not _MCP_TOOL_NAME_RE.fullmatch(tool):
        raise invalid(
            code,
            f"{iface_field}.tool",
            f"{tool!r} is not an MCP tool name: 1…128 characters, each a letter, a digit, "
            '"_", "-" or "."',
        )
    _check_timeout(interface["timeout_ms"], f"{iface_field}.timeout_ms")
    _check_retry(interface, iface_field)
