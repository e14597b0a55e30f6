"""The LLM node types: ``llm_text`` and ``llm_tool_loop``.

One model-content retry lane per node: a rejected generation (non-JSON, schema-invalid, unknown
tool, bad arguments, a WorldPatch the kernel rejects, empty text) is appended to the conversation
as the assistant's message plus a corrective user message naming exactly what was wrong; each try
is its own traced generation. Source failures (transport, HTTP, configuration) are not model
content: they fail the attempt at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict, text_problem
from chukwa_core.patch_schema import PATCH_OPS
from chukwa_core.patching import PatchRejected, validate_patch
from chukwa_core.prompt_templates import PLACEHOLDER_RE
from chukwa_core.rendering import environment_rendered, subject_rendered, world_projection
from chukwa_core.world_state import memory_of
from cognition_app import sources
from cognition_app.sources import CallContext, Generation, Judgement, SourceFailure
from cognition_app.subject_run import AttemptFailure, StagedEvent, SubjectRun, failure_step

CORRECTIVE = (
    "Your previous response was rejected. {complaint}\n\n"
    "Return a corrected JSON object matching the same schema. Keep everything else about your "
    "answer; only fix what was wrong."
)
TEXT_CORRECTIVE = "Your previous response was rejected: {complaint}\n\nAnswer again in plain text."


class ModelContentRejected(Exception):
    def __init__(
        self, complaint: str, *, output_kind: str = "invalid", parse_error: str = ""
    ) -> None:
        super().__init__(complaint)
        self.complaint = complaint
        self.output_kind = output_kind
        self.parse_error = parse_error


# --- prompt rendering ------------------------------------------------------------------------


def render_tools(tools: list[dict[str, Any]]) -> str:
    if not tools:
        return "(no tools are available)"
    lines = []
    for tool in tools:
        schema = sources.schema_content(tool["arguments_schema_ref"]["hash"])
        lines.append(
            f"- {tool['name']}: {tool['description']}\n  arguments (JSON Schema): "
            f"{json.dumps(schema, sort_keys=True)}"
        )
    return "\n".join(lines)


def placeholder_values(run: SubjectRun, tools: list[dict[str, Any]]) -> dict[str, str]:
    subject = run.world.entities[run.subject_id]
    values = {
        "world.projection": world_projection(run.world),
        "environment.rendered": environment_rendered(run.world, run.subject_id),
        "subject.rendered": subject_rendered(run.world, run.subject_id),
        "subject.id": run.subject_id,
        "subject.memory": memory_of(subject) or "(nothing yet)",
        "ambient.visible": json.dumps(run.ambient, indent=2, sort_keys=True, ensure_ascii=False),
        "tools.available": render_tools(tools),
        "world.turn": str(run.ctx.turn),
        "world.attempted_turn": str(run.ctx.attempted_turn),
        "world.simulation_time": run.ctx.simulation_time,
    }
    for node_id, output in run.outputs.items():
        if isinstance(output, str):
            values[f"nodes.{node_id}.output"] = output
    return values


def render_messages(template: Mapping[str, Any], values: Mapping[str, str]) -> list[dict[str, str]]:
    """Plain replacement; validation guarantees every placeholder is known."""
    return [
        {
            "role": m["role"],
            "content": PLACEHOLDER_RE.sub(lambda g: values[g.group(1)], m["content"]),
        }
        for m in template["messages"]
    ]


# --- the schema sent to the model ------------------------------------------------------------


def _text(max_len: int | None) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_len} if max_len else {"type": "string"}


def model_patch_schema(run: SubjectRun, max_len: int | None) -> dict[str, Any]:
    """The WorldPatch in a form strict OpenAI-compatible backends accept: every object closed
    with all properties required, ids as enums of this world's ids, ``enum`` instead of
    ``const``, no ``minLength`` (checked locally); strings bounded when the source asks."""
    ids = sorted(run.world.entities)
    # memory belongs to agents: the schema only offers agent ids for append_entity_memory
    agent_ids = sorted(e["id"] for e in run.world.agents())
    labels = sorted(run.world.environments)
    entity_op = {
        "set_entity_state": "state",
        "append_entity_memory": "content",
    }
    variants = []
    for op in PATCH_OPS:
        if op == "set_environment_content":
            props = {
                "op": {"type": "string", "enum": [op]},
                "environment_label": {"type": "string", "enum": labels},
                "content": _text(max_len),
            }
        else:
            props = {
                "op": {"type": "string", "enum": [op]},
                "entity_id": {
                    "type": "string",
                    "enum": agent_ids if op == "append_entity_memory" else ids,
                },
                entity_op[op]: _text(max_len),
            }
        variants.append(
            {
                "type": "object",
                "additionalProperties": False,
                "required": list(props),
                "properties": props,
            }
        )
    effects: dict[str, Any] = {"type": "array", "items": {"anyOf": variants}}
    if max_len:
        effects["maxItems"] = 4  # with bounded strings, a reply cannot outrun max_tokens
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["narration", "effects"],
        "properties": {"narration": _text(max_len), "effects": effects},
    }


def tool_loop_schema(
    run: SubjectRun, tools: list[dict[str, Any]], calls_left: bool, max_len: int | None
) -> dict[str, Any]:
    patch = model_patch_schema(run, max_len)
    if not tools or not calls_left:
        return {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "patch"],
            "properties": {"kind": {"type": "string", "enum": ["final_patch"]}, "patch": patch},
        }
    defs: dict[str, Any] = {}
    calls = [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "arguments"],
            "properties": {
                "name": {"type": "string", "enum": [tool["name"]]},
                "arguments": embedded_schema(
                    sources.schema_content(tool["arguments_schema_ref"]["hash"]),
                    f"tool_{index}",
                    defs,
                ),
            },
        }
        for index, tool in enumerate(tools)
    ]
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["kind", "tool_call", "patch"],
        "properties": {
            "kind": {"type": "string", "enum": ["tool_call", "final_patch"]},
            "tool_call": {"anyOf": [{"type": "null"}, *calls]},
            "patch": {"anyOf": [{"type": "null"}, patch]},
        },
    }
    if defs:
        schema["$defs"] = defs
    return schema


def embedded_schema(schema: Any, key: str, defs: dict[str, Any]) -> Any:
    """A stored schema placed inside a larger document: its references are fragments of its own
    root (put rules allow nothing else), so the whole schema moves to ``$defs/<key>`` of the new
    root, its ``#/…`` references are rewritten to point there, and the place it was embedded
    refers to it. A schema without references is embedded as it is."""
    if '"$ref"' not in json.dumps(schema) and '"$dynamicRef"' not in json.dumps(schema):
        return schema
    prefix = f"#/$defs/{key}"

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rewrite(v) for k, v in node.items() if k != "$schema"}
            for keyword in ("$ref", "$dynamicRef"):
                ref = node.get(keyword)
                if isinstance(ref, str) and ref.startswith("#"):
                    out[keyword] = prefix + ref[1:] if ref.startswith("#/") or ref == "#" else ref
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    defs[key] = rewrite(schema)
    return {"$ref": prefix}


# --- judging a tool-loop generation ----------------------------------------------------------


def parse_tool_loop_output(text: str) -> dict[str, Any]:
    """ToolLoopOutput: {"kind": "tool_call", "tool_call": {...}} | {"kind": "final_patch", "patch": …}
    (the other member may be present as null, as strict schemas require)."""
    try:
        value = loads_strict(text)
    except ValueError as exc:
        raise ModelContentRejected(
            f"Your response is not valid JSON ({exc}). Return only one JSON object.",
            parse_error=str(exc),
        ) from None
    try:
        # JSON that parses but cannot be stored or hashed (NUL, lone surrogates, 1e400) is the
        # model's mistake like any other: the retry lane tells it where.
        check_storable(value)
    except UnstorableValue as exc:
        raise ModelContentRejected(
            f"{exc.pointer or '(root)'}: {exc.problem}. Use plain text.", parse_error=str(exc)
        ) from None
    if not isinstance(value, dict):
        raise ModelContentRejected("(root): the response must be a JSON object.")
    extra = sorted(set(value) - {"kind", "tool_call", "patch"})
    if extra:
        raise ModelContentRejected(f"/{extra[0]}: unknown field; allowed: kind, tool_call, patch.")
    kind = value.get("kind")
    if kind == "tool_call":
        call = value.get("tool_call")
        if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
            raise ModelContentRejected(
                '/tool_call: must be {"name": <tool name>, "arguments": {…}} when kind is "tool_call".'
            )
        if not isinstance(call["name"], str) or not isinstance(call["arguments"], dict):
            raise ModelContentRejected("/tool_call: name must be a string and arguments an object.")
        return value
    if kind == "final_patch":
        if not isinstance(value.get("patch"), dict):
            raise ModelContentRejected(
                '/patch: must be the WorldPatch object when kind is "final_patch".'
            )
        return value
    raise ModelContentRejected(f'/kind: must be "tool_call" or "final_patch", got {kind!r}.')


def _reject(
    run: SubjectRun,
    node: Mapping[str, Any],
    gen: Generation,
    exc: ModelContentRejected,
    attempt_no: int,
) -> None:

    # The verdict itself was written with the finished trace rows (see sources.Judgement).
    run.events.append(
        StagedEvent(
            "generation_rejected",
            {
                "generation_attempt": attempt_no,
                "rejection": exc.complaint,
                "raw_response": gen.text,
            },
            subject_id=run.subject_id,
            node_id=node["id"],
            workflow_hash=run.workflow_hash,
            invocation_id=gen.invocation.pk,
            llm_call_id=gen.call.pk,
        )
    )


def _rejected(exc: ModelContentRejected) -> Judgement:
    return Judgement(
        output_kind=exc.output_kind,
        parse_error=exc.parse_error,
        validation_errors=[] if exc.parse_error else [exc.complaint],
        rejection=exc,
    )


def _judge_text(text: str) -> Judgement:
    stripped = text.strip()
    if not stripped:
        return _rejected(
            ModelContentRejected("the response was empty; one or more sentences are required.")
        )
    problem = text_problem(stripped)
    if problem:
        return _rejected(ModelContentRejected(f"the response {problem}; write plain text."))
    return Judgement(output_kind="text", artifacts={"text": stripped}, output=stripped)


def _tool_loop_judge(
    node: Mapping[str, Any], run: SubjectRun, by_name: Mapping[str, Any], calls_left: bool
) -> sources.Judge:
    def judge(text: str) -> Judgement:
        try:
            output = parse_tool_loop_output(text)
            if output["kind"] == "tool_call":
                call = output["tool_call"]
                tool = by_name.get(call["name"])
                if tool is None:
                    raise ModelContentRejected(
                        f"/tool_call/name: unknown tool {call['name']!r}. Available tools: "
                        f"{', '.join(sorted(by_name)) or 'none (return a final_patch)'}.",
                    )
                if not calls_left:
                    raise ModelContentRejected(
                        f"/kind: no tool calls are left (max_tool_calls {node['max_tool_calls']}); "
                        'return {"kind": "final_patch", "patch": …} now.'
                    )
                errors = sources.schema_errors(
                    sources.schema_validator(tool["arguments_schema_ref"]["hash"]),
                    call["arguments"],
                )
                if errors:
                    raise ModelContentRejected(
                        f"/tool_call/arguments{errors[0]['pointer']}: {errors[0]['message']} "
                        f"(arguments of {tool['name']} must match its JSON Schema)."
                    )
                return Judgement(
                    output_kind="tool_call", artifacts={"tool_loop_output": output}, output=output
                )
            try:
                validate_patch(output["patch"], run.world)
            except PatchRejected as exc:
                raise ModelContentRejected(f"patch.{exc.message}") from None
        except ModelContentRejected as rejection:
            return _rejected(rejection)
        return Judgement(
            output_kind="final_patch",
            artifacts={"tool_loop_output": output, "accepted_world_patch": output["patch"]},
            output=output,
        )

    return judge


def _call_ctx(run: SubjectRun, node: Mapping[str, Any], **extra: Any) -> CallContext:
    return run.call_context(node_id=node["id"], **extra)


def _budget_exhausted(
    node: Mapping[str, Any], run: SubjectRun, failures: int, complaint: str
) -> Exception:

    return AttemptFailure(
        "model_output",
        f"node {node['id']!r}: {failures} generation(s) rejected (budget {node['max_generation_attempts']}); "
        f"last rejection: {complaint}",
        subject_id=run.subject_id,
        node_id=node["id"],
    )


def _source_failure(node: Mapping[str, Any], run: SubjectRun, exc: SourceFailure) -> Exception:
    return AttemptFailure(
        failure_step(exc, "source"),
        f"node {node['id']!r}: {exc.failure_class}: {exc.message}",
        subject_id=run.subject_id,
        node_id=node["id"],
        invocation_id=exc.invocation_id,
    )


def run_llm_text(node: Mapping[str, Any], run: SubjectRun) -> str:
    messages = render_messages(node["prompt_template"], placeholder_values(run, []))
    failures = 0
    attempt_no = 0
    while True:
        attempt_no += 1
        try:
            gen = sources.invoke_llm(
                source_hash=node["llm_source_ref"]["hash"],
                messages=messages,
                ctx=_call_ctx(run, node, generation_attempt=attempt_no),
                response_schema=None,
                judge=_judge_text,
            )
        except SourceFailure as exc:
            raise _source_failure(node, run, exc) from None
        judgement = gen.judgement
        assert judgement is not None
        if judgement.rejection is None:
            return judgement.output
        rejection = judgement.rejection
        _reject(run, node, gen, rejection, attempt_no)
        failures += 1
        if failures >= node["max_generation_attempts"]:
            raise _budget_exhausted(node, run, failures, rejection.complaint)
        messages = [
            *messages,
            {"role": "assistant", "content": gen.text},
            {"role": "user", "content": TEXT_CORRECTIVE.format(complaint=rejection.complaint)},
        ]


def run_llm_tool_loop(node: Mapping[str, Any], run: SubjectRun) -> dict[str, Any]:

    tools = list(node["available_tools"])
    by_name = {t["name"]: t for t in tools}
    source = sources.source_content(node["llm_source_ref"]["hash"])
    max_len = source["interface"].get("max_string_length")
    messages = render_messages(node["prompt_template"], placeholder_values(run, tools))
    failures = 0
    attempt_no = 0
    tool_calls = 0
    while True:
        attempt_no += 1
        calls_left = tool_calls < node["max_tool_calls"]
        try:
            gen = sources.invoke_llm(
                source_hash=node["llm_source_ref"]["hash"],
                messages=messages,
                ctx=_call_ctx(run, node, generation_attempt=attempt_no, tool_loop_round=tool_calls),
                response_schema=tool_loop_schema(run, tools, calls_left, max_len),
                schema_name="tool_loop_output",
                output_schema_hash=node["final_schema_ref"]["hash"],
                judge=_tool_loop_judge(node, run, by_name, calls_left),
            )
        except SourceFailure as exc:
            raise _source_failure(node, run, exc) from None
        judgement = gen.judgement
        assert judgement is not None
        if judgement.rejection is not None:
            rejection = judgement.rejection
            _reject(run, node, gen, rejection, attempt_no)
            failures += 1
            if failures >= node["max_generation_attempts"]:
                raise _budget_exhausted(node, run, failures, rejection.complaint) from None
            messages = [
                *messages,
                {"role": "assistant", "content": gen.text},
                {"role": "user", "content": CORRECTIVE.format(complaint=rejection.complaint)},
            ]
            continue
        output = judgement.output
        if output["kind"] == "final_patch":
            run.last_llm_call_id = gen.call.pk
            run.last_invocation_id = gen.invocation.pk
            return output["patch"]
        # A valid, permitted tool call: run that tool's source, feed its result back.
        call = output["tool_call"]
        tool = by_name[call["name"]]
        try:
            result = sources.invoke_http_json(
                source_hash=tool["source_ref"]["hash"],
                body=call["arguments"],
                ctx=_call_ctx(
                    run,
                    node,
                    tool_name=tool["name"],
                    parent_id=gen.invocation.pk,
                    tool_loop_round=tool_calls,
                ),
                kind="model_elected_tool",
                result_schema_hash=tool.get("result_schema_ref", {}).get("hash", ""),
                input_schema_hash=tool["arguments_schema_ref"]["hash"],
            )
        except SourceFailure as exc:
            raise _source_failure(node, run, exc) from None
        run.events.append(
            StagedEvent(
                "tool_invoked",
                {"tool": tool["name"], "arguments": call["arguments"], "result": result.value},
                subject_id=run.subject_id,
                node_id=node["id"],
                workflow_hash=run.workflow_hash,
                invocation_id=result.invocation_id,
                llm_call_id=gen.call.pk,
            )
        )
        tool_calls += 1
        messages = [
            *messages,
            {"role": "assistant", "content": gen.text},
            {
                "role": "user",
                "content": f"Result of {tool['name']}:\n{json.dumps(result.value, sort_keys=True)}\n\n"
                "Continue: call another tool or return the final patch.",
            },
        ]
