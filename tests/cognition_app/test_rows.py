"""Rows written as tuples (cognition_app/rows.py): COPY for many rows, multi-row INSERT
statements sent in one round trip; the same values and the same errors as the ORM."""

from __future__ import annotations

import uuid

import pytest
from django.db import DataError, transaction

from cognition_app.rows import RowTable, insert_rows
from cognition_app.sources.tracing import trace_batch
from worlds_app.models import AttemptEvent, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue

pytestmark = pytest.mark.django_db

EVENT_ROWS = RowTable.of(
    AttemptEvent,
    (
        "attempt",
        "seq",
        "kind",
        "subject_id",
        "payload",
        "invocation_id",
        "created_at",
        "node_id",
        "workflow_hash",
        "content_hash",
    ),
)
HOSTILE = 'quotes " and \\ backslashes, tab\t, newline\n, é, 😀, \\N, %s, {}'


@pytest.fixture
def attempt(toy_sources: object) -> TurnAttempt:
    from tests.cognition_app.conftest import create_world

    world: World = create_world("ant_on_plate_rules", "rows")
    attempt_id = turn_attempt_enqueue(slug=world.slug)["attempt_ids"][0]
    return TurnAttempt.objects.get(pk=attempt_id)


def _rows(attempt: TurnAttempt, count: int) -> list[tuple[object, ...]]:
    from django.utils import timezone

    now = timezone.now()
    return [
        (
            attempt.pk,
            i + 1,
            "node_output",
            HOSTILE if i % 2 else "",
            {"text": HOSTILE, "n": i, "list": [None, True, 1.5], "nested": {"k": HOSTILE}},
            uuid.uuid4() if i % 3 else None,
            now,
            "node",
            "",
            "",
        )
        for i in range(count)
    ]


def test_copy_writes_the_values_the_orm_reads_back(attempt: TurnAttempt) -> None:
    rows = _rows(attempt, 250)
    assert insert_rows(EVENT_ROWS, rows) == 250
    stored = list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("attempt_id", "seq", "kind", "subject_id", "payload", "invocation_id")
    )
    assert stored == [row[:6] for row in rows]


def test_statements_write_the_same_in_one_round_trip(attempt: TurnAttempt) -> None:
    rows = _rows(attempt, 7)
    trace_batch(list(EVENT_ROWS.statements(rows)))
    stored = list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("attempt_id", "seq", "kind", "subject_id", "payload", "invocation_id")
    )
    assert stored == [row[:6] for row in rows]


@pytest.mark.parametrize("how", ["copy", "statements"])
def test_a_value_postgresql_refuses_is_a_django_error_and_writes_nothing(
    attempt: TurnAttempt, how: str
) -> None:
    rows = _rows(attempt, 3)
    rows[2] = (*rows[2][:3], "NUL \x00 here", *rows[2][4:])
    with pytest.raises(DataError), transaction.atomic():
        if how == "copy":
            insert_rows(EVENT_ROWS, rows)
        else:
            trace_batch(list(EVENT_ROWS.statements(rows)))
    assert not AttemptEvent.objects.filter(attempt=attempt).exists()


def test_a_row_of_the_wrong_width_is_refused(attempt: TurnAttempt) -> None:
    with pytest.raises(ValueError, match="columns"):
        list(EVENT_ROWS.statements([(attempt.pk, 1)]))


@pytest.mark.parametrize("holds", [True, False])
def test_a_guarded_insert_writes_the_same_rows_only_while_its_condition_holds(
    attempt: TurnAttempt, holds: bool
) -> None:
    rows = _rows(attempt, 5)
    condition = ("EXISTS (SELECT 1 FROM worlds_app_turnattempt WHERE id = %s)", [attempt.pk])
    if not holds:
        condition = ("NOT " + condition[0], condition[1])
    statement = EVENT_ROWS.guarded_statement(rows, condition)
    assert statement is not None
    trace_batch([statement])
    stored = list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("attempt_id", "seq", "kind", "subject_id", "payload", "invocation_id")
    )
    assert stored == ([row[:6] for row in rows] if holds else [])


def test_a_guarded_insert_too_big_for_one_statement_is_none(attempt: TurnAttempt) -> None:
    rows = _rows(attempt, 1) * (65_535 // len(EVENT_ROWS.columns) + 1)
    assert EVENT_ROWS.guarded_statement(rows, ("true", [])) is None


def test_a_batch_returns_each_statements_rows(attempt: TurnAttempt) -> None:
    results = trace_batch(
        [
            ("SELECT 1 WHERE false", []),
            *EVENT_ROWS.statements(_rows(attempt, 2)),
            (
                "SELECT seq FROM worlds_app_attemptevent WHERE attempt_id = %s ORDER BY seq",
                [attempt.pk],
            ),
        ]
    )
    assert results == [[], None, [(1,), (2,)]]
