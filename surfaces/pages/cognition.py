"""Trace pages: one source invocation, one LLM call (HTML, every page also ?format=json).

Both update themselves while the call runs (``surfaces/pages/live.py``): the LLM call page
shows the text and the time to first token as the chunks land. Their badges are verdicts
(``cognition_app.verdicts``): a generation whose output was rejected reads REJECTED on its own
pages too, although its stream "succeeded".
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse

from cognition_app import selectors
from cognition_app.sources.schema_delivery import SCHEMA_INSTRUCTION
from cognition_app.verdicts import NodeGeneration, invocation_verdict, node_generations
from scenarios_app.hash_names import hash_names
from surfaces.pages.live import stop_polling_when
from surfaces.pages.rendering import page, respond

# The prompt_only schema delivery appends this system message to what the node rendered.
CHUNK_ROWS = 300  # chunk table rows rendered (all of them are in ?format=json)
CHUNK_MARKS = 400  # ticks drawn on the arrival track


@page
def invocation_page(request: HttpRequest, invocation_id: str) -> HttpResponse:
    data = selectors.invocation_get(invocation_id=invocation_id)
    parse_error = selectors.llm_call_parse_error(call_id=data["llm_call_id"])
    data["verdict"] = invocation_verdict({**data, "parse_error": parse_error})
    children = selectors.invocation_children(invocation_id=data["id"])
    for child in children:
        child["verdict"] = invocation_verdict(child)
    data["children"] = children
    response = respond(
        request,
        "cognition_app/invocation_detail.html",
        {
            "inv": data,
            "finished": data["status"] != "running",
            "hash_names": hash_names(hashes=[data["workflow_hash"]]),
        },
        data,
        partial="cognition_app/_invocation.html",
    )
    stop_polling_when(response, request, data["status"] != "running")
    return response


def _label(kind: str, label: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "role": message.get("role", ""),
        "content": message.get("content", ""),
        "kind": kind,
        "label": label,
        **extra,
    }


def _by_content(message: dict[str, Any], after_assistant: bool) -> dict[str, Any]:
    """A message's label when the node's generations do not line up with the conversation."""
    role = message.get("role", "")
    content = str(message.get("content", ""))
    if role == "user" and after_assistant and content.startswith("Result of "):
        return _label("tool_result", "tool result", message)
    if role == "user" and after_assistant and content.startswith("Your previous response"):
        return _label("corrective", "user · corrective", message)
    return _label("prompt", role, message)


def labelled_messages(
    messages: list[dict[str, Any]], earlier: list[NodeGeneration]
) -> list[dict[str, Any]]:
    """The request's messages, each saying what it is: the node's prompt, an earlier generation's
    output (with its verdict), the corrective message after a rejection, or a tool's result.

    A node's conversation grows by one (assistant, user) pair per earlier generation, in order,
    so the last pairs are matched to those generations: a pair after a rejected generation is a
    correction, a pair after an accepted tool call carries the tool's result."""
    body = list(messages)
    tail: list[dict[str, Any]] = []
    if (
        len(body) > 1
        and body[-1].get("role") == "system"
        and str(body[-1].get("content", "")).startswith(SCHEMA_INSTRUCTION)
    ):
        tail = [_label("schema_instruction", "system · schema instruction", body.pop())]
    pairs = len(earlier)
    appended = body[len(body) - 2 * pairs :] if pairs else []
    roles_line_up = len(body) > 2 * pairs and all(
        m.get("role") == ("assistant" if i % 2 == 0 else "user") for i, m in enumerate(appended)
    )
    if not pairs or not roles_line_up:
        out = []
        for i, m in enumerate(body):
            out.append(_by_content(m, i > 0 and body[i - 1].get("role") == "assistant"))
        return out + tail
    out = [_label("prompt", m.get("role", ""), m) for m in body[: len(body) - 2 * pairs]]
    for i, gen in enumerate(earlier):
        output, answer = appended[2 * i], appended[2 * i + 1]
        verdict = gen["verdict"]
        number = gen["generation_attempt"] or i + 1
        out.append(
            _label(
                "earlier_output",
                f"assistant · generation {number}",
                output,
                verdict=verdict,
                llm_call_id=gen["llm_call_id"],
            )
        )
        if verdict["code"] == "rejected":
            out.append(_label("corrective", f"user · corrective after generation {number}", answer))
        elif verdict["output_kind"] == "tool_call":
            tool = gen["tool_name"] or "tool"
            out.append(_label("tool_result", f"tool result · {tool}", answer))
        else:
            out.append(_label("prompt", answer.get("role", ""), answer))
    return out + tail


def _next_message(data: dict[str, Any], following: NodeGeneration | None) -> dict[str, Any] | None:
    """What the node sent after this generation: the corrective message when it was rejected,
    the tool's result when it called a tool; the next generation's last message says it."""
    verdict = data["verdict"]
    if following is None or following["llm_call_id"] is None:
        return None
    if verdict["code"] == "rejected":
        kind = "corrective"
    elif verdict["code"] == "accepted" and verdict["output_kind"] == "tool_call":
        kind = "tool_result"
    else:
        return None
    last = selectors.llm_call_last_message(call_id=following["llm_call_id"])
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    return {
        "kind": kind,
        "llm_call_id": following["llm_call_id"],
        "content": last.get("content", ""),
    }


@page
def llm_call_page(request: HttpRequest, call_id: str) -> HttpResponse:
    data = selectors.llm_call_get(call_id=call_id)
    generations = node_generations(
        attempt_id=data["attempt_id"], subject_id=data["subject_id"], node_id=data["node_id"]
    )
    index = next(
        (i for i, g in enumerate(generations) if g["invocation_id"] == data["invocation_id"]), None
    )
    if index is None:  # not a node's generation (a conformance check): judged by its row alone
        inv = selectors.invocation_row(invocation_id=data["invocation_id"])
        data["verdict"] = invocation_verdict({**inv, "parse_error": data["parse_error"]})
        earlier, following = [], None
    else:
        data["verdict"] = generations[index]["verdict"]
        earlier = generations[:index]
        following = generations[index + 1] if index + 1 < len(generations) else None
    running = data["status"] == "running"
    chunks = data["chunks"]
    data["live_ttft_ms"] = (
        data["ttft_ms"]
        if data["ttft_ms"] is not None
        else (chunks[0]["offset_ms"] if chunks else None)
    )
    data["message_labels"] = labelled_messages(data["messages"], earlier)
    data["next_message"] = _next_message(data, following)
    # Kept for API clients: the corrective message, only ever after a rejected generation.
    nxt = data["next_message"]
    data["corrective_message"] = nxt if nxt and nxt["kind"] == "corrective" else None
    last = chunks[-1]["offset_ms"] if chunks else 0
    span = max(last, 1)
    step = max(1, len(chunks) // CHUNK_MARKS)
    # where the call sits, for the crumbs: world, attempt, invocation
    where = selectors.invocation_place(invocation_id=data["invocation_id"])
    context = {
        "call": data,
        "where": where,
        "running": running,
        "chunk_marks": [{**c, "left": c["offset_ms"] / span * 100} for c in chunks[::step]],
        "chunk_rows": chunks[:CHUNK_ROWS],
        "chunks_hidden": max(len(chunks) - CHUNK_ROWS, 0),
        "chunk_span_ms": last,
        # a finished reply that is JSON reads pretty-printed (the raw text one click away)
        "reply_pretty": "" if running else _pretty_json(data["raw_text"]),
    }
    response = respond(
        request,
        "cognition_app/llm_call_detail.html",
        context,
        data,
        partial="cognition_app/_llm_call.html",
    )
    stop_polling_when(response, request, not running)
    return response


def _pretty_json(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(value, dict | list):
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False)
