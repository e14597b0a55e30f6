"""What the scenario store's service and selector tests share: row counts, bodies, errors."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps

from chukwa_core.errors import ChukwaError
from scenarios_app import services
from tests.conftest import HTTP_SOURCE, LLM_SOURCE

WorkflowFactory = Callable[..., dict[str, Any]]

DANGLING = hashlib.sha256(b"nothing is stored under this hash").hexdigest()
ARGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["slot"],
    "properties": {"slot": {"type": "string", "maxLength": 8}},
}
RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"enum": ["dispensed", "empty"]}},
}
ZERO_NEW = {
    "json_schemas": 0,
    "response_sources": 0,
    "cognition_workflows": 0,
    "cognition_profiles": 0,
    "environments": 0,
    "entities": 0,
}


def row_counts() -> dict[str, int]:
    """Rows in every table of the scenario store, by model name."""
    return {
        m.__name__: m.objects.count() for m in apps.get_app_config("scenarios_app").get_models()
    }


def row_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Only the tables whose row count changed."""
    return {name: after[name] - before[name] for name in before if after[name] != before[name]}


def canonical(value: Any) -> str:
    """A sort key that ignores dict key order (jsonb does not keep it)."""
    return json.dumps(value, sort_keys=True)


def new_components(**counts: int) -> dict[str, int]:
    return {**ZERO_NEW, **counts}


def agent(
    entity_id: str = "ant",
    *,
    name: str = "Ant",
    environment: str = "room",
    profile: str = "p",
    goal: str = "eat",
) -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": name,
        "state": "hungry",
        "environment": environment,
        "kind": {"agent": {"goal": goal, "memory": "", "cognition_profile": profile}},
    }


def prop(
    entity_id: str = "crumb", *, name: str = "Crumb", environment: str = "room"
) -> dict[str, Any]:
    return {
        "id": entity_id,
        "name": name,
        "state": "a bread crumb",
        "environment": environment,
        "kind": "prop",
    }


def inline_profile(workflow: dict[str, Any]) -> dict[str, Any]:
    return {"inline": {"workflow": {"inline": workflow}}}


def inline_body(make_workflow: WorkflowFactory, **overrides: Any) -> dict[str, Any]:
    """A valid assembly input with every part inline."""
    body: dict[str, Any] = {
        "scenario_slug": "ant_on_plate",
        "description": "An ant on a plate.",
        "chronon_seconds": 60,
        "cognition_profiles": {"p": inline_profile(make_workflow())},
        "environments": {"room": {"inline": "A small white plate under a lamp."}},
        "entities": [{"inline": agent()}, {"inline": prop()}],
    }
    body.update(overrides)
    return body


def expect_error(code: str, status: int, call: Callable[[], object]) -> ChukwaError:
    """The call raises ChukwaError with this code and HTTP status, and writes no row anywhere."""
    before = row_counts()
    with pytest.raises(ChukwaError) as excinfo:
        call()
    assert excinfo.value.code == code, excinfo.value.as_dict()
    assert excinfo.value.status_code == status
    assert row_delta(before, row_counts()) == {}
    return excinfo.value


def tool_workflow(world_patch_hash: str) -> dict[str, Any]:
    """A tool loop that references an http source and two extra schemas, all inline."""
    return {
        "version": 1,
        "execution": "per_subject_ordered",
        "ambient_sources": [],
        "nodes": [
            {
                "id": "act",
                "type": "llm_tool_loop",
                "llm_source_ref": {"inline": LLM_SOURCE},
                "prompt_template": {
                    "messages": [
                        {"role": "system", "content": "You control the acting subject."},
                        {
                            "role": "user",
                            "content": "{{world.projection}}\n\nTools:\n{{tools.available}}",
                        },
                    ]
                },
                "available_tools": [
                    {
                        "name": "buy_candy",
                        "description": "Use only if the subject chooses to buy candy.",
                        "source_ref": {"inline": HTTP_SOURCE},
                        "arguments_schema_ref": {"inline": ARGS_SCHEMA},
                        "result_schema_ref": {"inline": RESULT_SCHEMA},
                    }
                ],
                "max_generation_attempts": 3,
                "max_tool_calls": 1,
                "final_schema_ref": {"hash": world_patch_hash},
            }
        ],
        "apply": {"from": "act.final"},
    }


def fork(parent: services.AssembleResult, **changes: Any) -> services.AssembleResult:
    return services.scenario_fork(
        data={"primary_parent": {"hash": parent["scenario_hash"]}, "changes": changes}
    )
