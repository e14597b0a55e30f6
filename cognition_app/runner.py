"""Runs one subject's workflow nodes and returns its final WorldPatch.

Node executors are looked up by node type: the rule policy (pure), and the LLM nodes, which
call sources through the traced source layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from chukwa_core.kernel.state import WorldState
from chukwa_core.rule_policy import RuleContext, ToolResultMissing, evaluate_rule_policy
from chukwa_core.workflow_validation import PATCH_NODE_TYPES
from cognition_app import sources
from cognition_app.llm_nodes import run_llm_text, run_llm_tool_loop
from cognition_app.sources import CallContext, SourceFailure


class AttemptFailure(Exception):
    """Fails the whole attempt before commit: nothing of the turn is kept but its traces."""

    def __init__(
        self,
        step: str,
        message: str,
        *,
        subject_id: str = "",
        node_id: str = "",
        invocation_id: UUID | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.message = message
        self.subject_id = subject_id
        self.node_id = node_id
        self.invocation_id = invocation_id


@dataclass
class StagedEvent:
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    subject_id: str = ""
    node_id: str = ""
    workflow_hash: str = ""
    patch_seq: int | None = None
    content_hash: str = ""
    invocation_id: UUID | None = None
    llm_call_id: UUID | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class TurnContext:
    world_slug: str
    turn: int
    attempted_turn: int
    simulation_time: str


@dataclass
class SubjectRun:
    subject_id: str
    workflow: Mapping[str, Any]
    workflow_hash: str
    world: WorldState
    ctx: TurnContext
    events: list[StagedEvent]
    outputs: dict[str, Any] = field(default_factory=dict)
    # the ambient results this subject may see (the tree under /ambient)
    ambient: dict[str, Any] = field(default_factory=dict)
    # builds the trace context of a source call made while this subject runs
    make_call_context: Callable[..., CallContext] | None = None
    # the generation whose patch was accepted (links transitions to the LLM call)
    last_invocation_id: UUID | None = None
    last_llm_call_id: UUID | None = None

    def call_context(self, **fields: Any) -> CallContext:
        if self.make_call_context is None:
            raise AttemptFailure(
                "source", "this run has no source layer context", subject_id=self.subject_id
            )
        return self.make_call_context(
            workflow_hash=self.workflow_hash, subject_id=self.subject_id, **fields
        )


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
                "source",
                f"node {node['id']!r}: tool {tool['name']}: {exc.failure_class}: {exc.message}",
                subject_id=run.subject_id,
                node_id=node["id"],
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


NODE_EXECUTORS: dict[str, NodeExecutor] = {
    "rule_policy": _run_rule_policy,
    "llm_text": run_llm_text,
    "llm_tool_loop": run_llm_tool_loop,
}


def run_subject_workflow(run: SubjectRun) -> tuple[dict[str, Any], str]:
    """Run every node in order; return (the patch named by ``apply.from``, its node id)."""
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
