"""A tool call is the REST request it stands for (surfaces/mcp/calls.py): arguments placed in the
path, the query and the body, and the endpoint's answer; what no endpoint answers (an argument of
the wrong type for a path, a failure outside the view) still gets the API's error envelope."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from rest_framework.test import APIClient

from scenarios_app.services import metric_put, scenario_assemble
from surfaces.mcp import server
from surfaces.mcp.calls import Caller, call
from surfaces.mcp.catalog import api_tools
from tests.support.worlds import fixture_body
from worlds_app.experiment_results import experiment_results
from worlds_app.services.experiments import experiment_create


def _call(name: str, user: User, **arguments: Any) -> tuple[int, dict[str, Any]]:
    answer = call(api_tools()[name], arguments, Caller(user=user, token=None))
    return answer.status, answer.body


@pytest.mark.django_db
def test_query_arguments_are_sent_as_a_client_writes_them(
    operator_user: User, operator_client: APIClient
) -> None:
    status, body = _call("scenario_list", operator_user, has_name=True, limit=3)
    assert (status, body["limit"], body["count"]) == (200, 3, 0)
    status, body = _call("scenario_list", operator_user, has_name="maybe")
    rest = operator_client.get("/api/scenarios/?has_name=maybe")
    assert status == rest.status_code == 400
    assert body == rest.json()


@pytest.mark.django_db
def test_path_arguments_are_checked_before_any_request(operator_user: User) -> None:
    status, body = _call("turn_get", operator_user, slug="w", number="1")
    assert status == 400
    assert body["error"]["code"] == "invalid_input"
    assert body["error"]["details"]["field"] == "number"
    status, body = _call("world_get", operator_user)
    assert (status, body["error"]["details"]["field"]) == (400, "slug")
    # A tool without a body refuses what it does not take, as a body would.
    status, body = _call("world_get", operator_user, slug="w", limit=2)
    assert status == 400
    assert body["error"]["message"].startswith("limit: unknown field; allowed fields are slug")


@pytest.mark.django_db
def test_a_reader_is_refused_by_the_view_itself(reader_user: User) -> None:
    status, body = _call("world_delete", reader_user, slug="w")
    assert status == 403
    assert body["error"]["code"] == "permission_denied"
    assert not server.allowed(api_tools()["world_delete"], reader_user)
    assert server.allowed(api_tools()["world_get"], reader_user)


def test_a_failure_outside_the_view_is_the_api_error(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = api_tools()["world_list"]
    caller = Caller(user=None, token=None)

    def database_down(*args: Any) -> Any:
        raise OperationalError("connection to server at /secret/socket failed")

    monkeypatch.setattr(server, "call", database_down)
    answer = server._call_in_thread(tool, {}, caller)
    assert answer.status == 503
    assert answer.body["error"]["code"] == "unavailable"
    assert "secret" not in str(answer.body)

    def bug(*args: Any) -> Any:
        raise RuntimeError("internal detail /home/ops")

    monkeypatch.setattr(server, "call", bug)
    answer = server._call_in_thread(tool, {}, caller)
    assert answer.status == 500
    assert answer.body["error"]["code"] == "internal_error"
    assert "/home/ops" not in str(answer.body)


@pytest.mark.django_db
def test_the_results_tool_answers_the_results_as_the_api_serializes_them(
    operator_user: User, operator_client: APIClient
) -> None:
    scenario = scenario_assemble(data=fixture_body("ant_on_plate_rules"))["scenario_hash"]
    metric = metric_put(
        content={
            "version": 1,
            "label": "turn_number",
            "kind": "expression",
            "aggregate": "mean",
            "expression": "turn",
        }
    )["hash"]
    experiment_create(
        data={
            "slug": "tool",
            "arms": [
                {"label": "a", "scenario_ref": {"hash": scenario}},
                {"label": "b", "scenario_ref": {"hash": scenario}},
            ],
            "replicates": 2,
            "turns": 1,
            "metrics": [{"hash": metric}],
        }
    )
    status, body = _call("experiment_results", operator_user, slug="tool")
    rest = operator_client.get("/api/experiments/tool/results/")
    assert status == rest.status_code == 200
    assert body == rest.json()
    # the typed results, field for field (nothing measured yet: every number null)
    assert body == json.loads(json.dumps(asdict(experiment_results(slug="tool"))))
    (result,) = body["results"]
    assert [a["arm"] for a in result["arms"]] == ["a", "b"]
    assert result["effects"][0]["p_value"] is None
