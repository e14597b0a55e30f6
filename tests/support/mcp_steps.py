"""An MCP client session authoring, forking and running a scenario, the same over every transport
(tests/surfaces/mcp/test_mcp_*.py). Only the SDK's own client is used."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from mcp.client.session import ClientSession
from mcp_types import CallToolResult

from scenarios_app.fixture_files import load_fixture

# The tools the specification names (the index operations come on top where the API has them).
SPEC_TOOLS = {
    *(
        f"{kind}_{op}"
        for kind in (
            "json_schemas",
            "response_sources",
            "cognition_workflows",
            "cognition_profiles",
            "environments",
            "entities",
        )
        for op in ("put", "get", "list", "uses")
    ),
    "scenario_assemble",
    "scenario_fork",
    "scenario_get",
    "scenario_list",
    "scenario_lineage",
    "scenario_name_get",
    "scenario_name_set",
    "scenario_name_unset",
    "world_create",
    "world_get",
    "world_list",
    "world_delete",
    "turn_enqueue",
    "turn_get",
    "world_diff",
    "attempt_get",
    "source_invocation_get",
    "llm_call_get",
    "world_patch_schema_get",
}
OPERATOR_ONLY_TOOLS = {
    name
    for name in SPEC_TOOLS
    if name.endswith("_put")
    or name
    in {
        "scenario_assemble",
        "scenario_fork",
        "scenario_name_set",
        "scenario_name_unset",
        "world_create",
        "world_delete",
        "turn_enqueue",
    }
}


class ToolError(AssertionError):
    def __init__(self, name: str, body: dict[str, Any]) -> None:
        super().__init__(f"{name} failed: {json.dumps(body)}")
        self.body = body


def body_of(result: CallToolResult) -> dict[str, Any]:
    """The JSON body a tool answered: its structured content, which its text repeats."""
    text = result.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == result.structured_content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def ok(session: ClientSession, tool: str, /, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    body = body_of(result)
    if result.is_error:
        raise ToolError(tool, body)
    return body


async def error(session: ClientSession, tool: str, /, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    body = body_of(result)
    assert result.is_error, f"{tool} succeeded: {body}"
    return body


@dataclass
class Authored:
    scenario: str
    fork: str
    workflow: str
    forked_workflow: str
    counts_before_fork: dict[str, int] = field(default_factory=dict)
    counts_after_fork: dict[str, int] = field(default_factory=dict)
    fork_answer: dict[str, Any] = field(default_factory=dict)


async def _counts(session: ClientSession) -> dict[str, int]:
    return {
        tool: (await ok(session, tool, limit=1))["count"]
        for tool in ("cognition_workflows_list", "cognition_profiles_list", "scenario_list")
    }


async def author_and_fork(session: ClientSession, *, slug: str) -> Authored:
    """Author the rule-policy ant scenario piece by piece (every component kind through its own
    put tool), assemble it by hashes, and fork it with one byte of its workflow changed."""
    fixture = load_fixture("ant_on_plate_rules")
    patch_schema = await ok(session, "world_patch_schema_get")
    assert len(patch_schema["hash"]) == 64
    stored = await ok(
        session,
        "json_schemas_put",
        content={"type": "object", "properties": {"note": {"type": "string"}}},
    )
    assert len(stored["hash"]) == 64
    source = await ok(
        session,
        "response_sources_put",
        content={
            "version": 1,
            "label": "toy_lamp",
            "interface": {
                "name": "http_json",
                "method": "POST",
                "url_env": "CHUKWA_TOY_LAMP_URL",
                "path": "/lamp",
                "timeout_ms": 5000,
            },
        },
    )
    assert (
        source["hash"] == (await ok(session, "response_sources_get", hash=source["hash"]))["hash"]
    )

    workflow = fixture["cognition_profiles"]["ant"]["inline"]["workflow"]["inline"]
    put_workflow = await ok(session, "cognition_workflows_put", content=workflow)
    profile = await ok(
        session, "cognition_profiles_put", content={"workflow": {"hash": put_workflow["hash"]}}
    )
    assert profile["workflow_hash"] == put_workflow["hash"]
    environment = await ok(
        session, "environments_put", content=fixture["environments"]["kitchen_plate"]["inline"]
    )
    entities = [
        (await ok(session, "entities_put", content=entity["inline"]))["hash"]
        for entity in fixture["entities"]
    ]
    assembled = await ok(
        session,
        "scenario_assemble",
        scenario_slug=slug,
        description=fixture["description"],
        chronon_seconds=fixture["chronon_seconds"],
        cognition_profiles={"ant": {"hash": profile["hash"]}},
        environments={"kitchen_plate": {"hash": environment["hash"]}},
        entities=[{"hash": h} for h in entities],
        note="authored piece by piece over MCP",
    )
    assert assembled["was_new_scenario"] is True
    assert assembled["entities"] == entities
    # The pieces were all stored already: assembling by hashes stores nothing new.
    assert set(assembled["new_components"].values()) == {0}
    uses = await ok(session, "cognition_workflows_uses", hash=put_workflow["hash"])
    assert [s["hash"] for s in uses["scenarios"]] == [assembled["scenario_hash"]]

    changed = copy.deepcopy(workflow)
    narration = changed["nodes"][0]["rules"][0]["narration"]
    changed["nodes"][0]["rules"][0]["narration"] = narration[:-1] + "!"  # one byte
    before = await _counts(session)
    forked = await ok(
        session,
        "scenario_fork",
        primary_parent={"hash": assembled["scenario_hash"]},
        changes={
            "cognition_profile_upserts": {"ant": {"inline": {"workflow": {"inline": changed}}}}
        },
        note="one byte of the eat_crumb narration",
    )
    after = await _counts(session)
    forked_profile = forked["cognition_profiles"]["ant"]
    forked_workflow = (await ok(session, "cognition_profiles_get", hash=forked_profile))[
        "workflow_hash"
    ]
    return Authored(
        scenario=assembled["scenario_hash"],
        fork=forked["scenario_hash"],
        workflow=put_workflow["hash"],
        forked_workflow=forked_workflow,
        counts_before_fork=before,
        counts_after_fork=after,
        fork_answer=forked,
    )


def assert_one_byte_fork(authored: Authored) -> None:
    """Exactly one new workflow, one new profile and one new scenario; the rest reused."""
    assert authored.fork != authored.scenario
    assert authored.forked_workflow != authored.workflow
    assert authored.fork_answer["was_new_scenario"] is True
    assert authored.fork_answer["new_components"] == {
        "json_schemas": 0,
        "response_sources": 0,
        "cognition_workflows": 1,
        "cognition_profiles": 1,
        "environments": 0,
        "entities": 0,
    }
    assert {
        tool: authored.counts_after_fork[tool] - authored.counts_before_fork[tool]
        for tool in authored.counts_before_fork
    } == {"cognition_workflows_list": 1, "cognition_profiles_list": 1, "scenario_list": 1}


async def create_world_and_queue(
    session: ClientSession, *, slug: str, scenario: str
) -> tuple[dict[str, Any], str]:
    """Create a world from ``scenario`` and queue one turn; returns the world and attempt id."""
    world = await ok(session, "world_create", slug=slug, scenario_ref={"hash": scenario})
    assert world["current_turn"] == 0
    assert world["scenario_hash"] == scenario
    queued = await ok(session, "turn_enqueue", slug=slug)
    (attempt_id,) = queued["attempt_ids"]
    return world, attempt_id
