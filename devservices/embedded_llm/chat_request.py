"""A Chat Completions request as the embedded model accepts it: parsed, checked, refused in the
OpenAI error shape."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_CAP = 1024


MAX_STOP_SEQUENCES = 4
MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SCHEMA_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class RequestError(Exception):
    """A request the endpoint refuses; rendered in the OpenAI error shape."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        error_type: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.error_type = error_type
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.param, self.code)


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]]
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    schema: dict[str, Any] | None = None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not _is_number(value) or not low <= value <= high:
        raise RequestError(f"'{name}' must be a number between {low} and {high}", param=name)
    return float(value)


def _message_content(content: Any, index: int) -> str:
    param = f"messages[{index}].content"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise RequestError(
                    "only text content parts ({'type': 'text', 'text': ...}) are supported",
                    param=param,
                )
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError("message content must be a string or a list of text parts", param=param)


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    messages: list[dict[str, str]] = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise RequestError("each message must be an object", param=f"messages[{index}]")
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise RequestError(
                f"message role must be one of {sorted(MESSAGE_ROLES)}",
                param=f"messages[{index}].role",
            )
        if message.get("tool_calls"):
            raise RequestError(
                "tool calls are not supported by the embedded model",
                param=f"messages[{index}].tool_calls",
            )
        content = _message_content(message.get("content"), index)
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    return messages


def _max_tokens(body: dict[str, Any]) -> int:
    name = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    value = body.get(name)
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not _is_int(value) or value < 1:
        raise RequestError(f"'{name}' must be a positive integer", param=name)
    return min(value, MAX_TOKENS_CAP)


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise RequestError(
            f"'stop' must be a non-empty string or up to {MAX_STOP_SEQUENCES} non-empty strings",
            param="stop",
        )
    return list(stops)


def _response_schema(value: Any) -> dict[str, Any] | None:
    """The JSON Schema to constrain decoding with, or None for plain text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError("'response_format' must be an object", param="response_format")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise RequestError(
                "'response_format.json_schema' must be an object", param="response_format"
            )
        name = spec.get("name")
        if name is not None and not (isinstance(name, str) and SCHEMA_NAME_RE.match(name)):
            raise RequestError(
                "'response_format.json_schema.name' must match ^[A-Za-z0-9_-]{1,64}$",
                param="response_format",
            )
        if "strict" in spec and not isinstance(spec["strict"], bool | None):
            raise RequestError(
                "'response_format.json_schema.strict' must be a boolean", param="response_format"
            )
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise RequestError(
                "'response_format.json_schema.schema' must be a JSON Schema object",
                param="response_format",
            )
        return schema
    if kind == "json_object":
        schema = value.get("schema")
        if schema is None:
            raise RequestError(
                "response_format 'json_object' without a schema is not supported: this endpoint "
                "only serves schema-constrained JSON; send type 'json_schema'",
                param="response_format",
            )
        if not isinstance(schema, dict):
            raise RequestError(
                "'response_format.schema' must be a JSON Schema object", param="response_format"
            )
        return schema
    raise RequestError(
        "response_format type must be 'text', 'json_schema' or 'json_object'",
        param="response_format",
    )


def parse_request(raw: bytes) -> ChatRequest:
    """Validate an OpenAI Chat Completions request body; raise RequestError when malformed."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    n = body.get("n")
    if n is not None and n != 1:
        raise RequestError("only n=1 is supported", param="n")
    if body.get("tools"):
        raise RequestError("tools are not supported by the embedded model", param="tools")
    if body.get("logprobs"):
        raise RequestError("logprobs are not supported by the embedded model", param="logprobs")
    stream = body.get("stream", False)
    if not isinstance(stream, bool | None):
        raise RequestError("'stream' must be a boolean", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("'stream_options' must be an object", param="stream_options")
    include_usage = (options or {}).get("include_usage", False)
    if not isinstance(include_usage, bool | None):
        raise RequestError(
            "'stream_options.include_usage' must be a boolean", param="stream_options"
        )
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise RequestError("'seed' must be an integer", param="seed")
    return ChatRequest(
        messages=_messages(body.get("messages")),
        max_tokens=_max_tokens(body),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        seed=None if seed is None else seed & 0xFFFFFFFF,
        stop=_stop(body.get("stop")),
        stream=bool(stream),
        include_usage=bool(include_usage),
        schema=_response_schema(body.get("response_format")),
    )
