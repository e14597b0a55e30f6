"""What one stored row says as span attributes: the GenAI semantic conventions and
OpenInference's, content only when it is captured (scrubbed as the pages are), page paths
otherwise."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from opentelemetry.trace import SpanKind

from cognition_app.models import InvocationKind, InvocationStatus, LlmCall, SourceInvocation
from cognition_app.sources import scrub, scrub_json

# OpenInference span kinds (openinference.span.kind)
CHAIN, AGENT, LLM, TOOL = "CHAIN", "AGENT", "LLM", "TOOL"


def without_none(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None and v != ""}


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def capture_content() -> bool:
    """Whether spans carry content (messages, tool arguments and results)."""
    return bool(settings.CHUKWA_OTEL_CAPTURE_CONTENT)


def _io(*, page: str, input_value: Any = None, output_value: Any = None) -> dict[str, Any]:
    """OpenInference's ``input.value``/``output.value``: the content when it is captured (JSON
    or text, scrubbed), else the path of the page in Chukwa that shows it."""
    if not capture_content():
        return {
            "input.value": page,
            "input.mime_type": "text/plain",
            "output.value": page,
            "output.mime_type": "text/plain",
        }
    attributes: dict[str, Any] = {}
    for name, value in (("input", input_value), ("output", output_value)):
        if value is None:
            continue
        if isinstance(value, str):
            attributes[f"{name}.value"] = scrub(value)
            attributes[f"{name}.mime_type"] = "text/plain"
        else:
            attributes[f"{name}.value"] = as_json(scrub_json(value))
            attributes[f"{name}.mime_type"] = "application/json"
    return attributes


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _parsed(text: str) -> dict[str, Any]:
    """A JSON object kept as text (a conformance check stores its reply so), or ``{}``."""
    try:
        return _dict(json.loads(text)) if text else {}
    except ValueError:
        return {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return as_json(content)


def _chat_content(messages: list[Any], reply: str | None, finish_reason: str) -> dict[str, Any]:
    """The GenAI message attributes (and OpenInference's flattened messages, which Phoenix
    shows as a conversation) of one chat, scrubbed; empty when content is not captured."""
    if not capture_content():
        return {}
    rows = [m for m in scrub_json(messages) if isinstance(m, dict)]
    system = [m for m in rows if m.get("role") == "system"]
    others = [m for m in rows if m.get("role") != "system"]
    attributes: dict[str, Any] = {
        "gen_ai.system_instructions": as_json(
            [{"type": "text", "content": _text_of(m.get("content", ""))} for m in system]
        )
        if system
        else None,
        "gen_ai.input.messages": as_json(
            [
                {
                    "role": m.get("role", "user"),
                    "parts": [{"type": "text", "content": _text_of(m.get("content", ""))}],
                }
                for m in others
            ]
        ),
    }
    for i, m in enumerate(rows):
        attributes[f"llm.input_messages.{i}.message.role"] = str(m.get("role", "user"))
        attributes[f"llm.input_messages.{i}.message.content"] = _text_of(m.get("content", ""))
    if reply is not None:
        text = scrub(reply)
        attributes["gen_ai.output.messages"] = as_json(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": text}],
                    "finish_reason": finish_reason or "stop",
                }
            ]
        )
        attributes["llm.output_messages.0.message.role"] = "assistant"
        attributes["llm.output_messages.0.message.content"] = text
    return without_none(attributes)


def _usage(prompt: int | None, completion: int | None, cached: int | None) -> dict[str, Any]:
    total = prompt + completion if prompt is not None and completion is not None else None
    return {
        "gen_ai.usage.input_tokens": prompt,
        "gen_ai.usage.output_tokens": completion,
        "gen_ai.usage.cache_read.input_tokens": cached,
        "llm.token_count.prompt": prompt,
        "llm.token_count.completion": completion,
        "llm.token_count.total": total,
    }


def _provider(provider: str) -> dict[str, Any]:
    """The backend's provider as its source names it; nothing when the source names none (the
    protocol is OpenAI's for every backend, which says nothing of who serves the model)."""
    return {"gen_ai.provider.name": provider, "llm.provider": provider} if provider else {}


def _llm_attributes(call: LlmCall, provider: str) -> dict[str, Any]:
    server = urlsplit(call.base_url)
    params = call.params or {}
    return {
        "openinference.span.kind": LLM,
        "gen_ai.operation.name": "chat",
        **_provider(provider),
        "gen_ai.request.model": call.requested_model,
        "gen_ai.response.model": call.response_model,
        "llm.model_name": call.response_model or call.requested_model,
        **_usage(call.prompt_tokens, call.completion_tokens, call.cached_tokens),
        "gen_ai.response.finish_reasons": [call.finish_reason] if call.finish_reason else None,
        "gen_ai.request.temperature": params.get("temperature"),
        "gen_ai.request.max_tokens": params.get("max_tokens"),
        "gen_ai.request.seed": params.get("seed"),
        "llm.invocation_parameters": as_json(params) if params else None,
        "gen_ai.output.type": "json" if call.response_format else "text",
        "server.address": server.hostname,
        "server.port": server.port,
        "chukwa.llm_call.id": str(call.pk),
        "chukwa.llm_call.usage_source": call.usage_source,
        "chukwa.llm_call.cost": float(call.cost) if call.cost is not None else None,
        "chukwa.llm_call.tokens_reused": call.tokens_reused,
        "chukwa.llm_call.cost_saved": float(call.cost_saved)
        if call.cost_saved is not None
        else None,
        **_io(
            page=call.get_absolute_url(),
            input_value=call.messages,
            output_value=call.raw_text if call.status == InvocationStatus.SUCCEEDED else None,
        ),
        **_chat_content(
            call.messages,
            call.raw_text if call.status == InvocationStatus.SUCCEEDED else None,
            call.finish_reason,
        ),
    }


def _check_attributes(inv: SourceInvocation, provider: str) -> dict[str, Any]:
    """A conformance check is a chat request too (a probe of the backend): its request and
    reply are in the invocation row."""
    request = _dict(inv.request)
    reply = _dict(inv.response_json) or _parsed(inv.response_text)
    usage = _dict(reply.get("usage"))
    choices = reply.get("choices")
    first = _dict(choices[0] if isinstance(choices, list) and choices else None)
    message = _dict(first.get("message"))
    text = _str(message.get("content")) or None
    finish = _str(first.get("finish_reason"))
    messages = request.get("messages")
    if not isinstance(messages, list):
        messages = []

    def count(key: str) -> int | None:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    model = _str(request.get("model")) or None
    answered = _str(reply.get("model")) or None
    call: LlmCall | None = getattr(inv, "llm_call", None)
    return {
        "openinference.span.kind": LLM,
        "gen_ai.operation.name": "chat",
        **_provider(provider),
        "gen_ai.request.model": model,
        "gen_ai.response.model": answered,
        "llm.model_name": answered or model,
        # what Chukwa counted for the check (its LLM call; older checks have none)
        **(
            _usage(call.prompt_tokens, call.completion_tokens, None)
            if call is not None
            else _usage(count("prompt_tokens"), count("completion_tokens"), None)
        ),
        "gen_ai.response.finish_reasons": [finish] if finish else None,
        "gen_ai.output.type": "json",
        "chukwa.llm_call.id": str(call.pk) if call is not None else None,
        "chukwa.llm_call.usage_source": call.usage_source if call is not None else None,
        **_io(page=inv.get_absolute_url(), input_value=messages or None, output_value=text),
        **_chat_content(messages, text, finish),
    }


def _tool_attributes(inv: SourceInvocation) -> dict[str, Any]:
    request = inv.request if isinstance(inv.request, dict) else {}
    arguments = request.get("body", request)
    result = inv.response_json if inv.response_json is not None else (inv.response_text or None)
    attributes: dict[str, Any] = {
        "openinference.span.kind": TOOL,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": inv.tool_name,
        "gen_ai.tool.type": "function",
        "tool.name": inv.tool_name,
        # Models elect tools in their JSON reply, not with a provider's tool-call id: the call's
        # id is Chukwa's id of the invocation.
        "gen_ai.tool.call.id": str(inv.pk),
        **_io(page=inv.get_absolute_url(), input_value=arguments, output_value=result),
    }
    if capture_content():
        attributes["gen_ai.tool.call.arguments"] = as_json(scrub_json(arguments))
        if result is not None:
            attributes["gen_ai.tool.call.result"] = (
                scrub(result) if isinstance(result, str) else as_json(scrub_json(result))
            )
    return attributes


def _ambient_attributes(inv: SourceInvocation) -> dict[str, Any]:
    request = inv.request if isinstance(inv.request, dict) else {}
    result = inv.response_json if inv.response_json is not None else (inv.response_text or None)
    return {
        "openinference.span.kind": TOOL,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": inv.ambient_source_id,
        "tool.name": inv.ambient_source_id,
        "gen_ai.tool.call.id": str(inv.pk),
        "chukwa.ambient_source.id": inv.ambient_source_id,
        **_io(page=inv.get_absolute_url(), input_value=request.get("body"), output_value=result),
    }


def invocation_span(inv: SourceInvocation, provider: str) -> tuple[str, SpanKind, dict[str, Any]]:
    common = {
        "chukwa.invocation.id": str(inv.pk),
        "chukwa.invocation.kind": inv.kind,
        "chukwa.invocation.status": inv.status,
        "chukwa.source.hash": inv.source_hash,
        "chukwa.source.label": inv.source_label,
        "chukwa.subject.id": inv.subject_id,
        "chukwa.node.id": inv.node_id,
        "http.response.status_code": inv.http_status,
        # reuse: answered from a recorded call (a cache hit), nothing sent
        "chukwa.reused_from": str(inv.reused_from) if inv.reused_from else None,
        "chukwa.cache_hit": True if inv.reused_from else None,
    }
    if inv.kind == InvocationKind.LLM_GENERATION:
        call: LlmCall | None = getattr(inv, "llm_call", None)
        if call is not None:
            attributes = {**common, **_llm_attributes(call, provider)}
        else:
            attributes = {
                **common,
                "openinference.span.kind": LLM,
                "gen_ai.operation.name": "chat",
                **_provider(provider),
                **_io(page=inv.get_absolute_url()),
            }
        model = call.requested_model if call is not None else ""
        return f"chat {model}".strip(), SpanKind.CLIENT, without_none(attributes)
    if inv.kind == InvocationKind.CONFORMANCE_CHECK:
        attributes = {**common, **_check_attributes(inv, provider)}
        model = attributes.get("gen_ai.request.model") or ""
        return f"chat {model}".strip(), SpanKind.CLIENT, without_none(attributes)
    if inv.kind == InvocationKind.MODEL_ELECTED_TOOL:
        attributes = {**common, **_tool_attributes(inv)}
        return f"execute_tool {inv.tool_name}", SpanKind.INTERNAL, without_none(attributes)
    if inv.kind == InvocationKind.AMBIENT_CONTEXT:
        attributes = {**common, **_ambient_attributes(inv)}
        return f"ambient {inv.ambient_source_id}", SpanKind.CLIENT, without_none(attributes)
    attributes = {**common, "openinference.span.kind": TOOL, **_io(page=inv.get_absolute_url())}
    return str(inv.kind), SpanKind.CLIENT, without_none(attributes)
