"""Validators for component contents and scenarios. Pure: no Django.

Each failure raises :class:`ChukwaError` with a stable code, a message that starts with the
field it names, and ``details.field`` holding that field's path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import NoSuchResource

from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.ids import (
    IdentifierError,
    bound_key_env_name,
    is_key_env_name,
    is_url_env_name,
    label_problem,
    normalize_entity_id,
)

ENVIRONMENT_MAX_BYTES = 64 * 1024
SCENARIO_MAX_BYTES = 256 * 1024
CHRONON_MAX_SECONDS = 31_536_000
LLM_INTERFACE = "llm_chat_completions"
HTTP_JSON_INTERFACE = "http_json"
MCP_TOOL_INTERFACE = "mcp_tool"
EXECUTABLE_INTERFACES = frozenset({LLM_INTERFACE, HTTP_JSON_INTERFACE, MCP_TOOL_INTERFACE})
# What a workflow's tool may name: JSON in, JSON out. Ambient sources stay http_json.
TOOL_INTERFACES = frozenset({HTTP_JSON_INTERFACE, MCP_TOOL_INTERFACE})
MAX_SOURCE_CONCURRENCY = 256
SCHEMA_DELIVERIES = frozenset({"response_format", "prompt_only"})
TIMEOUT_MS_MAX = 600_000
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
# The only meta-schema a stored schema may declare (the one it is validated with).
DRAFT_2020_12_URIS = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_keys(
    obj: Mapping[str, Any],
    field: str,
    *,
    required: Sequence[str],
    optional: Sequence[str] = (),
    code: str,
) -> None:
    """Reject missing required keys and unknown keys, naming each."""
    for key in required:
        if key not in obj:
            raise invalid(code, f"{field}.{key}" if field else key, "is required")
    allowed = set(required) | set(optional)
    unknown = sorted(k for k in obj if k not in allowed)
    if unknown:
        where = f"{field}.{unknown[0]}" if field else unknown[0]
        raise invalid(
            code,
            where,
            f"unknown field; allowed fields are {', '.join(sorted(allowed))}",
            unknown=unknown,
        )


def require_object(value: object, field: str, code: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise invalid(code, field, f"must be an object, got {type_name(value)}")
    return value


def require_string(value: object, field: str, code: str, *, non_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise invalid(code, field, f"must be a string, got {type_name(value)}")
    if non_empty and not value.strip():
        raise invalid(code, field, "must be a non-empty string")
    return value


def require_label(value: object, field: str, code: str = "invalid_label") -> str:
    problem = label_problem(value)
    if problem is not None:
        raise invalid(code, field, f"label {value!r} {problem}")
    return value  # type: ignore[return-value]


# --- json_schema ---------------------------------------------------------------------------


def validate_json_schema_content(content: object, field: str = "content") -> dict[str, Any]:
    if not isinstance(content, dict):
        raise invalid(
            "invalid_json_schema", field, f"must be a JSON Schema object, got {type_name(content)}"
        )
    _check_schema_references(content, field)
    try:
        Draft202012Validator.check_schema(content)
    except SchemaError as exc:
        pointer = "/" + "/".join(str(p) for p in exc.absolute_path) if exc.absolute_path else ""
        raise invalid(
            "invalid_json_schema",
            f"{field}{pointer}",
            f"is not a valid Draft 2020-12 schema: {exc.message}",
            schema_path=list(map(str, exc.absolute_schema_path)),
        ) from None
    return content


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs alias mypy misses


# jsonschema's default registry still fetches http(s) references (with a deprecation warning);
# every validator Chukwa builds uses this one, which can never retrieve anything.
NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def schema_validator_for(schema: Mapping[str, Any]) -> Draft202012Validator:
    """The one way to build a validator for a stored schema: Draft 2020-12, nothing retrieved."""
    return Draft202012Validator(schema, registry=NO_RETRIEVAL)


def _schema_nodes(value: Any, pointer: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object in a schema document with its JSON pointer (keywords and data alike: a
    ``$ref`` inside ``const`` is harmless, but rejecting it too keeps the rule one line)."""
    if isinstance(value, dict):
        yield pointer, value
        for key, child in value.items():
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            yield from _schema_nodes(child, f"{pointer}/{escaped}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _schema_nodes(child, f"{pointer}/{index}")


def _check_schema_references(content: Mapping[str, Any], field: str) -> None:
    """A stored schema is self-contained: references only to fragments of the same
    document, no ``$id`` that would re-base them, no meta-schema but Draft 2020-12. Validation
    also runs with a registry that refuses retrieval; this rule makes the refusal unreachable."""
    for pointer, node in _schema_nodes(content):
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            if keyword in node:
                ref = node[keyword]
                if not isinstance(ref, str) or not ref.startswith("#"):
                    raise invalid(
                        "schema_reference_not_local",
                        f"{field}{pointer}/{keyword}",
                        f"{keyword} {ref!r} is not a fragment of this document: only references "
                        'starting with "#" are allowed, and nothing is ever retrieved',
                    )
        if "$id" in node:
            raise invalid(
                "schema_id_not_allowed",
                f"{field}{pointer}/$id",
                "$id is not allowed: a stored schema is identified by its hash, and an $id would "
                "change what its references resolve to",
            )
        if "$schema" in node and (pointer or node["$schema"] not in DRAFT_2020_12_URIS):
            raise invalid(
                "unsupported_meta_schema",
                f"{field}{pointer}/$schema",
                "only the root may declare $schema, and only as "
                '"https://json-schema.org/draft/2020-12/schema" (schemas are Draft 2020-12)',
            )


# --- response_source -----------------------------------------------------------------------


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
            ),
            code=code,
        )
        require_string(interface["model"], f"{iface_field}.model", code)
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


# --- environment ---------------------------------------------------------------------------


def validate_environment_content(content: object, field: str = "content") -> str:
    if not isinstance(content, str):
        raise invalid("invalid_environment", field, f"must be a string, got {type_name(content)}")
    if not content.strip():
        raise invalid("empty_environment", field, "environment text must be non-empty")
    if "\x00" in content:
        raise invalid(
            "invalid_character", field, "contains the NUL character U+0000, which cannot be stored"
        )
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise invalid(
            "invalid_character",
            field,
            f"contains a lone surrogate (U+{ord(content[exc.start]):04X}) at position {exc.start}",
        ) from None
    if size > ENVIRONMENT_MAX_BYTES:
        raise invalid(
            "environment_too_large",
            field,
            f"environment text is {size} bytes; at most {ENVIRONMENT_MAX_BYTES} are allowed",
        )
    return content


# --- entity --------------------------------------------------------------------------------


def normalize_entity_content(content: object, field: str = "content") -> dict[str, Any]:
    """Validate an entity and return it with its id normalized (the form that is hashed)."""
    code = "invalid_entity"
    entity = require_object(content, field, code)
    check_keys(entity, field, required=("id", "name", "state", "environment", "kind"), code=code)
    raw_id = entity["id"]
    if not isinstance(raw_id, str):
        raise invalid(
            "invalid_entity_id", f"{field}.id", f"must be a string, got {type_name(raw_id)}"
        )
    try:
        entity_id = normalize_entity_id(raw_id)
    except IdentifierError as exc:
        raise invalid("invalid_entity_id", f"{field}.id", str(exc)) from None
    name = require_string(entity["name"], f"{field}.name", code)
    state = require_string(entity["state"], f"{field}.state", code, non_empty=False)
    environment = require_label(entity["environment"], f"{field}.environment")
    kind = entity["kind"]
    normalized_kind: Any
    if kind == "prop":
        normalized_kind = "prop"
    elif isinstance(kind, dict) and set(kind) == {"agent"}:
        agent_field = f"{field}.kind.agent"
        agent = require_object(kind["agent"], agent_field, code)
        check_keys(agent, agent_field, required=("goal", "memory", "cognition_profile"), code=code)
        goal = require_string(agent["goal"], f"{agent_field}.goal", code)
        memory = require_string(agent["memory"], f"{agent_field}.memory", code, non_empty=False)
        profile = require_label(agent["cognition_profile"], f"{agent_field}.cognition_profile")
        normalized_kind = {"agent": {"goal": goal, "memory": memory, "cognition_profile": profile}}
    elif isinstance(kind, dict) and set(kind) == {"prop"}:
        raise invalid(
            "prop_has_profile" if _mentions_profile(kind["prop"]) else code,
            f"{field}.kind",
            'a prop is written as "prop" and has no cognition profile',
        )
    else:
        raise invalid(
            code,
            f"{field}.kind",
            f'must be "prop" or {{"agent": {{"goal", "memory", "cognition_profile"}}}}, got {kind!r}',
        )
    return {
        "id": entity_id,
        "name": name,
        "state": state,
        "environment": environment,
        "kind": normalized_kind,
    }


def _mentions_profile(value: object) -> bool:
    return isinstance(value, dict) and "cognition_profile" in value


def is_agent(entity: Mapping[str, Any]) -> bool:
    return isinstance(entity.get("kind"), dict)


# --- scenario ------------------------------------------------------------------------------


def validate_scenario_scalars(
    *, scenario_slug: object, description: object, chronon_seconds: object
) -> None:
    problem = label_problem(scenario_slug)
    if problem is not None:
        raise invalid("invalid_slug", "scenario_slug", f"{scenario_slug!r} {problem}")
    if not isinstance(description, str) or not description.strip():
        raise invalid("invalid_description", "description", "must be a non-empty string")
    if not is_int(chronon_seconds) or not 1 <= chronon_seconds <= CHRONON_MAX_SECONDS:  # type: ignore[operator]
        raise invalid(
            "invalid_chronon",
            "chronon_seconds",
            f"must be an integer 1…{CHRONON_MAX_SECONDS}, got {chronon_seconds!r}",
        )


def validate_scenario_bindings(
    *,
    cognition_profiles: Mapping[str, str],
    environments: Mapping[str, str],
    entities: Sequence[Mapping[str, Any]],
    entities_field: str = "entities",
) -> None:
    """Label resolution and roster rules over resolved entity contents."""
    if not cognition_profiles:
        raise invalid(
            "no_cognition_profiles", "cognition_profiles", "at least one profile is required"
        )
    if not environments:
        raise invalid("no_environments", "environments", "at least one environment is required")
    for label in cognition_profiles:
        require_label(label, f"cognition_profiles.{label}")
    for label in environments:
        require_label(label, f"environments.{label}")
    if not entities:
        raise invalid("no_entities", entities_field, "at least one entity is required")
    seen: dict[str, int] = {}
    for index, entity in enumerate(entities):
        where = f"{entities_field}[{index}]"
        if entity["environment"] not in environments:
            raise invalid(
                "unknown_environment_label",
                f"{where}.environment",
                f"entity {entity['id']!r} is in environment {entity['environment']!r}, which the "
                f"scenario does not bind. Bound environments: {', '.join(sorted(environments))}",
            )
        if is_agent(entity):
            profile = entity["kind"]["agent"]["cognition_profile"]
            if profile not in cognition_profiles:
                raise invalid(
                    "unknown_cognition_profile_label",
                    f"{where}.kind.agent.cognition_profile",
                    f"agent {entity['id']!r} uses cognition profile {profile!r}, which the "
                    f"scenario does not bind. Bound profiles: {', '.join(sorted(cognition_profiles))}",
                )
        if entity["id"] in seen:
            raise invalid(
                "duplicate_entity_id",
                f"{where}.id",
                f"entity id {entity['id']!r} is already used by {entities_field}[{seen[entity['id']]}]",
            )
        seen[entity["id"]] = index
    if not any(is_agent(e) for e in entities):
        raise invalid("no_agent", entities_field, "at least one entity must be an agent")


def check_scenario_size(canonical_size: int) -> None:
    if canonical_size > SCENARIO_MAX_BYTES:
        raise ChukwaError(
            "scenario_too_large",
            f"scenario: canonical size is {canonical_size} bytes; at most {SCENARIO_MAX_BYTES} "
            "are allowed",
            {"field": "scenario", "size": canonical_size, "limit": SCENARIO_MAX_BYTES},
        )
