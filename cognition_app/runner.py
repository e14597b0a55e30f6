"""Runs one subject's workflow nodes and returns its final WorldPatch.

Node executors are looked up by node type: the rule policy (pure), and the LLM nodes, which
call sources through the traced source layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chukwa_core import log_context
from chukwa_core.node_types import NODE_TYPES, PATCH_NODE_TYPES
from chukwa_core.rule_policy import RuleContext, ToolResultMissing, evaluate_rule_policy
from cognition_app import sources
from cognition_app.llm_nodes import run_llm_text, run_llm_tool_loop
from cognition_app.sources import SourceFailure
from cognition_app.subject_run import AttemptFailure, StagedEvent, SubjectRun, failure_step

NodeExecutor = Callable[[Mapping[str, Any], SubjectRun], Any]


def _rule_tool_caller(
    node: Mapping[str, Any], run: SubjectRun
) -> Callable[[Mapping[str, Any], dict[str, Any]], Any]:
    """A rule's planned tool call goes through the same source layer, traced like a
    model-elected call; its arguments must match the tool's schema (an authoring error if not)."""

    def call(tool: Mapping[str, Any], arguments: dict[str, Any]) -> Any:
        errors = sources.schema_errors(
            sources.schema_validator(tool["arguments_schema_ref"]["hash"]), arguments
        )
        if errors:
            raise AttemptFailure(
                "rule_policy",
                f"node {node['id']!r}: arguments for {tool['name']} do not match its schema: "
                f"{errors[0]['pointer'] or '(root)'}: {errors[0]['message']}",
                subject_id=run.subject_id,
                node_id=node["id"],
            )
        try:
            result = sources.invoke_http_json(
                source_hash=tool["source_ref"]["hash"],
                body=arguments,
                ctx=run.call_context(node_id=node["id"], tool_name=tool["name"]),
                kind="model_elected_tool",
                result_schema_hash=tool.get("result_schema_ref", {}).get("hash", ""),
                input_schema_hash=tool["arguments_schema_ref"]["hash"],
            )
        except SourceFailure as exc:
            raise AttemptFailure(
                failure_step(exc, "source"),
                f"node {node['id']!r}: tool {tool['name']}: {exc.failure_class}: {exc.message}",
                subject_id=run.subject_id,
                node_id=node["id"],
                invocation_id=exc.invocation_id,
            ) from None
        run.events.append(
            StagedEvent(
                "tool_invoked",
                {
                    "tool": tool["name"],
                    "arguments": arguments,
                    "result": result.value,
                    "by": "rule_policy",
                },
                subject_id=run.subject_id,
                node_id=node["id"],
                workflow_hash=run.workflow_hash,
                invocation_id=result.invocation_id,
            )
        )
        return result.value

    return call


def _run_rule_policy(node: Mapping[str, Any], run: SubjectRun) -> dict[str, Any]:
    try:
        outcome = evaluate_rule_policy(
            node,
            run.world,
            run.subject_id,
            RuleContext(
                world_slug=run.ctx.world_slug,
                turn=run.ctx.turn,
                attempted_turn=run.ctx.attempted_turn,
                simulation_time=run.ctx.simulation_time,
                ambient=run.ambient,
                world_seed=run.ctx.world_seed,
            ),
            call_tool=_rule_tool_caller(node, run),
        )
    except ToolResultMissing as exc:
        raise AttemptFailure(
            "rule_policy",
            f"node {node['id']!r}: {exc}",
            subject_id=run.subject_id,
            node_id=node["id"],
        ) from None
    run.events.append(
        StagedEvent(
            "inner_monologue",
            outcome.monologue,
            subject_id=run.subject_id,
            node_id=node["id"],
            workflow_hash=run.workflow_hash,
            content_hash=outcome.content_hash,
        )
    )
    return outcome.patch


# One executor for each type of the core's node registry, and no other.
NODE_EXECUTORS: dict[str, NodeExecutor] = {
    "rule_policy": _run_rule_policy,
    "llm_text": run_llm_text,
    "llm_tool_loop": run_llm_tool_loop,
}
if set(NODE_EXECUTORS) != set(NODE_TYPES):
    raise ImportError(
        f"node executors {sorted(NODE_EXECUTORS)} do not match the node types {sorted(NODE_TYPES)}"
    )


def run_subject_workflow(run: SubjectRun) -> tuple[dict[str, Any], str]:
    """Run every node in order; return (the patch named by ``apply.from``, its node id)."""
    with log_context.bound(subject=run.subject_id):
        return _run_nodes(run)


def _run_nodes(run: SubjectRun) -> tuple[dict[str, Any], str]:
    node_types: dict[str, str] = {}
    for node in run.workflow["nodes"]:
        executor = NODE_EXECUTORS.get(node["type"])
        if executor is None:
            raise AttemptFailure(
                "node",
                f"node {node['id']!r} has type {node['type']!r}, which this kernel cannot run",
                subject_id=run.subject_id,
                node_id=node["id"],
            )
        output = executor(node, run)
        run.outputs[node["id"]] = output
        node_types[node["id"]] = node["type"]
        if node["type"] not in PATCH_NODE_TYPES:
            run.events.append(
                StagedEvent(
                    "node_output",
                    {"output": output},
                    subject_id=run.subject_id,
                    node_id=node["id"],
                    workflow_hash=run.workflow_hash,
                )
            )
    source = run.workflow["apply"]["from"]
    node_id = source.removesuffix(".final")
    if node_types.get(node_id) not in PATCH_NODE_TYPES:
        raise AttemptFailure(
            "apply",
            f"apply.from {source!r} does not name a node that produced a WorldPatch",
            subject_id=run.subject_id,
        )
    return run.outputs[node_id], node_id
