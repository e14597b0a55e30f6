"""Schema fuzzing: Schemathesis generates requests for every operation of the project's own
OpenAPI document (/api/schema/), valid ones and deliberately invalid ones, plus a fixed list of
hostile values for every path and query parameter, sends them through
the WSGI application as an operator, and asserts that none answers with a server error and
that every answer is one the document describes: a documented status code, a documented
content type and a body valid against the response schema (the document describes
every request and response exactly).

Bounded and deterministic: a fixed number of examples per operation and generation mode,
derandomized, no example database. ``CHUKWA_FUZZ_EXAMPLES`` raises the count for a longer run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup

from chukwa_site.wsgi import application
from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.services import model_price_add
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app.models import Annotation, Turn
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

EXAMPLES = int(os.environ.get("CHUKWA_FUZZ_EXAMPLES", "6"))
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]

# Values generated strings rarely hit but real clients send: NUL bytes, over-long strings,
# integers past int4/int8, near-miss ids and instants at or past the calendar's edges. Each is
# sent as every path parameter of every operation, and as every query parameter.
NASTY: tuple[str, ...] = (
    "\x00",
    "a\x00b",
    "x" * 5000,
    "9" * 30,
    "-1",
    "0",
    "2147483648",
    "9223372036854775808",
    "not-a-uuid",
    "00000000-0000-0000-0000-00000000000g",
    "..",
    "%",
    "é🐜",
    " ",
    "A" * 64,
    "0" * 64,
    "{}",
    "null",
    "true",
    "2030-01-01T00:00:00+24:00",
    "2016-12-31T23:59:60Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00+01:00",
)


@dataclass
class FuzzReport:
    operations: int = 0
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    # Answers that do not match the document (status, content type or body schema).
    violations: list[str] = field(default_factory=list)
    # (operation, mode) pairs for which no case could be generated, e.g. negative cases for an
    # operation whose only parameter is an unconstrained string.
    ungenerable: list[str] = field(default_factory=list)


@pytest.fixture
def same_connection_requests() -> Iterator[None]:
    """The WSGI handler closes "old" connections around each request; inside the test's
    transaction that would close it. Django's own test client detaches the same handlers."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _fuzz_operation(operation: Any, mode: GenerationMode, token: str, report: FuzzReport) -> None:
    headers = {"Authorization": f"Token {token}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        _check(case, headers, report)

    try:
        run()
    except Unsatisfiable:
        report.ungenerable.append(f"{operation.label} ({mode.value})")


def _check(case: Any, headers: dict[str, str], report: FuzzReport) -> None:
    response = case.call(headers=headers)
    report.requests += 1
    where = f"{case.method} {case.formatted_path} {case.query} -> {response.status_code}"
    try:
        case.validate_response(response, checks=[not_a_server_error], headers=headers)
    except FailureGroup as exc:
        report.failures.append(f"{where}: {exc}")
    try:
        case.validate_response(response, checks=CONFORMANCE, headers=headers)
    except FailureGroup as exc:
        report.violations.append(f"{where}: {exc}")


def _nasty_parameters(operation: Any, token: str, report: FuzzReport) -> None:
    headers = {"Authorization": f"Token {token}"}
    path_names = [p.name for p in operation.path_parameters]
    benign = {name: "plate" for name in path_names}
    for value in NASTY if path_names else ():
        _check(operation.Case(path_parameters=dict.fromkeys(path_names, value)), headers, report)
    for query_name in [p.name for p in operation.query]:
        for value in NASTY:
            case = operation.Case(path_parameters=benign, query={query_name: value})
            _check(case, headers, report)


def _known_rows(
    operations: dict[str, Any], attempt_id: str, token: str, report: FuzzReport
) -> None:
    """Reads of rows that exist, whose answers random ids rarely reach, checked the same way."""
    headers = {"Authorization": f"Token {token}"}
    cases = [
        ("GET /api/attempts/{attempt_id}/", {"attempt_id": attempt_id}, {}),
        ("GET /api/worlds/{slug}/turns/{number}/", {"slug": "plate", "number": 1}, {}),
        ("GET /api/worlds/{slug}/diff/", {"slug": "plate"}, {"from": 0, "to": 1}),
        ("GET /api/worlds/{slug}/", {"slug": "plate"}, {}),
        ("GET /api/worlds/{slug}/budget/", {"slug": "plate"}, {}),
        ("GET /api/model-prices/", {}, {}),
        ("GET /api/scenarios/{ref}/", {"ref": "ant_on_plate_rules"}, {}),
        ("GET /api/scenarios/{ref}/lineage/", {"ref": "ant_on_plate_rules"}, {}),
        ("GET /api/scenario-names/{name}/", {"name": "ant_on_plate_rules"}, {}),
        ("GET /api/worlds/{slug}/compare/{other}/", {"slug": "plate", "other": "plate"}, {}),
        ("GET /api/annotations/", {}, {"world": "plate", "turn": 1}),
    ]
    annotation = Annotation.objects.create(
        target_kind="turn",
        turn=Turn.objects.get(world__slug="plate", number=1),
        name="fuzz",
        value_kind="number",
        value_number=1.5,
        author=Token.objects.get(key=token).user,
    )
    cases.append(
        ("GET /api/annotations/{annotation_id}/", {"annotation_id": str(annotation.pk)}, {})
    )
    invocations = SourceInvocation.objects.filter(attempt_id=attempt_id)
    for invocation_id in invocations.values_list("id", flat=True):
        cases.append(
            (
                "GET /api/source-invocations/{invocation_id}/",
                {"invocation_id": str(invocation_id)},
                {},
            )
        )
    for call_id in LlmCall.objects.filter(invocation__in=invocations).values_list("id", flat=True):
        cases.append(("GET /api/llm-calls/{call_id}/", {"call_id": str(call_id)}, {}))
    for label, path_parameters, query in cases:
        case = operations[label].Case(path_parameters=path_parameters, query=query)
        response = case.call(headers=headers)
        assert response.status_code == 200, (label, response.text[:500])
        _check(case, headers, report)


@pytest.mark.django_db
def test_no_operation_answers_with_a_server_error(
    operator_user: User, same_connection_requests: None
) -> None:
    # Some real rows, so generated names and slugs can land on existing things too.
    scenario_assemble(data=load_fixture("ant_on_plate_rules"))
    world_create(
        data={
            "slug": "plate",
            "scenario_ref": {"name": "ant_on_plate_rules"},
            "budget": {"max_tokens_total": 10_000, "max_cost_total": "2.5"},
        }
    )
    model_price_add(
        data={
            "url_env": "CHUKWA_LLM_BASE_URL",
            "model": "gpt-4o-mini",
            "input_per_million": "0.15",
            "output_per_million": "0.6",
            "cached_input_per_million": "0.075",
        }
    )
    # One committed turn (rule policy: no model, no outside source), so the reads of attempts,
    # turns and diffs answer with real rows too.
    (attempt_id,) = turn_attempt_enqueue(slug="plate")["attempt_ids"]
    assert turn_attempt_run(attempt_id=attempt_id, owner="fuzz") == "committed"
    token = Token.objects.create(user=operator_user).key
    schema = schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", application, headers={"Authorization": f"Token {token}"}
    )
    report = FuzzReport()
    operations = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        operations[operation.label] = operation
        report.operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz_operation(operation, mode, token, report)
        _nasty_parameters(operation, token, report)
    _known_rows(operations, attempt_id, token, report)
    print(
        f"\nschema fuzz: {report.operations} operations, {report.requests} requests, "
        f"{len(report.failures)} server errors, {len(report.violations)} schema violations; "
        f"no cases for {report.ungenerable}"
    )
    assert report.operations >= 20
    assert report.requests >= report.operations * EXAMPLES
    assert report.failures == [], "\n\n".join(report.failures[:5])
    assert report.violations == [], "\n\n".join(report.violations[:5])
